import assert from 'node:assert/strict';
import { setImmediate as nextTurn, setTimeout as sleep } from 'node:timers/promises';
import { describe, test } from 'node:test';
import { Lane, type LaneOptions } from '../../src/inbox/lane.js';

/** A lane whose runs the test ends: each run is recorded with its items and finishes when told to. */
function controlledLane(options: LaneOptions) {
  const runs: { items: readonly number[]; finish: () => void }[] = [];
  const lane = new Lane<number, number>(
    (items) =>
      new Promise((resolve) => {
        runs.push({ items, finish: () => resolve(items.map((value) => ({ status: 'fulfilled', value: value * 10 }))) });
      }),
    options,
  );
  const results = new Map<number, Promise<number>>();
  const offer = (...items: number[]): void => {
    for (const item of items) results.set(item, lane.offer(item)!);
  };
  /** The results of the items given, once their runs finished. */
  const resultsOf = (...items: number[]) => Promise.all(items.map((item) => results.get(item)!));
  return { lane, runs, offer, resultsOf };
}

/** Lets the lane's end-of-turn start (setImmediate) and the runs' settlements happen. */
async function turns(n = 3): Promise<void> {
  for (let i = 0; i < n; i++) await nextTurn();
}

describe('Lane: a run beside one in flight', () => {
  const options = { maxBatch: 64, concurrency: 2, queueLimit: 100 };

  test('waits until it would carry as many items as the run in flight, then starts with all of them', async () => {
    const { runs, offer, resultsOf } = controlledLane({ ...options, balanceWaitMs: 60_000 });
    offer(1, 2, 3, 4);
    await turns();
    assert.deepEqual(
      runs.map((r) => r.items),
      [[1, 2, 3, 4]],
    );

    offer(5);
    await turns();
    assert.equal(runs.length, 1, 'one queued item does not start a run beside a run of four');
    offer(6, 7);
    await turns();
    assert.equal(runs.length, 1, 'nor do three');
    offer(8);
    await turns();
    assert.deepEqual(
      runs.map((r) => r.items),
      [
        [1, 2, 3, 4],
        [5, 6, 7, 8],
      ],
      'four queued items start the second run',
    );

    runs[0]!.finish();
    runs[1]!.finish();
    assert.deepEqual(await resultsOf(1, 2, 3, 4), [10, 20, 30, 40]);
    assert.deepEqual(await resultsOf(5, 6, 7, 8), [50, 60, 70, 80]);
  });

  test('items that waited start as soon as the run in flight finishes, however few', async () => {
    const { runs, offer, resultsOf } = controlledLane({ ...options, balanceWaitMs: 60_000 });
    offer(1, 2, 3, 4);
    await turns();
    offer(5);
    await turns();
    assert.equal(runs.length, 1);
    runs[0]!.finish();
    await turns();
    assert.deepEqual(
      runs.map((r) => r.items),
      [[1, 2, 3, 4], [5]],
    );
    runs[1]!.finish();
    assert.deepEqual(await resultsOf(1, 2, 3, 4, 5), [10, 20, 30, 40, 50]);
  });

  test('a smaller run starts beside it once the first queued item has waited balanceWaitMs', async () => {
    const { runs, offer, resultsOf } = controlledLane({ ...options, balanceWaitMs: 50 });
    offer(1, 2, 3, 4);
    await turns();
    offer(5);
    await turns();
    assert.equal(runs.length, 1, 'not at once');
    // Bounded: the wait is 50 ms; give it up to 5 s on a busy machine.
    for (let i = 0; i < 500 && runs.length < 2; i++) await sleep(10);
    assert.deepEqual(
      runs.map((r) => r.items),
      [[1, 2, 3, 4], [5]],
      'the run in flight is still unfinished, and the waiting item runs beside it',
    );
    runs[1]!.finish();
    assert.deepEqual(await resultsOf(5), [50]);
    runs[0]!.finish();
    assert.deepEqual(await resultsOf(1, 2, 3, 4), [10, 20, 30, 40]);
  });

  test('balanceWaitMs 0: a free slot starts with whatever is queued', async () => {
    const { runs, offer } = controlledLane({ ...options, balanceWaitMs: 0 });
    offer(1, 2, 3, 4);
    await turns();
    offer(5);
    await turns();
    assert.deepEqual(
      runs.map((r) => r.items),
      [[1, 2, 3, 4], [5]],
    );
    for (const run of runs) run.finish();
  });

  test('the smallest run in flight sets the bar, and never above maxBatch', async () => {
    const { runs, offer } = controlledLane({ maxBatch: 3, concurrency: 3, queueLimit: 100, balanceWaitMs: 60_000 });
    offer(1, 2, 3, 4, 5);
    await turns();
    // Three go in the first run (maxBatch); the two left are fewer than three, so they wait.
    assert.deepEqual(
      runs.map((r) => r.items),
      [[1, 2, 3]],
    );
    offer(6);
    await turns();
    assert.deepEqual(
      runs.map((r) => r.items),
      [
        [1, 2, 3],
        [4, 5, 6],
      ],
    );
    runs[0]!.finish();
    await turns();
    offer(7, 8);
    await turns();
    assert.deepEqual(runs.length, 2, 'two queued items wait beside a run of three');
    offer(9);
    await turns();
    assert.deepEqual(runs.at(-1)!.items, [7, 8, 9]);
    for (const run of runs.slice(1)) run.finish();
  });
});
