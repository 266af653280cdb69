import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { bookstoreNamesIn, librarySourceFiles, REPOSITORY } from '../support/inbox-library.js';

/**
 * The inbox library (its three entries and every module they import) is another team's library as much
 * as the bookstore's: nothing in it may name the bookstore, its domain, its tables, queues or settings.
 * The packed tarball's files are checked the same way by test/package/adopter.test.ts.
 */
describe("the inbox library's source names nothing of the bookstore", () => {
  const files = librarySourceFiles();

  test('the library is its three entries and what they import', () => {
    for (const entry of ['src/inbox/index.ts', 'src/adapters/fastify/index.ts', 'src/adapters/amqp/index.ts', 'src/inbox/runner.ts']) {
      assert.ok(files.includes(entry), `${entry} is not among ${files.join(', ')}`);
    }
    assert.ok(!files.some((file) => /^src\/(inventory|notifications|routes|plugins|http|messaging|outbox)\//.test(file)), files.join(', '));
  });

  test('no bookstore name in any of its files', () => {
    const found = files.flatMap((file) => bookstoreNamesIn(readFileSync(join(REPOSITORY, file), 'utf8')).map((line) => `${file} ${line}`));
    assert.deepEqual(found, []);
  });

  test('the check finds the names it is for', () => {
    assert.deepEqual(bookstoreNamesIn("export const ATTEMPTS_HEADER = 'x-bookstore-attempts';"), [
      "line 1: export const ATTEMPTS_HEADER = 'x-bookstore-attempts';",
    ]);
    for (const text of [
      'the event source, e.g. urn:bookstore:ordering',
      'with WEBHOOK_SECRET set, within 5 minutes',
      'plus INBOX_RETENTION_DAYS',
      'reserve stock for an order',
      'POST /inventory/order-placed',
      'the book_id column',
    ]) {
      assert.equal(bookstoreNamesIn(text).length, 1, text);
    }
    assert.deepEqual(bookstoreNamesIn('claims keys in key order; INBOX_PROBLEMS; an email; inboxMigrations'), []);
  });
});
