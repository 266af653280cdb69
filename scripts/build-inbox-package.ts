import { execFileSync } from 'node:child_process';
import { copyFileSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { builtinModules, createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Builds the inbox library (packages/inbox, published as `bookstore-inventory`): compiles its three
 * entries and every module they import from src/ into packages/inbox/dist, with declarations, and puts
 * the repository's LICENSE beside it. `npm pack` in packages/inbox runs this first (prepack).
 *
 * Then it refuses a package that would not install as declared: every package the compiled code or its
 * declarations import must be a dependency or a peer dependency of the library, a dependency must be the
 * exact version the service pins (the version this repository's tests run), and a peer's range must start
 * at that version (`^x.y.z`), so the range published is the one tested.
 */

const root = fileURLToPath(new URL('../', import.meta.url));
const packageDir = join(root, 'packages/inbox');
const dist = join(packageDir, 'dist');

interface Manifest {
  dependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
}

const readManifest = (dir: string) => JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as Manifest;

function compile(): void {
  rmSync(dist, { recursive: true, force: true });
  const tsc = createRequire(join(root, 'package.json')).resolve('typescript/bin/tsc');
  // Everything this prints goes to stderr: `npm pack --json` prints its report on stdout after it.
  execFileSync(process.execPath, [tsc, '-p', join(packageDir, 'tsconfig.json')], { stdio: ['ignore', 2, 2] });
  copyFileSync(join(root, 'LICENSE'), join(packageDir, 'LICENSE'));
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile() && /\.(js|d\.ts)$/.test(entry.name))
    .map((entry) => join(entry.parentPath, entry.name));
}

/** The package a bare specifier names (`@scope/name/sub` -> `@scope/name`); undefined for a relative one or a builtin. */
function packageOf(specifier: string): string | undefined {
  if (specifier.startsWith('.') || specifier.startsWith('node:') || builtinModules.includes(specifier)) return undefined;
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
}

/** Every package the compiled files import, with a file that imports it. */
function importedPackages(): Map<string, string> {
  const imported = new Map<string, string>();
  const specifiers = /(?:^|\s)(?:import|export)\s[^'"]*?from\s+['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)/gm;
  for (const file of filesUnder(dist)) {
    for (const match of readFileSync(file, 'utf8').matchAll(specifiers)) {
      const name = packageOf(match[1] ?? match[2]!);
      if (name !== undefined && !imported.has(name)) imported.set(name, file.slice(packageDir.length + 1));
    }
  }
  return imported;
}

/** Why the package's manifest does not match what it imports and what the repository tests; empty when it does. */
function manifestProblems(): string[] {
  const library = readManifest(packageDir);
  const service = readManifest(root);
  const pinned = { ...service.dependencies, ...service.devDependencies };
  const dependencies = library.dependencies ?? {};
  const peers = library.peerDependencies ?? {};
  const problems: string[] = [];
  for (const [name, file] of importedPackages()) {
    if (dependencies[name] === undefined && peers[name] === undefined) {
      problems.push(`${file} imports ${name}, which packages/inbox/package.json does not declare`);
    }
  }
  for (const [name, version] of Object.entries(dependencies)) {
    if (pinned[name] !== version) problems.push(`dependency ${name} is ${version}; the repository pins ${pinned[name] ?? 'nothing'}`);
  }
  for (const [name, range] of Object.entries(peers)) {
    if (range !== `^${pinned[name]}`) problems.push(`peer ${name} is ${range}; the repository tests ${pinned[name] ?? 'nothing'}`);
  }
  return problems;
}

compile();
const problems = manifestProblems();
if (problems.length > 0) {
  console.error(`packages/inbox is not publishable:\n  ${problems.join('\n  ')}`);
  process.exit(1);
}
console.error(`inbox library built in ${dist}`);
