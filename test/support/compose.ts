import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';

/**
 * Reading the deployment files as Docker would: docker-compose.yml interpolated the way
 * `docker compose` does it, an env file, and the Dockerfile's final stage.
 */

export type Env = Record<string, string | undefined>;

/** `${VAR:?message}` or `${VAR?message}` met a missing variable: compose stops with this. */
export class MissingVariableError extends Error {
  override readonly name = 'MissingVariableError';
  constructor(
    readonly variable: string,
    readonly detail: string,
  ) {
    super(`required variable ${variable} is missing a value: ${detail}`);
  }
}

const REFERENCE = /\$(?:(\$)|\{([^}]*)\}|([A-Za-z_][A-Za-z0-9_]*))/g;
const BRACED = /^([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([\s\S]*))?$/;

/**
 * Compose's interpolation of one string: `$$` is a literal `$`; `$VAR`, `${VAR}`; `${VAR:-default}`
 * (unset or empty) and `${VAR-default}` (unset); `${VAR:?message}` and `${VAR?message}` fail;
 * `${VAR:+other}` and `${VAR+other}`. Unset without a default gives "". Nested references in a
 * default are not supported here and fail loudly.
 */
export function interpolate(text: string, env: Env): string {
  return text.replace(REFERENCE, (whole, dollar: string | undefined, braced: string | undefined, bare: string | undefined) => {
    if (dollar !== undefined) return '$';
    if (bare !== undefined) return env[bare] ?? '';
    const match = BRACED.exec(braced!);
    if (match === null) throw new Error(`invalid interpolation format: ${whole}`);
    const [, name, operator, argument = ''] = match as unknown as [string, string, string | undefined, string | undefined];
    if (argument.includes('${')) throw new Error(`nested interpolation is not supported here: ${whole}`);
    const value = env[name];
    const set = value !== undefined;
    const nonEmpty = set && value !== '';
    switch (operator) {
      case undefined:
        return value ?? '';
      case ':-':
        return nonEmpty ? value : argument;
      case '-':
        return set ? value : argument;
      case ':?':
        if (!nonEmpty) throw new MissingVariableError(name, argument);
        return value;
      case '?':
        if (!set) throw new MissingVariableError(name, argument);
        return value;
      case ':+':
        return nonEmpty ? argument : '';
      case '+':
        return set ? argument : '';
      default:
        throw new Error(`invalid interpolation format: ${whole}`);
    }
  });
}

/** Interpolates every string value of a parsed document (keys are left alone, as compose does). */
export function interpolateDocument(node: unknown, env: Env): unknown {
  if (typeof node === 'string') return interpolate(node, env);
  if (Array.isArray(node)) return node.map((item) => interpolateDocument(item, env));
  if (node !== null && typeof node === 'object') {
    return Object.fromEntries(Object.entries(node).map(([key, value]) => [key, interpolateDocument(value, env)]));
  }
  return node;
}

export interface ComposeService {
  image?: string;
  build?: unknown;
  profiles?: string[];
  environment?: Record<string, string | number | boolean | null> | string[];
  depends_on?: Record<string, { condition?: string }> | string[];
  [key: string]: unknown;
}

export interface ComposeFile {
  services: Record<string, ComposeService>;
  volumes?: Record<string, unknown>;
  [key: string]: unknown;
}

/** Parses a compose file's text (anchors and aliases resolved) and interpolates it with env. */
export function renderCompose(text: string, env: Env): ComposeFile {
  return interpolateDocument(parseYaml(text, { merge: true }), env) as ComposeFile;
}

/** Every string value of a compose file, uninterpolated: what compose interpolates (not comments, not keys). */
function values(text: string): string[] {
  const found: string[] = [];
  const walk = (node: unknown): void => {
    if (typeof node === 'string') found.push(node);
    else if (Array.isArray(node)) node.forEach(walk);
    else if (node !== null && typeof node === 'object') Object.values(node).forEach(walk);
  };
  walk(parseYaml(text, { merge: true }));
  return found;
}

function references(text: string): RegExpExecArray[] {
  return values(text).flatMap((value) => [...value.matchAll(REFERENCE)]);
}

/** Names of the variables the file requires (`${VAR:?…}` or `${VAR?…}`), outside `$$` escapes. */
export function requiredVariables(text: string): string[] {
  const names = new Set<string>();
  for (const match of references(text)) {
    const braced = match[2] === undefined ? null : BRACED.exec(match[2]);
    if (braced?.[2] === ':?' || braced?.[2] === '?') names.add(braced[1]!);
  }
  return [...names].sort();
}

/** Every reference to `name` in the file, with its operator ('' for a plain `${VAR}` or `$VAR`). */
export function referencesTo(text: string, name: string): string[] {
  const operators: string[] = [];
  for (const match of references(text)) {
    if (match[3] === name) operators.push('');
    const braced = match[2] === undefined ? null : BRACED.exec(match[2]);
    if (braced?.[1] === name) operators.push(braced[2] ?? '');
  }
  return operators;
}

/**
 * A service's `environment` as the container gets it (mapping or list form). A variable with no
 * value (`KEY:` or `- KEY`) is taken from env, as compose does, and left out when env lacks it.
 */
export function serviceEnvironment(service: ComposeService, env: Env): Record<string, string> {
  const entries: [string, string | undefined][] = Array.isArray(service.environment)
    ? service.environment.map((item) => {
        const at = item.indexOf('=');
        return at < 0 ? [item, env[item]] : [item.slice(0, at), item.slice(at + 1)];
      })
    : Object.entries(service.environment ?? {}).map(([key, value]) => [key, value === null ? env[key] : String(value)]);
  return Object.fromEntries(entries.filter((entry): entry is [string, string] => entry[1] !== undefined));
}

/** The services a service waits for. */
export function dependencies(service: ComposeService): string[] {
  return Array.isArray(service.depends_on) ? service.depends_on : Object.keys(service.depends_on ?? {});
}

/** KEY=VALUE lines of an env file; blank lines and # comments skipped, optional quotes removed. */
export function parseEnvFile(text: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const match = /^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$/.exec(line);
    if (match === null) throw new Error(`not a KEY=VALUE line: ${raw}`);
    env[match[1]!] = match[2]!.replace(/^(['"])(.*)\1$/, '$2');
  }
  return env;
}

export interface DockerStage {
  from: string;
  name: string | undefined;
  workdir: string;
  /** ENV instructions, in order (later ones win). */
  env: Record<string, string>;
  /** Exec-form CMD/ENTRYPOINT, or a shell form wrapped as Docker does. */
  cmd: string[] | undefined;
  entrypoint: string[] | undefined;
  copies: { from: string | undefined; sources: string[]; destination: string }[];
  runs: string[];
}

function execForm(argument: string): string[] {
  const trimmed = argument.trim();
  if (trimmed.startsWith('[')) return JSON.parse(trimmed) as string[];
  return ['/bin/sh', '-c', trimmed];
}

/** The Dockerfile's stages, with what the checks here need (line continuations joined). */
export function parseDockerfile(path: string): DockerStage[] {
  const lines = readFileSync(path, 'utf8')
    .replace(/\\\r?\n/g, ' ')
    .split(/\r?\n/)
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'));
  const stages: DockerStage[] = [];
  for (const line of lines) {
    const [, instruction = '', argument = ''] = /^(\w+)\s+([\s\S]*)$/.exec(line) ?? [];
    const keyword = instruction.toUpperCase();
    if (keyword === 'FROM') {
      const [from = '', , name] = argument.split(/\s+/);
      stages.push({ from, name, workdir: '/', env: {}, cmd: undefined, entrypoint: undefined, copies: [], runs: [] });
      continue;
    }
    const stage = stages.at(-1);
    if (stage === undefined) continue;
    if (keyword === 'WORKDIR') stage.workdir = argument.startsWith('/') ? argument : `${stage.workdir}/${argument}`;
    else if (keyword === 'CMD') stage.cmd = execForm(argument);
    else if (keyword === 'ENTRYPOINT') stage.entrypoint = execForm(argument);
    else if (keyword === 'RUN') stage.runs.push(argument);
    else if (keyword === 'ENV') {
      const pairs = [...argument.matchAll(/([A-Za-z_][A-Za-z0-9_]*)=("[^"]*"|\S*)/g)];
      if (pairs.length === 0) {
        const [name = '', ...rest] = argument.split(/\s+/);
        stage.env[name] = rest.join(' ');
      }
      for (const [, name, value = ''] of pairs) stage.env[name!] = value.replace(/^"(.*)"$/, '$1');
    } else if (keyword === 'COPY') {
      const words = argument.split(/\s+/);
      const from = words.find((word) => word.startsWith('--from='))?.slice('--from='.length);
      const paths = words.filter((word) => !word.startsWith('--'));
      stage.copies.push({ from, sources: paths.slice(0, -1), destination: paths.at(-1) ?? '' });
    }
  }
  return stages;
}
