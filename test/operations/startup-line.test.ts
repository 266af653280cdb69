import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { resolve } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { describeDatabase, startupLine } from '../../src/server.js';

const serverEntry = fileURLToPath(new URL('../../src/server.ts', import.meta.url));

describe('the start-up line', () => {
  test('names the database by scheme and host or path, never its credentials or options', () => {
    assert.equal(describeDatabase('postgres://app:hunter2@db.internal:5432/bookstore?password=x'), 'postgres://db.internal:5432/bookstore');
    assert.equal(
      describeDatabase('mssql://sa:Passw0rd%21@localhost:1433/bookstore?trustServerCertificate=true'),
      'mssql://localhost:1433/bookstore',
    );
    assert.equal(describeDatabase('mysql://app:hunter2@db.internal:3306/bookstore'), 'mysql://db.internal:3306/bookstore');
    assert.equal(
      describeDatabase('mariadb://app:s%40cret@localhost/bookstore?socketPath=/run/mysqld/mysqld.sock'),
      'mariadb://localhost/bookstore',
    );
    assert.equal(describeDatabase('pglite:./data/bookstore'), `pglite:${resolve('data/bookstore')}`);
    assert.match(describeDatabase('pglite:memory'), /^pglite:memory/);
  });

  test('names the HOST it listens on; on every interface, the docs on loopback', () => {
    assert.equal(
      startupLine('0.0.0.0', 3000, 'pglite:memory'),
      'listening on http://0.0.0.0:3000 (every interface), API docs at http://127.0.0.1:3000/docs, database pglite:memory (in memory, gone at exit)',
    );
    assert.match(
      startupLine('::', 3000, 'pglite:memory'),
      /^listening on http:\/\/\[::\]:3000 \(every interface\), API docs at http:\/\/\[::1\]:3000\/docs/,
    );
    assert.match(
      startupLine('127.0.0.2', 8080, 'pglite:memory'),
      /^listening on http:\/\/127\.0\.0\.2:8080, API docs at http:\/\/127\.0\.0\.2:8080\/docs,/,
    );
  });

  test('with HOST=0.0.0.0 the line says 0.0.0.0, and its docs URL answers', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', serverEntry], {
      env: {
        PATH: process.env.PATH ?? '',
        PORT: '0',
        HOST: '0.0.0.0',
        ALLOW_ANONYMOUS_COMMANDS: 'true',
        DATABASE_URL: 'pglite:memory',
        LOG_LEVEL: 'info',
      },
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
      const match = /^listening on http:\/\/0\.0\.0\.0:(\d+) \(every interface\), API docs at (http:\/\/127\.0\.0\.1:(\d+)\/docs), /.exec(
        msg,
      );
      assert.ok(match, msg);
      assert.equal(match[1], match[3]);
      const docs = await fetch(match[2]!, { signal: AbortSignal.timeout(10_000) });
      assert.equal(docs.status, 200, 'the docs URL of the line answers');
    } finally {
      child.kill('SIGTERM');
      if (child.exitCode === null) await once(child, 'exit');
    }
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
