import { existsSync } from 'node:fs';

/** Debian's Chromium, driven through playwright-core (which downloads no browser of its own). */
export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

/** For a machine without network: nothing but the page under test may be fetched. */
export const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/**
 * Why a browser test skips (`false` when Chromium is there). .ci/run installs Chromium and sets
 * REQUIRE_CHROMIUM=1, so there a missing browser fails instead of skipping.
 */
export const noChromium: string | false = existsSync(CHROMIUM)
  ? false
  : `${CHROMIUM} is not installed (apt-get install chromium; .ci/run installs it)`;
if (noChromium !== false && process.env.REQUIRE_CHROMIUM === '1') throw new Error(`REQUIRE_CHROMIUM=1 but ${noChromium}`);
