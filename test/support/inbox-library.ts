import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

/**
 * The inbox library as an adopter gets it: `npm pack` of packages/inbox (its prepack builds dist/), a
 * throwaway application in the system's temporary directory, outside the repository, that installs the
 * tarball and the peers it needs from the npm registry (the local cache first), and the repository's own
 * TypeScript compiler to type-check that application against the package's published declarations.
 */

const run = promisify(execFile);

export const REPOSITORY = fileURLToPath(new URL('../../', import.meta.url));
export const LIBRARY_DIR = join(REPOSITORY, 'packages/inbox');

/** The library's entries: public name -> the source module it is built from. */
export const LIBRARY_ENTRIES = {
  'bookstore-inventory/inbox': 'src/inbox/index.ts',
  'bookstore-inventory/inbox/machinery': 'src/inbox/machinery.ts',
  'bookstore-inventory/inbox/fastify': 'src/adapters/fastify/index.ts',
  'bookstore-inventory/inbox/amqp': 'src/adapters/amqp/index.ts',
} as const;

interface Manifest {
  name: string;
  version: string;
  dependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
}

export function readManifest(dir: string): Manifest {
  return JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as Manifest;
}

/** The version the repository pins of a package it depends on (what its own tests run). */
export function pinnedVersion(name: string): string {
  const { dependencies = {}, devDependencies = {} } = readManifest(REPOSITORY);
  const version = dependencies[name] ?? devDependencies[name];
  if (version === undefined) throw new Error(`the repository does not depend on ${name}`);
  return version;
}

/**
 * The environment for a child npm: without what an `npm test` running this file sets about the repository
 * (its package, the script, its prefix), which must not follow npm into the application's directory. The
 * user's own npm settings (registry, cache, proxy) stay.
 */
const REPOSITORY_NPM_VARIABLES =
  /^(npm_(package_|lifecycle_|command$|execpath$|node_execpath$|config_(local_prefix|global_prefix|prefix)$)|init_cwd$)/i;
function npmEnvironment(): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([name]) => !REPOSITORY_NPM_VARIABLES.test(name)));
}

async function npm(args: string[], cwd: string, timeoutMs: number): Promise<string> {
  try {
    const { stdout } = await run('npm', args, { cwd, env: npmEnvironment(), timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024 });
    return stdout;
  } catch (error) {
    const { stdout = '', stderr = '' } = error as { stdout?: string; stderr?: string };
    throw new Error(`npm ${args.join(' ')} failed in ${cwd}:\n${stderr}\n${stdout}`, { cause: error });
  }
}

export interface PackedLibrary {
  /** Absolute path of the tarball. */
  readonly tarball: string;
  /** The files in it, relative to the package root. */
  readonly files: readonly string[];
  readonly name: string;
  readonly version: string;
}

/** `npm pack` of packages/inbox into `destination` (the prepack script builds dist/ first). */
export async function packLibrary(destination: string): Promise<PackedLibrary> {
  const stdout = await npm(['pack', LIBRARY_DIR, '--pack-destination', destination, '--json'], REPOSITORY, 240_000);
  const [report] = JSON.parse(stdout) as { filename: string; name: string; version: string; files: { path: string }[] }[];
  if (report === undefined) throw new Error(`npm pack reported nothing: ${stdout}`);
  return {
    tarball: join(destination, report.filename),
    files: report.files.map((file) => file.path),
    name: report.name,
    version: report.version,
  };
}

/** A directory in the system's temporary directory, outside the repository. */
export async function temporaryDirectory(prefix: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  if (!relative(REPOSITORY, dir).startsWith('..')) throw new Error(`${dir} is inside the repository`);
  return dir;
}

export async function removeDirectory(dir: string | undefined): Promise<void> {
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
}

/**
 * Writes an application's package.json (ESM, the tarball and `packages` at the versions the repository
 * pins) and tsconfig.json (NodeNext, strict, as the library's guide asks), then `npm install`s it.
 */
export async function installApplication(
  dir: string,
  tarball: string,
  packages: readonly string[],
  files: readonly string[],
): Promise<void> {
  const dependencies: Record<string, string> = { 'bookstore-inventory': `file:${tarball}` };
  for (const name of packages) dependencies[name] = pinnedVersion(name);
  const manifest = { name: 'inbox-adopter', private: true, type: 'module', dependencies };
  await writeFile(join(dir, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  const compilerOptions = {
    target: 'ES2023',
    lib: ['ES2023'],
    module: 'NodeNext',
    moduleResolution: 'NodeNext',
    strict: true,
    skipLibCheck: true,
    verbatimModuleSyntax: true,
    noEmit: true,
    types: ['node'],
  };
  await writeFile(join(dir, 'tsconfig.json'), `${JSON.stringify({ compilerOptions, files }, null, 2)}\n`);
  await npm(['install', '--prefer-offline', '--no-audit', '--no-fund', '--ignore-scripts', '--loglevel=error'], dir, 300_000);
}

/** One diagnostic of tsc: the file (relative to the project), the line, the code and the message. */
export interface Diagnostic {
  readonly file: string;
  readonly line: number;
  readonly code: string;
  readonly message: string;
}

/** Type-checks the project in `dir` with the repository's TypeScript; its diagnostics, files relative to `dir` (none: it compiles). */
export async function typeCheck(dir: string): Promise<Diagnostic[]> {
  const tsc = createRequire(join(REPOSITORY, 'package.json')).resolve('typescript/bin/tsc');
  let output: string;
  try {
    ({ stdout: output } = await run(process.execPath, [tsc, '-p', 'tsconfig.json', '--pretty', 'false'], { cwd: dir, timeout: 240_000 }));
  } catch (error) {
    output = (error as { stdout?: string }).stdout ?? String(error);
  }
  const diagnostics: Diagnostic[] = [];
  for (const match of output.matchAll(/^(.+?)\((\d+),\d+\): error (TS\d+): (.*)$/gm)) {
    diagnostics.push({ file: match[1]!, line: Number(match[2]), code: match[3]!, message: match[4]! });
  }
  if (diagnostics.length === 0 && output.includes('error')) throw new Error(`tsc failed without a diagnostic:\n${output}`);
  return diagnostics;
}

/**
 * Runs a TypeScript file of the application with Node, its types stripped (or, with `tsx`, through tsx's
 * loader, for files that import each other as `./name.js`); its exit code and output.
 */
export async function runScript(
  dir: string,
  file: string,
  options: { tsx?: boolean; timeoutMs?: number } = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  const loader = options.tsx === true ? ['--import', import.meta.resolve('tsx/esm')] : [];
  const env = { ...npmEnvironment(), NODE_NO_WARNINGS: '1' };
  try {
    const { stdout, stderr } = await run(process.execPath, [...loader, file], { cwd: dir, timeout: options.timeoutMs ?? 60_000, env });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failure = error as { code?: number | string; stdout?: string; stderr?: string };
    return {
      code: typeof failure.code === 'number' ? failure.code : -1,
      stdout: failure.stdout ?? '',
      stderr: failure.stderr ?? String(error),
    };
  }
}

/** The library's source files: its three entries and every module of the repository they import. */
export function librarySourceFiles(): string[] {
  const seen = new Set<string>();
  const pending: string[] = Object.values(LIBRARY_ENTRIES).map((entry) => join(REPOSITORY, entry));
  const relativeImport = /(?:from|import)\s*\(?\s*'(\.{1,2}\/[^']+)\.js'/g;
  while (pending.length > 0) {
    const file = pending.pop()!;
    if (seen.has(file)) continue;
    seen.add(file);
    for (const match of readFileSync(file, 'utf8').matchAll(relativeImport)) pending.push(join(dirname(file), `${match[1]}.ts`));
  }
  return [...seen].map((file) => relative(REPOSITORY, file)).sort();
}

/**
 * The bookstore's own names: its domain's words, its tables, consumers and queues, and every setting
 * (environment variable) the service reads (from src/config.ts). None belongs in the library.
 */
function bookstoreNames(): RegExp[] {
  const settings = new Set(readFileSync(join(REPOSITORY, 'src/config.ts'), 'utf8').match(/'[A-Z][A-Z0-9]*_[A-Z0-9_]+'/g) ?? []);
  return [
    /bookstore/i,
    /inventory/i,
    /\bbooks?\b|book_?id/i,
    /\bstock(s|_\w+|-\w+)?\b/i,
    /reservations?\b|reserve-stock|release-stock/i,
    /order-placed|order-cancelled|orderPlaced|orderCancelled/i,
    ...[...settings].map((quoted) => new RegExp(`\\b${quoted.slice(1, -1)}\\b`)),
  ];
}

/** Each bookstore name in `text`, as `line N: the line` (none: the text is the library's alone). */
export function bookstoreNamesIn(text: string): string[] {
  const patterns = bookstoreNames();
  return text
    .split('\n')
    .flatMap((line, index) => (patterns.some((pattern) => pattern.test(line)) ? [`line ${index + 1}: ${line.trim()}`] : []));
}

export async function readText(file: string): Promise<string> {
  return readFile(file, 'utf8');
}
