import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { chromium, type BrowserContext, type Locator, type Page } from 'playwright-core';
import { EXAMPLE_BOOK_ID } from '../../src/http/openapi-examples.js';
import { startServer, type ServerProcess } from '../support/server-process.js';
import { CHROMIUM, CHROMIUM_ARGS, noChromium } from '../support/chromium.js';

/**
 * Swagger UI as a new user meets it: Debian's Chromium opens /docs on a fresh service, and the test
 * clicks through it as a person would: Authorize (the only thing typed), then for every example of the
 * walkthrough, in order: choose it, Try it out, Execute, asserting the answer the page shows. A
 * screenshot of each answer goes to SCREENSHOTS.
 */

export const SCREENSHOTS = fileURLToPath(new URL('../../test-results/swagger-ui/', import.meta.url));
const TOKEN = 'browser-admin-token-0123456789';
const JSON_TYPE = 'application/json';
const CLOUD_EVENTS = 'application/cloudevents+json';
const STEP_MS = 30_000;

const skip = noChromium;

describe('Swagger UI at /docs, driven in Chromium', { skip }, () => {
  let server: ServerProcess;
  let profile: string;
  let context: BrowserContext;
  let page: Page;
  const requested: string[] = [];
  const failed: string[] = [];
  let shot = 0;

  before(async () => {
    server = await startServer({ DATABASE_URL: 'pglite:memory', ADMIN_TOKEN: TOKEN, EMAIL_LOG_FILE: '/dev/null' });
    await rm(SCREENSHOTS, { recursive: true, force: true });
    await mkdir(SCREENSHOTS, { recursive: true });
    profile = await mkdtemp(join(tmpdir(), 'bookstore-chromium-'));
    context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: CHROMIUM_ARGS,
      viewport: { width: 1280, height: 1000 },
    });
    context.setDefaultTimeout(STEP_MS);
    page = context.pages()[0] ?? (await context.newPage());
    page.on('request', (request) => requested.push(request.url()));
    page.on('requestfailed', (request) => failed.push(`${request.url()}: ${request.failure()?.errorText}`));
  });
  after(async () => {
    await context?.close();
    await server?.stop();
    if (profile !== undefined) await rm(profile, { recursive: true, force: true });
  });

  async function screenshot(name: string, target: Locator | Page = page): Promise<void> {
    shot += 1;
    await target.screenshot({ path: join(SCREENSHOTS, `${String(shot).padStart(2, '0')}-${name}.png`) });
  }

  /** Opens an operation and presses "Try it out". */
  async function tryItOut(operationId: string): Promise<Locator> {
    const op = page.locator(`.opblock[id$="-${operationId}"]`);
    await op.locator('.opblock-summary-control').click();
    await op.locator('.try-out__btn').click();
    await op.locator('.btn.execute').waitFor();
    return op;
  }

  /** Presses Execute and reads the live response the page shows: code, headers and body text. */
  async function execute(op: Locator): Promise<{ code: string; headers: string; body: string }> {
    const clear = op.locator('.btn-clear');
    if ((await clear.count()) > 0) await clear.click();
    await op.locator('.btn.execute').click();
    const live = op.locator('.live-responses-table .response');
    await live.first().waitFor();
    const code = (await live.locator('.response-col_status').first().innerText()).trim();
    const description = live.locator('.response-col_description');
    const body = await description.locator('.highlight-code, .microlight').first().innerText();
    const headers = (await description.locator('.microlight').last().innerText()).toLowerCase();
    // Scrolled so that the screenshot of the window shows the request URL and the server's answer.
    // No DOM types here (lib is ES2023): the element is typed by the one method called on it.
    await op
      .locator('.request-url')
      .first()
      .evaluate((el: { scrollIntoView(options: { block: 'start' }): void }) => el.scrollIntoView({ block: 'start' }));
    return { code, headers, body };
  }

  /** Chooses a request-body example by its summary; the body field then shows it. */
  async function chooseExample(op: Locator, summary: string): Promise<void> {
    const select = op.locator('.opblock-section-request-body .examples-select-element');
    const offered = await select.locator('option').allInnerTexts();
    assert.ok(offered.includes(summary), `"${summary}" is not offered: ${offered.join(' | ')}`);
    await select.selectOption({ label: summary });
    await op.locator('textarea.body-param__text').waitFor();
  }

  /** Every request-body example of the walkthrough, in its order: what to choose, and what it answers. */
  const walkthrough = [
    {
      operation: 'orderPlaced',
      examples: [
        { summary: 'Step 2a: envelope with messageId (order 1001, 2 copies)', messageId: 'order-1001-placed', keySource: 'body' },
        { summary: 'Step 2b: key in an Idempotency-Key header (order 1002)', messageId: 'order-1002-placed', keySource: 'idempotency-key' },
        {
          summary: 'Step 2c: CloudEvents structured mode (order 1003)',
          mediaType: CLOUD_EVENTS,
          messageId: 'urn:bookstore:ordering|order-1003-placed',
          keySource: 'cloudevents',
        },
        {
          summary: 'Step 2d: CloudEvents binary mode (order 1004)',
          messageId: 'urn:bookstore:ordering|order-1004-placed',
          keySource: 'cloudevents',
        },
        { summary: 'Step 2e: Standard Webhooks delivery (order 1005)', messageId: 'msg_order-1005-placed', keySource: 'standard-webhooks' },
      ],
      result: 'reserved',
    },
    {
      operation: 'orderCancelled',
      examples: [
        { summary: 'Step 3a: cancel order 1001 (envelope)', messageId: 'order-1001-cancelled', keySource: 'body' },
        {
          summary: 'Step 3b: cancel order 1003 (CloudEvents structured mode)',
          mediaType: CLOUD_EVENTS,
          messageId: 'urn:bookstore:ordering|order-1003-cancelled',
          keySource: 'cloudevents',
        },
      ],
      result: 'released',
    },
    {
      operation: 'stockReservedEmail',
      examples: [
        { summary: 'Step 4a: email for order 1001 (envelope)', messageId: 'order-1001-email', keySource: 'body' },
        {
          summary: 'Step 4b: email for order 1003 (CloudEvents structured mode)',
          mediaType: CLOUD_EVENTS,
          messageId: 'urn:bookstore:ordering|order-1003-email',
          keySource: 'cloudevents',
        },
      ],
      result: 'sent',
    },
  ];

  test(
    'every walkthrough example, chosen and executed as it is with nothing typed but the token, answers as documented',
    { timeout: 300_000 },
    async (t) => {
      t.diagnostic(`screenshots: ${SCREENSHOTS}`);
      await page.goto(`${server.baseUrl}/docs`);
      await page.locator('.opblock').first().waitFor();
      assert.equal(
        await page
          .locator('.info .title')
          .first()
          .innerText()
          .then((s) => s.includes('Bookstore Inventory')),
        true,
      );
      assert.match(await page.locator('.info').first().innerText(), /MIT/);
      await screenshot('docs-loaded');

      // Authorize with the admin token: the only thing a person types.
      await page.locator('.auth-wrapper .btn.authorize').click();
      const dialog = page.locator('.modal-ux');
      // The dialog lists every scheme (the producers' too); the admin token has its own form.
      const adminAuth = dialog.locator('.auth-container').filter({ hasText: 'adminToken' });
      // The webhook signature's scheme shows its format, not an empty space where <…> was read as HTML.
      const signature = await dialog.locator('.auth-container').filter({ hasText: 'standardWebhooks' }).innerText();
      assert.match(signature, /v1,/);
      assert.match(signature, /base64 HMAC-SHA256 of id\.timestamp\.body/);
      await adminAuth.locator('input').first().fill(TOKEN);
      await adminAuth.locator('.btn.modal-btn.auth.authorize').click();
      await adminAuth.locator('.btn-done').waitFor();
      await screenshot('authorized', dialog);
      await adminAuth.locator('.btn-done').click();

      // Step 1: PUT /stock/{bookId} with its example: the book is created.
      const setStock = await tryItOut('setStock');
      assert.equal(await setStock.locator('tr[data-param-name="bookId"] input').inputValue(), EXAMPLE_BOOK_ID);
      const created = await execute(setStock);
      assert.equal(created.code, '201', created.body);
      assert.match(created.body, /"title": "Dune"/);
      await screenshot('step-1-put-stock-201');

      // Steps 2 to 4: each example of each command, in order, chosen from one list and executed as it is.
      const opened = new Map<string, Locator>();
      for (const step of walkthrough) {
        const op = await tryItOut(step.operation);
        opened.set(step.operation, op);
        // One list holds every example: no media type to find and switch to. Choosing one shows the media
        // type it is sent as, and the curl command the page shows sends that type.
        const mediaType = op.locator('.opblock-section-request-body select.content-type');
        const mediaTypes = await mediaType.locator('option').allInnerTexts();
        assert.deepEqual(mediaTypes.sort(), [CLOUD_EVENTS, JSON_TYPE], `${step.operation}: media types offered`);
        for (const example of step.examples) {
          await chooseExample(op, example.summary);
          const sentAs = 'mediaType' in example ? example.mediaType : JSON_TYPE;
          assert.equal(await mediaType.inputValue(), sentAs, `${example.summary}: the media type shown`);
          const stepName = example.summary.slice(0, 'Step 2a'.length).toLowerCase().replace(' ', '-');
          if (sentAs !== JSON_TYPE) await screenshot(`${stepName}-request-body`, op.locator('.opblock-section-request-body'));
          const answer = await execute(op);
          const curl = await op.locator('.curl-command').first().innerText();
          const contentTypes = [...curl.matchAll(/-H '[Cc]ontent-[Tt]ype: ([^']+)'/g)].map((m) => m[1]);
          assert.deepEqual(contentTypes, [sentAs], `${example.summary}: the content-type sent, in ${curl}`);
          assert.equal(answer.code, '201', `${example.summary}: ${answer.body}`);
          assert.match(answer.body, /"status": "processed"/, example.summary);
          assert.match(answer.body, new RegExp(`"result": "${step.result}"`), `${example.summary}: ${answer.body}`);
          assert.match(answer.body, new RegExp(`"keySource": "${example.keySource}"`), `${example.summary}: ${answer.body}`);
          assert.ok(answer.body.includes(`"messageId": "${example.messageId}"`), `${example.summary}: ${answer.body}`);
          await screenshot(`${stepName}-201`);
        }
      }

      // Any example executed again is a duplicate: 2b (its key is a header) replays with Idempotent-Replayed.
      const orderPlaced = opened.get('orderPlaced')!;
      await chooseExample(orderPlaced, walkthrough[0]!.examples[1]!.summary);
      const again = await execute(orderPlaced);
      assert.equal(again.code, '200', again.body);
      assert.match(again.body, /"status": "duplicate"/);
      assert.match(again.headers, /idempotent-replayed: true/);
      await screenshot('step-2b-again-200-replayed');

      // Header values typed for 2d and left in their fields are not sent with 2e: it is answered under its own key.
      const typed = {
        'ce-specversion': '1.0',
        'ce-id': 'order-1004-placed',
        'ce-source': 'urn:bookstore:ordering',
        'ce-type': 'bookstore.order-placed',
      };
      for (const [name, value] of Object.entries(typed)) await orderPlaced.locator(`tr[data-param-name="${name}"] input`).fill(value);
      await chooseExample(orderPlaced, walkthrough[0]!.examples[4]!.summary);
      const webhook = await execute(orderPlaced);
      assert.equal(webhook.code, '200', webhook.body);
      assert.match(webhook.body, /"keySource": "standard-webhooks"/);
      await screenshot('step-2e-after-2d-headers-typed-200');
      for (const name of Object.keys(typed)) await orderPlaced.locator(`tr[data-param-name="${name}"] input`).fill('');
      await chooseExample(orderPlaced, walkthrough[0]!.examples[1]!.summary);

      // The same key with another quantity: 422, and the problem links the dead letter.
      const body = orderPlaced.locator('textarea.body-param__text');
      await body.fill((await body.inputValue()).replace('"quantity": 1', '"quantity": 3'));
      const reused = await execute(orderPlaced);
      assert.equal(reused.code, '422', reused.body);
      assert.match(reused.body, /"type": "\/problems\/idempotency-key-reused"/);
      const link = /"deadLetter": "(\/dead-letters\/(\d+))"/.exec(reused.body);
      assert.ok(link, `no dead-letter link in ${reused.body}`);
      await screenshot('step-2b-changed-422-dead-letter-link');

      // Following the link: GET /dead-letters/{id} with the id the 422 gave.
      const deadLetter = await tryItOut('getDeadLetter');
      await deadLetter.locator('tr[data-param-name="id"] input').fill(link[2]!);
      const letter = await execute(deadLetter);
      assert.equal(letter.code, '200', letter.body);
      assert.match(letter.body, /"messageId": "order-1002-placed"/);
      await screenshot('dead-letter-200');

      // The stock after the walkthrough: 6 copies reserved by five orders, 3 of them released by the cancellations.
      const getStock = await tryItOut('getStock');
      const stock = await execute(getStock);
      assert.equal(stock.code, '200', stock.body);
      assert.match(stock.body, /"onHand": 10/);
      assert.match(stock.body, /"reserved": 3/);
      await screenshot('stock-after-walkthrough');

      // Everything the page loaded or called came from the service itself.
      const origin = new URL(server.baseUrl).origin;
      const foreign = requested.filter((url) => !url.startsWith('data:') && new URL(url).origin !== origin);
      assert.deepEqual(foreign, [], 'requests to other origins');
      assert.deepEqual(failed, [], 'failed requests');
      assert.ok(
        requested.some((url) => url.endsWith('/inventory/order-placed')),
        'the page sent the commands itself',
      );
    },
  );
});
