import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

/**
 * The end of start-up sets V8 flags for one collection (src/runtime/startup-memory.ts). A flag the
 * running V8 does not know makes V8 print "Error: unrecognized flag" and "Try --help for options", which
 * on Node 20 (no --flush-liftoff-code) looked like a failed start. Run on this test's node and, when the
 * machine has another (OTHER_NODE, or /usr/bin/node: Debian's Node 20 here), on that one too.
 */

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const SCRIPT = `import { releaseStartupMemory } from './src/runtime/startup-memory.ts';
import { v8HasFlag } from './src/runtime/v8-flags.ts';
releaseStartupMemory();
console.log(JSON.stringify({ liftoff: v8HasFlag('flush-liftoff-code'), gc: v8HasFlag('expose-gc'), globalGc: typeof globalThis.gc }));`;

const nodes = [process.execPath];
const other = process.env.OTHER_NODE ?? '/usr/bin/node';
if (existsSync(other) && other !== process.execPath) nodes.push(other);

for (const node of nodes) {
  const version = execFileSync(node, ['--version'], { encoding: 'utf8' }).trim();
  test(`the start-up collection on ${version} (${node}) prints nothing, and sets only the flags its V8 lists`, () => {
    const run = spawnSync(node, ['--import', 'tsx', '--input-type=module', '-e', SCRIPT], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
    assert.equal(run.status, 0, run.stderr);
    assert.equal(run.stderr, '', 'nothing on stderr');
    assert.doesNotMatch(run.stdout, /unrecognized flag|Try --help/);
    const listed = execFileSync(node, ['--v8-options'], { encoding: 'utf8', maxBuffer: 16 * 1024 * 1024 });
    const seen = JSON.parse(run.stdout.trim().split('\n').at(-1)!) as { liftoff: boolean; gc: boolean; globalGc: string };
    assert.equal(seen.liftoff, /^ {2}--flush-liftoff-code\b/m.test(listed));
    assert.equal(seen.gc, true);
    assert.equal(seen.globalGc, 'undefined', 'gc is not left exposed');
  });
}
