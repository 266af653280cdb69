import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { chromium, type BrowserContext, type Locator, type Page } from 'playwright-core';
import { startServer, type ServerProcess } from '../support/server-process.js';

/**
 * Swagger UI as a new user meets it: Debian's Chromium opens /docs on a fresh service, and the test
 * clicks through it as a person would (Authorize, Try it out, Execute with the documented examples),
 * asserting what the page shows. A screenshot of each step goes to SCREENSHOTS.
 */

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
export const SCREENSHOTS = fileURLToPath(new URL('../../test-results/swagger-ui/', import.meta.url));
/** For a machine without network: nothing but the page under test may be fetched. */
const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];
const TOKEN = 'browser-admin-token-0123456789';
const STEP_MS = 30_000;

const skip = existsSync(CHROMIUM) ? false : `${CHROMIUM} is not installed (apt-get install chromium; .ci/run installs it)`;
// .ci/run installs Chromium and sets REQUIRE_CHROMIUM=1, so there a missing browser fails instead of skipping.
if (skip !== false && process.env.REQUIRE_CHROMIUM === '1') throw new Error(`REQUIRE_CHROMIUM=1 but ${skip}`);

describe('Swagger UI at /docs, driven in Chromium', { skip }, () => {
  let server: ServerProcess;
  let profile: string;
  let context: BrowserContext;
  let page: Page;
  const requested: string[] = [];
  const failed: string[] = [];
  let shot = 0;

  before(async () => {
    server = await startServer({ DATABASE_URL: 'pglite:memory', ADMIN_TOKEN: TOKEN, EMAIL_LOG_FILE: '/dev/null' });
    await rm(SCREENSHOTS, { recursive: true, force: true });
    await mkdir(SCREENSHOTS, { recursive: true });
    profile = await mkdtemp(join(tmpdir(), 'bookstore-chromium-'));
    context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: CHROMIUM_ARGS,
      viewport: { width: 1280, height: 1000 },
    });
    context.setDefaultTimeout(STEP_MS);
    page = context.pages()[0] ?? (await context.newPage());
    page.on('request', (request) => requested.push(request.url()));
    page.on('requestfailed', (request) => failed.push(`${request.url()}: ${request.failure()?.errorText}`));
  });
  after(async () => {
    await context?.close();
    await server?.stop();
    if (profile !== undefined) await rm(profile, { recursive: true, force: true });
  });

  async function screenshot(name: string, target: Locator | Page = page): Promise<void> {
    shot += 1;
    await target.screenshot({ path: join(SCREENSHOTS, `${String(shot).padStart(2, '0')}-${name}.png`) });
  }

  /** Opens an operation and presses "Try it out". */
  async function tryItOut(operationId: string): Promise<Locator> {
    const op = page.locator(`.opblock[id$="-${operationId}"]`);
    await op.locator('.opblock-summary-control').click();
    await op.locator('.try-out__btn').click();
    await op.locator('.btn.execute').waitFor();
    return op;
  }

  /** Presses Execute and reads the live response the page shows: code, headers and body text. */
  async function execute(op: Locator): Promise<{ code: string; headers: string; body: string }> {
    const clear = op.locator('.btn-clear');
    if ((await clear.count()) > 0) await clear.click();
    await op.locator('.btn.execute').click();
    const live = op.locator('.live-responses-table .response');
    await live.first().waitFor();
    const code = (await live.locator('.response-col_status').first().innerText()).trim();
    const description = live.locator('.response-col_description');
    const body = await description.locator('.highlight-code, .microlight').first().innerText();
    const headers = (await description.locator('.microlight').last().innerText()).toLowerCase();
    // Scrolled so that the screenshot of the window shows the request URL and the server's answer.
    // No DOM types here (lib is ES2023): the element is typed by the one method called on it.
    await op
      .locator('.request-url')
      .first()
      .evaluate((el: { scrollIntoView(options: { block: 'start' }): void }) => el.scrollIntoView({ block: 'start' }));
    return { code, headers, body };
  }

  test(
    'Authorize, then PUT /stock, order-placed twice and a reused key, with the examples as they are',
    { timeout: 180_000 },
    async (t) => {
      t.diagnostic(`screenshots: ${SCREENSHOTS}`);
      await page.goto(`${server.baseUrl}/docs`);
      await page.locator('.opblock').first().waitFor();
      assert.equal(
        await page
          .locator('.info .title')
          .first()
          .innerText()
          .then((s) => s.includes('Bookstore Inventory')),
        true,
      );
      await screenshot('docs-loaded');

      // Authorize with the admin token.
      await page.locator('.auth-wrapper .btn.authorize').click();
      const dialog = page.locator('.modal-ux');
      // The dialog lists every scheme (the producers' too); the admin token has its own form.
      const adminAuth = dialog.locator('.auth-container').filter({ hasText: 'adminToken' });
      await adminAuth.locator('input').first().fill(TOKEN);
      await adminAuth.locator('.btn.modal-btn.auth.authorize').click();
      await adminAuth.locator('.btn-done').waitFor();
      await screenshot('authorized', dialog);
      await adminAuth.locator('.btn-done').click();

      // Step 1: PUT /stock/{bookId} with its example: the book is created.
      const setStock = await tryItOut('setStock');
      assert.equal(await setStock.locator('tr[data-param-name="bookId"] input').inputValue(), '0193a1b2-0000-7000-8000-000000000001');
      const created = await execute(setStock);
      assert.equal(created.code, '201', created.body);
      assert.match(created.body, /"title": "Dune"/);
      await screenshot('put-stock-201');

      // Step 2a: the envelope example, twice: processed, then a duplicate replayed.
      const orderPlaced = await tryItOut('orderPlaced');
      const exampleNames = await orderPlaced.locator('.opblock-section-request-body .examples-select-element option').allInnerTexts();
      assert.ok(
        exampleNames.some((n) => n.startsWith('Step 2a')),
        `examples offered: ${exampleNames.join(' | ')}`,
      );
      const body = orderPlaced.locator('textarea.body-param__text');
      assert.match(await body.inputValue(), /"messageId": "order-1001-placed"/);
      const first = await execute(orderPlaced);
      assert.equal(first.code, '201', first.body);
      assert.match(first.body, /"status": "processed"/);
      assert.match(first.body, /"result": "reserved"/);
      await screenshot('order-placed-201');

      const again = await execute(orderPlaced);
      assert.equal(again.code, '200', again.body);
      assert.match(again.body, /"status": "duplicate"/);
      assert.match(again.headers, /idempotent-replayed: true/);
      await screenshot('order-placed-again-200-replayed');

      // The same key with another quantity: 422, and the problem links the dead letter.
      await body.fill((await body.inputValue()).replace('"quantity": 2', '"quantity": 3'));
      const reused = await execute(orderPlaced);
      assert.equal(reused.code, '422', reused.body);
      assert.match(reused.body, /"type": "\/problems\/idempotency-key-reused"/);
      const link = /"deadLetter": "(\/dead-letters\/(\d+))"/.exec(reused.body);
      assert.ok(link, `no dead-letter link in ${reused.body}`);
      await screenshot('key-reused-422-dead-letter-link');

      // Following the link: GET /dead-letters/{id} with the id the 422 gave.
      const deadLetter = await tryItOut('getDeadLetter');
      await deadLetter.locator('tr[data-param-name="id"] input').fill(link[2]!);
      const letter = await execute(deadLetter);
      assert.equal(letter.code, '200', letter.body);
      assert.match(letter.body, /"messageId": "order-1001-placed"/);
      await screenshot('dead-letter-200');

      // Everything the page loaded or called came from the service itself.
      const origin = new URL(server.baseUrl).origin;
      const foreign = requested.filter((url) => !url.startsWith('data:') && new URL(url).origin !== origin);
      assert.deepEqual(foreign, [], 'requests to other origins');
      assert.deepEqual(failed, [], 'failed requests');
      assert.ok(
        requested.some((url) => url.endsWith('/inventory/order-placed')),
        'the page sent the commands itself',
      );
    },
  );
});
