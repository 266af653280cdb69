import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { sql } from 'kysely';
import { createDatabase } from '../../src/schema/create-database.js';
import { migrateToLatest } from '../../src/schema/migrate.js';

/**
 * The embedded default on disk (`pglite:<dir>`): a new directory is initialised (in a short-lived child process, so
 * initdb's memory is released), migrated, and what was written is there after the database is reopened.
 */
describe('PGlite data directory', { timeout: 180_000 }, () => {
  test('a new directory is created and initialised; rows written survive closing and reopening it', async () => {
    const parent = mkdtempSync(join(tmpdir(), 'bookstore-pglite-'));
    const dir = join(parent, 'data', 'bookstore');
    try {
      const first = await createDatabase(`pglite:${dir}`, { lockTimeoutMs: 5000 });
      try {
        assert.ok(existsSync(join(dir, 'PG_VERSION')), 'the directory holds an initialised cluster');
        await migrateToLatest(first.db);
        await first.db
          .insertInto('stock_items')
          .values({ book_id: '0b7e1a9e-0d0b-4f2a-8a53-7d4c1f0f2e33', title: 'Dune', on_hand: 7, reserved: 2, updated_at: new Date() })
          .execute();
      } finally {
        await first.close();
      }

      const reopened = await createDatabase(`pglite:${dir}`, { lockTimeoutMs: 5000 });
      try {
        const row = await reopened.db.selectFrom('stock_items').select(['title', 'on_hand', 'reserved']).executeTakeFirst();
        assert.deepEqual(row, { title: 'Dune', on_hand: 7, reserved: 2 });
        const settings = await sql<{ shared_buffers: string }>`show shared_buffers`.execute(reopened.db);
        assert.equal(settings.rows[0]?.shared_buffers, '32MB', 'the embedded database runs with its small buffer pool');
      } finally {
        await reopened.close();
      }
    } finally {
      rmSync(parent, { recursive: true, force: true });
    }
  });
});
