import { mkdir, writeFile } from 'node:fs/promises';
import { bundleConsole } from '../src/console/assets.js';

/** Writes the console's bundle next to the compiled service (run by npm run build, after tsc). */
const outdir = new URL('../dist/console/ui-bundle/', import.meta.url);
const assets = await bundleConsole();
await mkdir(outdir, { recursive: true });
await writeFile(new URL('console.js', outdir), assets.js);
await writeFile(new URL('console.css', outdir), assets.css);
console.log(`console bundle: ${assets.js.length} bytes of script, ${assets.css.length} of style, in ${outdir.pathname}`);
