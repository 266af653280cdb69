import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { describe, test } from 'node:test';
import { loadConfig } from '../../src/config.js';
import { CONFIG_MEANINGS } from '../../src/config-reference.js';
import {
  acceptedValues,
  CONFIG_DOC_FILES,
  configField,
  renderConfigTable,
  TABLE_END,
  TABLE_START,
  variablesTheLoaderReads,
} from '../../scripts/write-config-docs.js';

describe('the configuration table is generated from the configuration loader', () => {
  test('every variable loadConfig reads has a meaning, and every meaning names a variable it reads', () => {
    const read = variablesTheLoaderReads();
    assert.ok(read.length >= 40, `the loader read only ${read.length} variables: ${read.join(', ')}`);
    const described = Object.keys(CONFIG_MEANINGS);
    assert.deepEqual(
      read.filter((v) => !described.includes(v)),
      [],
      'variables the loader reads with no entry in src/config-reference.ts',
    );
    assert.deepEqual(
      described.filter((v) => !read.includes(v)),
      [],
      'entries in src/config-reference.ts that the loader never reads',
    );
  });

  test('every variable sets the Config field of its camelCase name, which the table reads its default from', () => {
    const defaults = loadConfig({});
    for (const variable of variablesTheLoaderReads()) {
      assert.ok(configField(variable) in defaults, `${variable}: no Config field ${configField(variable)}`);
    }
  });

  test('the accepted values are the ones the loader enforces', () => {
    assert.equal(acceptedValues('PORT'), '0-65535');
    assert.equal(acceptedValues('LOG_LEVEL'), '`fatal`, `error`, `warn`, `info`, `debug`, `trace`, `silent`');
    assert.equal(acceptedValues('HOST'), 'any text');
    // A value at the edge of the documented range is taken, one past it is refused.
    const [min, max] = acceptedValues('INBOX_LOCK_TIMEOUT_MS').split('-').map(Number) as [number, number];
    assert.equal(loadConfig({ INBOX_LOCK_TIMEOUT_MS: String(max) }).inboxLockTimeoutMs, max);
    assert.throws(() => loadConfig({ INBOX_LOCK_TIMEOUT_MS: String(max + 1) }), /INBOX_LOCK_TIMEOUT_MS/);
    assert.throws(() => loadConfig({ INBOX_LOCK_TIMEOUT_MS: String(min - 1) }), /INBOX_LOCK_TIMEOUT_MS/);
  });

  for (const file of CONFIG_DOC_FILES) {
    test(`${file.replace(/.*\/(docs\/)?/, '$1')} holds the generated table, unchanged (npm run docs:config rewrites it)`, async () => {
      const text = await readFile(file, 'utf8');
      const start = text.indexOf(TABLE_START);
      const end = text.indexOf(TABLE_END);
      assert.ok(start !== -1 && end > start, 'the table markers are missing');
      assert.equal(text.slice(start, end + TABLE_END.length), renderConfigTable(), 'the table drifted: run npm run docs:config');
      for (const variable of variablesTheLoaderReads()) assert.ok(text.includes(`| \`${variable}\` |`), `${variable} has no row`);
    });
  }
});
