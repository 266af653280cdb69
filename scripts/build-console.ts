import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { bundleConsole } from '../src/admin/assets.js';

/**
 * Writes the console's bundle next to the compiled service (run by npm run build, after tsc), under the
 * same output directory: tsconfig.build.json's outDir, or the `--outDir` given to npm run build (npm
 * hands the arguments to this last command; the build script passes them on to tsc too).
 */
const { values } = parseArgs({ options: { outDir: { type: 'string' } }, strict: false });
const root = new URL('../', import.meta.url);
const configured = (JSON.parse(await readFile(new URL('tsconfig.build.json', root), 'utf8')) as { compilerOptions: { outDir: string } })
  .compilerOptions.outDir;
const outDir = typeof values.outDir === 'string' ? values.outDir : new URL(configured, root).pathname;
const outdir = new URL(`file://${outDir.replace(/\/?$/, '/')}console/ui-bundle/`);
const assets = await bundleConsole();
await mkdir(outdir, { recursive: true });
await writeFile(new URL('console.js', outdir), assets.js);
await writeFile(new URL('console.css', outdir), assets.css);
console.log(`console bundle: ${assets.js.length} bytes of script, ${assets.css.length} of style, in ${outdir.pathname}`);
