import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';

/**
 * The console's script and style sheet, bundled once per process. `npm run build` writes them next to
 * the compiled service (dist/console/ui-bundle/), and the running service serves those; run from the
 * sources (npm start, the tests), the first request bundles src/console/ui/ with esbuild in memory.
 * Either way nothing is loaded from another origin.
 */

export interface ConsoleAssets {
  js: string;
  css: string;
}

const ENTRY = fileURLToPath(new URL('../console/ui/main.ts', import.meta.url));
const PREBUILT = new URL('../console/ui-bundle/', import.meta.url);

let loading: Promise<ConsoleAssets> | undefined;

/** The bundle, built or read on first use and kept. */
export function consoleAssets(): Promise<ConsoleAssets> {
  loading ??= load().catch((error: unknown) => {
    loading = undefined;
    throw error;
  });
  return loading;
}

async function load(): Promise<ConsoleAssets> {
  try {
    const [js, css] = await Promise.all([
      readFile(new URL('console.js', PREBUILT), 'utf8'),
      readFile(new URL('console.css', PREBUILT), 'utf8'),
    ]);
    return { js, css };
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  return bundleConsole();
}

/** Bundles the console with esbuild (a devDependency: the built service reads the prebuilt files instead). */
export async function bundleConsole(): Promise<ConsoleAssets> {
  const { build } = await import('esbuild');
  const result = await build({
    entryPoints: { console: ENTRY },
    bundle: true,
    write: false,
    outdir: 'console-out',
    format: 'esm',
    target: 'es2022',
    minify: true,
    legalComments: 'none',
    logLevel: 'silent',
  });
  const text = (ext: string) => result.outputFiles.find((file) => file.path.endsWith(ext))?.text ?? '';
  return { js: text('.js'), css: text('.css') };
}
