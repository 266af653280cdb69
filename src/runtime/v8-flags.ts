import { execFileSync } from 'node:child_process';
import { setFlagsFromString } from 'node:v8';

/**
 * V8 flags set at run time, only where the running Node's V8 knows them. An unknown flag is not an
 * exception: V8 prints "Error: unrecognized flag …" and "Try --help for options" to the terminal and
 * goes on, which on an older Node (20 has no --flush-liftoff-code) reads like a failed start. The
 * flags V8 knows are what `node --v8-options` lists, read once, when the first flag is set.
 */

let known: ReadonlySet<string> | undefined;

function knownFlags(): ReadonlySet<string> {
  if (known !== undefined) return known;
  try {
    const text = execFileSync(process.execPath, ['--v8-options'], {
      encoding: 'utf8',
      maxBuffer: 16 * 1024 * 1024,
      stdio: ['ignore', 'pipe', 'ignore'],
      timeout: 10_000,
    });
    known = new Set([...text.matchAll(/^ {2}--([a-z0-9_-]+)/gm)].map((m) => m[1]!.replaceAll('_', '-')));
  } catch {
    // Not a node that can list them (an embedder, a single-executable build): set none.
    known = new Set();
  }
  return known;
}

/** Whether the running V8 has the flag (`name` without dashes, e.g. "expose-gc"). */
export function v8HasFlag(name: string): boolean {
  return knownFlags().has(name);
}

/** Sets a boolean V8 flag on or off when the running V8 has it; returns whether it did. */
export function setV8Flag(name: string, on: boolean): boolean {
  if (!v8HasFlag(name)) return false;
  setFlagsFromString(`--${on ? '' : 'no-'}${name}`);
  return true;
}
