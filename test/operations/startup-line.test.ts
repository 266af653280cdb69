import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { resolve } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { describeDatabase } from '../../src/server.js';

const serverEntry = fileURLToPath(new URL('../../src/server.ts', import.meta.url));

describe('the start-up line', () => {
  test('names the database by scheme and host or path, never its credentials or options', () => {
    assert.equal(describeDatabase('postgres://app:hunter2@db.internal:5432/bookstore?password=x'), 'postgres://db.internal:5432/bookstore');
    assert.equal(
      describeDatabase('mssql://sa:Passw0rd%21@localhost:1433/bookstore?trustServerCertificate=true'),
      'mssql://localhost:1433/bookstore',
    );
    assert.equal(describeDatabase('pglite:./data/bookstore'), `pglite:${resolve('data/bookstore')}`);
    assert.match(describeDatabase('pglite:memory'), /^pglite:memory/);
  });

  test('npm start logs where it listens, where the docs are and which database it uses, in one line', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', serverEntry], {
      env: { PATH: process.env.PATH ?? '', PORT: '0', DATABASE_URL: 'pglite:memory', LOG_LEVEL: 'info' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.resume();
    try {
      const deadline = Date.now() + 30_000;
      while (!/API docs at/.test(stdout) && Date.now() < deadline && child.exitCode === null) {
        await new Promise((r) => setTimeout(r, 100));
      }
      const line = stdout.split('\n').find((l) => l.includes('API docs at'));
      assert.ok(line, `no start-up line in:\n${stdout}`);
      const msg = String((JSON.parse(line) as { msg?: unknown }).msg);
      const match = /^listening on (http:\/\/127\.0\.0\.1:(\d+)), API docs at (\S+), database pglite:memory/.exec(msg);
      assert.ok(match, msg);
      assert.equal(match[3], `${match[1]}/docs`);
      const docs = await fetch(match[3], { signal: AbortSignal.timeout(10_000) });
      assert.equal(docs.status, 200, 'the docs URL of the line answers');
    } finally {
      child.kill('SIGTERM');
      if (child.exitCode === null) await once(child, 'exit');
    }
  });
});
