import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance } from 'fastify';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { eventually, skipWithoutAmqp, TestBroker, uniqueTopology } from '../support/amqp.js';
import { testDatabases, type TestDatabaseHandle } from '../support/databases.js';
import { FakeEmailProvider } from '../support/fake-email-provider.js';
import { ADMIN_TOKEN, inboxRows, newId, orderPlaced, placeOrder, seedBook, stockRow, testApp } from '../support/fixtures.js';
import { CHROMIUM, CHROMIUM_ARGS, noChromium } from '../support/chromium.js';

/**
 * An operator's morning in the console, in Debian's Chromium: the service (listening on loopback, fed
 * over HTTP and by its RabbitMQ queues) has a stuck email, a poison message dead-lettered by a bug that
 * has since been fixed, a group of messages that break the schema, a group that is not JSON at all and a
 * key-reuse dead letter. The operator, who first meets only the token prompt, looks at the overview on a
 * 420 px screen too, settles the email, replays the poison, tries one of the schema breakers (it fails
 * again, and says so), discards both groups, reads why the key reuse cannot be replayed and looks up a
 * key that is not there; the test asserts the rows afterwards. A screenshot of each step goes to SCREENSHOTS.
 */

export const SCREENSHOTS = fileURLToPath(new URL('../../test-results/console/', import.meta.url));
const STEP_MS = 30_000;
const LEASE_MS = 30_000;
const RESERVE = 'inventory.reserve-stock';
const NARROW = { width: 420, height: 900 };
const WIDE = { width: 1360, height: 900 };
const EMAIL = 'notifications.stock-reserved-email';

const skip = noChromium || skipWithoutAmqp;

class TestClock {
  private offsetMs = 0;
  readonly now = () => new Date(Date.now() + this.offsetMs);
  advance(ms: number) {
    this.offsetMs += ms;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

describe("the operator console: an operator's morning, driven in Chromium", { skip }, () => {
  let database: TestDatabaseHandle;
  let app: FastifyInstance;
  let baseUrl: string;
  let provider: FakeEmailProvider;
  let broker: TestBroker;
  let profile: string;
  let context: BrowserContext;
  let page: Page;
  const clock = new TestClock();
  const topology = uniqueTopology();
  const requested: string[] = [];
  const failed: string[] = [];
  let bugPresent = true;
  let crashAfterSend = false;
  let shot = 0;
  const poisonKey = `order-${newId()}-placed`;

  before(async () => {
    database = await testDatabases[0]!.open();
    provider = new FakeEmailProvider(false);
    const providerUrl = await provider.start();
    broker = await TestBroker.open(topology);
    app = await testApp(database, {
      now: clock.now,
      config: {
        ...topology,
        amqpMaxDeliveries: 1,
        amqpRetryDelayMs: 50,
        amqpRetryMaxDelayMs: 400,
        outboxRelayIntervalMs: 100,
        outboxRelayMaxBackoffMs: 400,
        emailProvider: 'http',
        emailProviderUrl: providerUrl,
        emailProviderIdempotent: false,
        inboxLeaseMs: LEASE_MS,
      },
      testHooks: {
        // The bug of the morning: reserving this order fails inside its transaction until it is fixed.
        beforeCommit: async (message) => {
          if (bugPresent && message.messageId === poisonKey) throw new Error('TypeError: cannot read the warehouse of the book');
        },
        afterSideEffect: async () => {
          if (crashAfterSend) throw new Error('the replica died after the email was sent');
        },
      },
    });
    baseUrl = await app.listen({ port: 0, host: '127.0.0.1' });
    await rm(SCREENSHOTS, { recursive: true, force: true });
    await mkdir(SCREENSHOTS, { recursive: true });
    profile = await mkdtemp(join(tmpdir(), 'bookstore-console-chromium-'));
    context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: CHROMIUM_ARGS,
      viewport: WIDE,
    });
    context.setDefaultTimeout(STEP_MS);
    page = context.pages()[0] ?? (await context.newPage());
    page.on('request', (request) => requested.push(request.url()));
    page.on('requestfailed', (request) => failed.push(`${request.url()}: ${request.failure()?.errorText}`));
  });
  after(async () => {
    await context?.close();
    await app?.close();
    await broker?.close();
    await provider?.stop();
    if (profile !== undefined) await rm(profile, { recursive: true, force: true });
    await database?.close();
  });

  async function screenshot(name: string): Promise<void> {
    shot += 1;
    await page.screenshot({ path: join(SCREENSHOTS, `${String(shot).padStart(2, '0')}-${name}.png`), fullPage: true });
  }

  /** Presses a view's button in the navigation. */
  async function openView(name: string): Promise<void> {
    await page.getByRole('navigation', { name: 'Views' }).getByRole('button', { name, exact: true }).click();
  }

  async function deadLetterReasons(): Promise<string[]> {
    const rows = await app.db.selectFrom('dead_letters').select('reason').orderBy('id').execute();
    return rows.map((r) => r.reason);
  }

  /** Orders placed at once (group commit takes them in batches), then every other one sent again. */
  async function traffic(bookId: string, orders: number): Promise<void> {
    const messages = Array.from({ length: orders }, () => orderPlaced(bookId, 1));
    const first = await Promise.all(messages.map((m) => placeOrder(app, m)));
    assert.deepEqual(
      first.map((r) => r.statusCode),
      messages.map(() => 201),
    );
    for (const m of messages.filter((_, i) => i % 2 === 0)) assert.equal((await placeOrder(app, m)).statusCode, 200);
  }

  test('a stuck email settled, a poison message replayed after its fix, a dead-letter group discarded', { timeout: 240_000 }, async (t) => {
    t.diagnostic(`screenshots: ${SCREENSHOTS}`);

    // ---- The night before: traffic, a crash mid-email, poison and junk on the queue, a reused key. ----
    const bookId = await seedBook(app, 50);
    await traffic(bookId, 6);

    const emailKey = `email-${newId()}`;
    crashAfterSend = true;
    const crashed = await app.inject({
      method: 'POST',
      url: '/notifications/stock-reserved-email',
      payload: { messageId: emailKey, data: { orderId: newId(), bookId, quantity: 1, email: 'ada@example.org' } },
    });
    crashAfterSend = false;
    assert.equal(crashed.statusCode, 500);
    clock.advance(LEASE_MS + 5000);

    const poisonOrder = newId();
    broker.send(topology.amqpOrderPlacedQueue, { messageId: poisonKey, data: { orderId: poisonOrder, bookId, quantity: 3 } });
    const junkKeys = [0, 1, 2].map((i) => `junk-${i}-${newId()}`);
    for (const key of junkKeys)
      broker.send(topology.amqpOrderPlacedQueue, { messageId: key, data: { orderId: newId(), bookId, quantity: '3' } });
    // Two messages cut short on the queue: not JSON, so nothing a fix could ever run.
    const tornKeys = [0, 1].map((i) => `torn-${i}-${newId()}`);
    for (const key of tornKeys) broker.send(topology.amqpOrderPlacedQueue, `{"messageId":"${key}","data":{"orderId":`, { messageId: key });
    const reused = orderPlaced(bookId, 1);
    assert.equal((await placeOrder(app, reused)).statusCode, 201);
    assert.equal((await placeOrder(app, { ...reused, data: { ...reused.data, quantity: 5 } })).statusCode, 422);
    await eventually(
      'the poison and the junk dead-lettered',
      async () => ((await deadLetterReasons()).length === 7 ? true : undefined),
      30_000,
    );
    assert.deepEqual((await deadLetterReasons()).sort(), [
      'delivery-limit',
      'fingerprint-mismatch',
      'invalid-request',
      'invalid-request',
      'invalid-request',
      'malformed-json',
      'malformed-json',
    ]);
    assert.equal((await stockRow(app.db, bookId))?.reserved, 7, 'six orders and the reused key, nothing of the poison');

    // A few more sampled intervals of traffic, so the plots have a shape (a point every 5 s).
    for (let round = 0; round < 2; round++) {
      await sleep(5200);
      await traffic(bookId, 3 + round * 3);
    }
    const reservedBefore = (await stockRow(app.db, bookId))!.reserved;

    // ---- Morning: the overview says what needs a person. ----
    await page.goto(`${baseUrl}/console`);
    // Before the token: the prompt for it, and nothing else (no view, no "Loading…", no 401 under it).
    const prompt = page.getByTestId('authentication-prompt');
    await prompt.waitFor();
    assert.match(await prompt.innerText(), /Authentication required[\s\S]*Enter it above/);
    assert.equal(await page.locator('main').innerText(), await prompt.innerText(), 'only the prompt in the page');
    assert.equal(await page.getByRole('navigation', { name: 'Views' }).count(), 0, 'no views to choose yet');
    assert.equal(await page.getByRole('alert').count(), 0, 'no error beside the prompt');
    assert.equal(await page.getByText('Loading…').count(), 0);
    await screenshot('before-the-token');
    await page.getByLabel('Admin token').fill(ADMIN_TOKEN);
    await page.getByRole('button', { name: 'Use token' }).click();
    const attention = page.getByTestId('attention');
    await attention.waitFor();
    assert.equal(await attention.innerText(), 'Needs a person: 1 side effect to settle; 7 dead letters.');
    assert.equal(await page.getByTestId('needs-reconciliation').innerText(), '1');
    await page.locator('.plot canvas').first().waitFor();
    assert.equal(await page.locator('.plot canvas').count(), 2, 'two plots');
    await screenshot('overview');

    // Every control has a name a screen reader says: a label or aria-label.
    const unlabelled = await page.evaluate<string[]>(`[...document.querySelectorAll('input, select, button')]
      .filter((el) => (el.labels?.length ?? 0) === 0 && !el.getAttribute('aria-label') && el.textContent.trim() === '')
      .map((el) => el.outerHTML)`);
    assert.deepEqual(unlabelled, []);

    // ---- On a 420 px screen: the plots fit their cards, the page does not scroll sideways, keys break only between their parts. ----
    await page.setViewportSize(NARROW);
    await page.waitForFunction(`[...document.querySelectorAll('.plot')].every((figure) => {
      const plot = figure.querySelector('.uplot');
      return plot !== null && plot.getBoundingClientRect().width <= figure.clientWidth;
    })`);
    const plots = await page.evaluate<{ figure: number[]; parts: number[][] }[]>(`[...document.querySelectorAll('.plot')].map((figure) => {
      const box = figure.getBoundingClientRect();
      return {
        figure: [box.left, box.right],
        parts: [...figure.querySelectorAll('.uplot, canvas, .u-legend')].map((el) => {
          const r = el.getBoundingClientRect();
          return [r.left, r.right];
        }),
      };
    })`);
    assert.equal(plots.length, 2);
    for (const { figure, parts } of plots) {
      assert.ok(parts.length >= 3, 'the plot, its canvas and its legend');
      for (const [left, right] of parts)
        assert.ok(left! >= figure[0]! && right! <= figure[1]!, `inside its card: ${JSON.stringify({ figure, parts })}`);
    }
    assert.ok((await page.evaluate<number>('document.documentElement.scrollWidth')) <= NARROW.width, 'nothing wider than the screen');
    await screenshot('overview-420px');
    await openView('Needs a person');
    await page.locator(`tr[data-key="${emailKey}"]`).waitFor();
    assert.ok((await page.evaluate<number>('document.documentElement.scrollWidth')) <= NARROW.width, 'nothing wider than the screen');
    // Each part of a key (keyParts: up to a ".", ":", "/", "|" or "@", or a piece of a long part cut at a hyphen) is on one line.
    const keys = await page.evaluate<
      { text: string; lines: number; partsBroken: string[] }[]
    >(`[...document.querySelectorAll('code.key')].map((key) => ({
      text: key.textContent,
      lines: new Set([...key.querySelectorAll(':scope > span')].map((part) => Math.round(part.getBoundingClientRect().top))).size,
      partsBroken: [...key.querySelectorAll(':scope > span:not(.long)')].filter((part) => part.getClientRects().length > 1).map((part) => part.textContent),
    }))`);
    const downstream = keys.find((k) => k.text === `${EMAIL}:${emailKey}`);
    assert.ok(downstream !== undefined, 'the downstream key is shown');
    assert.ok(downstream.lines > 1, 'the downstream key wraps on a narrow screen');
    assert.deepEqual(
      keys.filter((k) => k.partsBroken.length > 0),
      [],
      'no key broken inside a part',
    );
    const emailKeyShown = keys.find((k) => k.text === emailKey)!;
    assert.deepEqual(emailKeyShown.partsBroken, []);
    await screenshot('needs-a-person-420px');
    await page.setViewportSize(WIDE);

    // ---- The stuck email: the provider's log shows it went out. Settled from the keyboard. ----
    await openView('Needs a person');
    const row = page.locator(`tr[data-key="${emailKey}"]`);
    await row.waitFor();
    const cells = await row.locator('td').allInnerTexts();
    assert.equal(cells[0], EMAIL);
    assert.equal(cells[3], '1', 'one attempt');
    assert.equal(cells[5], `${EMAIL}:${emailKey}`, 'the downstream key to look up at the provider');
    assert.equal(provider.requests[0]?.idempotencyKey, `${EMAIL}:${emailKey}`);
    await row.getByLabel(`Note for ${emailKey}`).fill('provider log: delivered 06:12');
    await row.getByRole('button', { name: 'It happened' }).focus();
    await page.keyboard.press('Enter');
    await row.getByRole('button', { name: 'Confirm' }).waitFor();
    await screenshot('email-confirm');
    // The confirm button took the focus: Enter settles it.
    await page.keyboard.press('Enter');
    await page.getByRole('status').filter({ hasText: 'recorded as done' }).waitFor();
    await page.getByTestId('nothing-stuck').waitFor();
    await screenshot('email-settled');
    const email = await inboxRows(app.db, emailKey);
    assert.equal(email.length, 1);
    assert.notEqual(email[0]!.completed_at, null, 'the record is completed');
    assert.equal((email[0]!.outcome as { result: string; note: string }).result, 'reconciled');
    assert.equal((email[0]!.outcome as { note: string }).note, 'provider log: delivered 06:12');
    assert.equal(provider.requests.length, 1, 'no second email');

    // ---- The poison message: the bug is fixed (deployed), then the letter is replayed under its key. ----
    bugPresent = false;
    await openView('Dead letters');
    const poisonGroup = page.locator(`tr[data-group="${RESERVE}/delivery-limit"]`);
    await poisonGroup.waitFor();
    assert.equal((await poisonGroup.locator('td').allInnerTexts())[2], '1');
    await page.getByLabel('Search by key').fill(poisonKey);
    await page.getByRole('button', { name: 'Search', exact: true }).click();
    const letter = page.locator('.letter').filter({ hasText: poisonKey });
    await letter.waitFor();
    assert.match(await letter.innerText(), /delivery-limit/);
    assert.match(await letter.innerText(), /cannot read the warehouse of the book/);
    assert.match(await letter.getByLabel(/^Payload of dead letter/).innerText(), new RegExp(poisonOrder));
    await letter.getByRole('button', { name: 'Replay' }).click();
    await letter.getByRole('button', { name: 'Confirm' }).click();
    await page.getByRole('status').filter({ hasText: 'processed: it ran under its key' }).waitFor();
    await letter.waitFor({ state: 'detached' });
    await screenshot('poison-replayed');
    const poisonInbox = await inboxRows(app.db, poisonKey);
    assert.equal(poisonInbox.length, 1);
    assert.equal(poisonInbox[0]!.consumer, RESERVE);
    assert.notEqual(poisonInbox[0]!.completed_at, null);
    assert.equal((poisonInbox[0]!.outcome as { result: string }).result, 'reserved');
    assert.equal((await stockRow(app.db, bookId))?.reserved, reservedBefore + 3, 'the poison order reserved, once');
    assert.equal((await deadLetterReasons()).includes('delivery-limit'), false, 'its dead letter is gone');

    // ---- The key reuse: the console says why it cannot be replayed. ----
    await page.getByLabel('Search by key').fill(reused.messageId);
    await page.getByRole('button', { name: 'Search', exact: true }).click();
    const reuseLetter = page.locator('.letter').filter({ hasText: reused.messageId });
    await reuseLetter.waitFor();
    assert.match(await reuseLetter.getByTestId('why-not').innerText(), /with another payload first.*refused again/);
    assert.equal(await reuseLetter.getByRole('button', { name: 'Replay' }).count(), 0);
    await screenshot('key-reuse-explained');

    // ---- The schema breakers: one replayed to see, and it fails again: shown as a failure, in its group only. ----
    const junkGroup = page.locator(`tr[data-group="${RESERVE}/invalid-request"]`);
    await junkGroup.waitFor();
    assert.equal((await junkGroup.locator('td').allInnerTexts())[2], '3');
    await junkGroup.getByRole('button', { name: 'Show letters' }).click();
    const groupLetters = page.getByLabel('Letters of the group').locator('.letter');
    await groupLetters.nth(2).waitFor();
    assert.match(await groupLetters.first().innerText(), /quantity must be integer/);
    await groupLetters.first().getByRole('button', { name: 'Replay' }).click();
    await groupLetters.first().getByRole('button', { name: 'Confirm' }).click();
    const replayFailed = page
      .getByLabel('Letters of the group')
      .getByRole('alert')
      .filter({ hasText: 'replay failed, dead-lettered again (invalid-request)' });
    await replayFailed.waitFor();
    assert.match(String(await replayFailed.getAttribute('class')), /\bfailed\b/, 'shown as a failure');
    assert.equal(await page.getByRole('status').filter({ hasText: 'dead-lettered again' }).count(), 0, 'not as a success');
    await screenshot('replay-failed-again');

    // ---- The messages that are not JSON: no replay offered, for the group or a letter; discarded as a group. ----
    const tornGroup = page.locator(`tr[data-group="${RESERVE}/malformed-json"]`);
    assert.equal((await tornGroup.locator('td').allInnerTexts())[2], '2');
    assert.equal(await tornGroup.getByRole('button', { name: 'Replay group' }).count(), 0);
    assert.match(await tornGroup.locator('.why-not').innerText(), /not JSON/);
    await tornGroup.getByRole('button', { name: 'Show letters' }).click();
    await page.getByLabel('Letters of the group').getByText(tornKeys[0]!).waitFor();
    assert.equal(
      await page.getByLabel('Letters of the group').locator('[data-result]').count(),
      0,
      "the other group's replay result is not shown under this one",
    );
    assert.equal(await page.getByLabel('Letters of the group').getByRole('button', { name: 'Replay' }).count(), 0);
    await screenshot('not-json-group');
    await tornGroup.getByRole('button', { name: 'Discard group' }).click();
    await tornGroup.getByRole('button', { name: 'Confirm' }).click();
    await page.getByRole('status').filter({ hasText: '2 of 2 discarded — 0 left' }).waitFor();

    // ---- The schema breakers: nothing a fix can save after all; discarded as a group, with progress. ----
    await junkGroup.getByRole('button', { name: 'Show letters' }).click();
    await groupLetters.nth(2).waitFor();
    assert.equal(await page.getByText('2 of 2 discarded').count(), 0, "the other group's progress is not shown under this one");
    await junkGroup.getByRole('button', { name: 'Discard group' }).click();
    await junkGroup.getByRole('button', { name: 'Confirm' }).click();
    await page.getByRole('status').filter({ hasText: '3 of 3 discarded — 0 left' }).waitFor();
    await screenshot('group-discarded');
    assert.deepEqual(await deadLetterReasons(), ['fingerprint-mismatch'], 'only the key reuse is left');
    for (const key of [...junkKeys, ...tornKeys]) assert.deepEqual(await inboxRows(app.db, key), [], 'nothing of the junk was applied');

    // ---- One key, and the outbox. ----
    await openView('Look up a key');
    await page.getByLabel('Consumer').selectOption(RESERVE);
    await page.getByLabel('Key', { exact: true }).fill(poisonKey);
    await page.getByRole('button', { name: 'Look up', exact: true }).click();
    const record = page.getByTestId('inbox-record');
    await record.waitFor();
    assert.match(await record.innerText(), /completed/);
    assert.match(await record.innerText(), /"result": "reserved"/);
    await page.getByRole('table', { name: 'Outbox events of this key' }).waitFor();
    assert.match(await page.getByRole('table', { name: 'Outbox events of this key' }).innerText(), /stock/);
    await screenshot('key-looked-up');

    // A key with no record: the 404, and nothing left of the record looked up before.
    await page.getByLabel('Key', { exact: true }).fill('no-such-key');
    await page.getByRole('button', { name: 'Look up', exact: true }).click();
    await page.getByLabel('Inbox record').getByRole('alert').filter({ hasText: '404' }).waitFor();
    assert.equal(await record.count(), 0, 'no record shown under the 404');
    assert.equal(await page.getByRole('table', { name: 'Outbox events of this key' }).count(), 0, 'no events of the previous key');
    assert.doesNotMatch(await page.getByLabel('Inbox record').innerText(), /reserved/);
    await screenshot('key-not-found');

    await openView('Outbox');
    await page.locator('.facts').first().waitFor();
    const relayFacts = await page.locator('.facts').first().innerText();
    assert.match(relayFacts, /Running\s+yes/);
    assert.match(relayFacts, /Connected to the broker\s+yes/);
    // Waiting for the broker at start-up is not a failure to report once connected.
    assert.match(relayFacts, /Last failure\s+none/);
    assert.doesNotMatch(relayFacts, /not connected/);
    await screenshot('outbox');

    await openView('Overview');
    await attention.waitFor();
    assert.equal(await attention.innerText(), 'Needs a person: 1 dead letter.');
    await page.locator('.plot canvas').first().waitFor();
    await screenshot('overview-after');

    // Everything the page loaded or called came from the service itself, and nothing failed to load.
    const origin = new URL(baseUrl).origin;
    const foreign = requested.filter((url) => !url.startsWith('data:') && new URL(url).origin !== origin);
    assert.deepEqual(foreign, [], 'requests to other origins');
    assert.deepEqual(failed, [], 'failed requests');
  });
});
