import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { jsonInsert, jsonRows } from '../../src/db/json-rows.js';

describe('rows as one JSON parameter (PostgreSQL)', () => {
  const at = new Date('2026-12-01T10:11:12.345Z');

  test('values as JSON, Dates as ISO 8601, a JSON column as the document it holds', () => {
    const text = jsonRows(
      [{ id: 'a"b', n: 3, ok: true, at, data: '{"x":[1,2]}', gone: null }],
      ['id', 'n', 'ok', 'at', 'data', 'gone'],
      new Set(['data']),
    );
    assert.deepEqual(JSON.parse(text!), [{ id: 'a"b', n: 3, ok: true, at: '2026-12-01T10:11:12.345Z', data: { x: [1, 2] }, gone: null }]);
  });

  test('no JSON form: a row that leaves a column out or adds one, a value JSON cannot carry', () => {
    assert.equal(jsonRows([{ a: 1, b: 2 }, { a: 1 }], ['a', 'b']), undefined, 'a column left to its default');
    assert.equal(
      jsonRows(
        [
          { a: 1, b: 2 },
          { a: 1, b: undefined },
        ],
        ['a', 'b'],
      ),
      undefined,
      'undefined is the default too',
    );
    assert.equal(jsonRows([{ a: 1 }, { a: 1, b: 2 }], ['a']), undefined, 'a column the first row does not set');
    assert.equal(jsonRows([{ a: 10n }], ['a']), undefined, 'a bigint');
    assert.equal(jsonRows([{ a: Number.NaN }], ['a']), undefined, 'NaN');
  });

  test('one statement text per table, columns and clauses, whatever the row count; falls back without a JSON form', () => {
    const shape = { table: 'outbox', conflict: ['id'] };
    const two = jsonInsert(shape, [
      { id: 'e1', data: '{}' },
      { id: 'e2', data: '{}' },
    ]);
    const three = jsonInsert(shape, [
      { id: 'e3', data: '{}' },
      { id: 'e4', data: '{}' },
      { id: 'e5', data: '{}' },
    ]);
    assert.equal(
      two!.sql,
      'insert into "outbox" ("id", "data") select "id", "data" from json_populate_recordset(null::"outbox", cast($1 as json)) on conflict ("id") do nothing',
    );
    assert.equal(three!.sql, two!.sql);
    assert.equal(three!.parameters.length, 1);
    assert.equal(
      jsonInsert({ table: 'inbox', returning: 'message_id' }, [{ message_id: 'm' }])!.sql.endsWith(' returning "message_id"'),
      true,
    );
    assert.equal(
      jsonInsert(shape, [
        { id: 'e6', data: undefined },
        { id: 'e7', data: '{}' },
      ]),
      undefined,
    );
    assert.equal(jsonInsert(shape, []), undefined);
  });
});
