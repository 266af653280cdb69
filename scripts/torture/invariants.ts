/** The HTTP mode's checks after the run: the database against the acknowledgements, and the long run's HTTP fuzzing. */
import canonicalize from 'canonicalize';
import { say, violation } from './log.js';
import { allLines, allMessages, lineKey, RELEASE, RESERVE, same, type Outcome } from './messages.js';
import { liveReservedByBook, withRows, type ReservationRow } from './database.js';
import { repoRoot, spawnTracked } from './processes.js';
import { stats } from './report.js';

/** Groups rows by a key. */
function groupBy<T>(rows: readonly T[], key: (row: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const row of rows) {
    const k = key(row);
    const group = groups.get(k);
    if (group === undefined) groups.set(k, [row]);
    else group.push(row);
  }
  return groups;
}

/** Reads the database at `url` (PostgreSQL or MariaDB/MySQL) and reports every invariant it breaks as a violation. */
export async function checkInvariants(url: string): Promise<void> {
  await withRows(url, async (db) => {
    const stock = await db.stock();
    const reservations = await db.reservations();
    const inbox = (await db.inbox()).map((row) => ({ ...row, outcome: row.outcome as Outcome | null }));
    const deadLetters = await db.count('dead_letters');
    say(`invariants: ${stock.length} books, ${reservations.length} reservations, ${inbox.length} inbox rows, ${deadLetters} dead letters`);

    const inboxByKey = groupBy(inbox, (row) => `${row.consumer} ${row.message_id}`);
    const reservationsByLine = new Map(reservations.map((r) => [lineKey(r.order_id, r.book_id), r]));

    // Stock figures against the live reservations.
    const liveSum = liveReservedByBook(reservations);
    for (const s of stock) {
      const live = liveSum.get(s.book_id) ?? 0;
      if (s.reserved !== live) violation('reserved-sum', `book ${s.book_id}: reserved ${s.reserved}, live reservations sum to ${live}`);
      if (s.reserved < 0 || s.reserved > s.on_hand) {
        violation('stock-bounds', `book ${s.book_id}: reserved ${s.reserved}, on hand ${s.on_hand}`);
      }
    }

    // Every reservation has the inbox row that made it, and its release the row that released it.
    for (const r of reservations) {
      const where = `${r.order_id}/${r.book_id}`;
      const reservedBy = inboxByKey.get(`${RESERVE} ${r.reserved_by}`)?.[0];
      const o = reservedBy?.outcome;
      if (reservedBy === undefined) {
        violation('orphan-reservation', `${where} reserved_by ${r.reserved_by} has no ${RESERVE} inbox row`);
      } else if (o?.result !== 'reserved' || o.orderId !== r.order_id || o.bookId !== r.book_id || o.quantity !== r.quantity) {
        violation('orphan-reservation', `${where} reserved_by ${r.reserved_by}, whose recorded outcome is ${canonicalize(o)}`);
      }
      if ((r.released_by === null) !== (r.released_at === null)) {
        violation('release-columns', `${where}: released_by ${r.released_by}, released_at ${String(r.released_at)}`);
      }
      if (r.released_by !== null) {
        const ro = inboxByKey.get(`${RELEASE} ${r.released_by}`)?.[0]?.outcome;
        const listed = ro?.result === 'released' && ro.released?.some((x) => x.bookId === r.book_id && x.quantity === r.quantity) === true;
        if (!listed || ro.orderId !== r.order_id) {
          violation('orphan-release', `${where} released_by ${r.released_by}, whose recorded outcome is ${canonicalize(ro)}`);
        }
      }
    }

    for (const row of inbox) {
      if (row.completed_at === null) violation('in-progress', `${row.consumer} ${row.message_id} is left in progress`);
    }
    if (deadLetters > 0) violation('dead-letters', `${deadLetters} dead letters, but every copy of a message was identical`);

    // Every acknowledged message took effect once, as acknowledged.
    const known = new Set(allMessages.map((m) => `${m.consumer} ${m.key}`));
    for (const k of inboxByKey.keys()) if (!known.has(k)) violation('foreign-inbox-row', `${k} was never sent`);
    const reservedBy = groupBy(reservations, (r) => r.reserved_by);
    const releasedBy = groupBy(
      reservations.filter((r): r is ReservationRow & { released_by: string } => r.released_by !== null),
      (r) => r.released_by,
    );
    for (const m of allMessages) {
      const ack = m.acks[0];
      if (ack === undefined) continue;
      const rows = inboxByKey.get(`${m.consumer} ${m.key}`) ?? [];
      const row = rows[0];
      if (rows.length !== 1 || row === undefined) {
        violation('inbox-row-count', `${m.consumer} ${m.key}: ${rows.length} inbox rows for an acknowledged message`);
        continue;
      }
      const outcome = ack.body.outcome;
      if (!same(row.outcome, outcome)) {
        const recorded = canonicalize(row.outcome);
        violation('recorded-outcome', `${m.consumer} ${m.key}: recorded ${recorded}, acknowledged ${canonicalize(outcome)}`);
      }
      if (m.consumer === RESERVE) {
        const made = reservedBy.get(m.key) ?? [];
        const expected = outcome.result === 'reserved' ? 1 : 0;
        if (made.length !== expected) violation('reserve-effect', `${m.key} (${outcome.result}) reserved ${made.length} rows`);
      } else {
        const released = (releasedBy.get(m.key) ?? [])
          .map((r) => ({ bookId: r.book_id, quantity: r.quantity }))
          .sort((a, b) => (a.bookId < b.bookId ? -1 : 1));
        const expected = outcome.result === 'released' ? outcome.released : [];
        if (!same(released, expected)) {
          violation('release-effect', `${m.key}: released ${canonicalize(released)}, acknowledged ${canonicalize(expected)}`);
        }
      }
    }

    // The clients' own model of every order line agrees with the rows.
    for (const line of allLines.values()) {
      const row = reservationsByLine.get(lineKey(line.orderId, line.bookId));
      const where = `line ${line.orderId}/${line.bookId}`;
      if (line.state === 'none') {
        if (row !== undefined && stats.unacknowledged === 0) {
          violation('model', `${where}: never acknowledged as reserved, yet reserved by ${row.reserved_by}`);
        }
      } else if (row === undefined) {
        violation('model', `${where}: acknowledged ${line.state} by ${line.reservedBy}, but no reservation row`);
      } else if (row.reserved_by !== line.reservedBy || row.quantity !== line.quantity) {
        violation('model', `${where}: reserved_by ${row.reserved_by} x${row.quantity}, acknowledged ${line.reservedBy} x${line.quantity}`);
      } else if (line.state === 'released' ? row.released_by !== line.releasedBy : row.released_by !== null) {
        violation('model', `${where}: released_by ${row.released_by}, acknowledged ${line.releasedBy ?? 'live'}`);
      }
    }
  });
}

/** The long run also fuzzes the HTTP API with many cases (test/fuzz.test.ts) on this cluster; returns whether it passed. */
export async function runFuzz(runs: number, adminUrl: string, deadline: number): Promise<boolean> {
  say(`fuzz: test/fuzz.test.ts with FUZZ_RUNS=${runs}`);
  const child = spawnTracked(process.execPath, ['--import', 'tsx', '--test', '--test-reporter=dot', 'test/fuzz.test.ts'], {
    cwd: repoRoot,
    env: { ...process.env, FUZZ_RUNS: String(runs), TEST_POSTGRES_URL: adminUrl, REQUIRE_POSTGRES: '1' },
  });
  let output = '';
  child.stdout?.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr?.on('data', (c: Buffer) => (output += c.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), Math.max(1000, deadline - Date.now()));
  const code = await new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
  clearTimeout(timer);
  const tail = output.trim().split('\n').slice(-12).join('\n');
  say(`fuzz: exit ${code}\n${tail}`);
  if (code !== 0) violation('fuzz', `test/fuzz.test.ts failed (exit ${code}); last lines: ${tail.slice(-1500)}`);
  return code === 0;
}
