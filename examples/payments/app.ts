import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify';
import type { Kysely } from 'kysely';
import { Type } from 'typebox';
import { inbox, type InboxPluginOptions } from 'bookstore-inventory/inbox/fastify';
import type { TransactionalKind } from 'bookstore-inventory/inbox';
import { creditAccount, type CreditOutcome, type PaymentReceived } from './credit-account.js';
import type { Database } from './schema.js';

export interface PaymentsAppOptions {
  /** The database, migrated (schema.ts). */
  db: Kysely<Database>;
  /** The lock timeout the database's connections were opened with (server.ts). */
  lockTimeoutMs?: number;
  /** Group commit; on PGlite, which runs one transaction at a time, `{ concurrency: 1 }`. */
  batch?: InboxPluginOptions['batch'];
  observe?: InboxPluginOptions['observe'];
  /** The command kind behind POST /payment-events (default creditAccount; tests wrap it). */
  kind?: TransactionalKind<typeof PaymentReceived, typeof CreditOutcome, Database>;
  logger?: FastifyServerOptions['logger'];
}

const AccountParams = Type.Object({ id: Type.String({ pattern: '^[A-Za-z0-9_-]{1,100}$' }) });
const Balance = Type.Object({ accountId: Type.String(), balanceCents: Type.Number() });
const NotFound = Type.Object({ type: Type.String(), title: Type.String(), status: Type.Literal(404), detail: Type.String() });

/**
 * The payments receiver: POST /payment-events credits an account exactly once per message, GET
 * /accounts/:id reads its balance. It does not listen (server.ts does).
 */
export async function buildPaymentsApp(options: PaymentsAppOptions): Promise<FastifyInstance> {
  const { db } = options;
  // Bodies are validated as sent: Fastify's default AJV would coerce `"amountCents": "500"` to 500 and
  // silently drop unknown properties, where a payment event that does not match should be refused (400).
  const app = Fastify({ logger: options.logger ?? false, ajv: { customOptions: { removeAdditional: false, coerceTypes: false } } });
  await app.register(inbox, {
    db,
    lockTimeoutMs: options.lockTimeoutMs ?? 5000,
    ...(options.batch === undefined ? {} : { batch: options.batch }),
    ...(options.observe === undefined ? {} : { observe: options.observe }),
  });
  app.inbox.command(options.kind ?? creditAccount, { url: '/payment-events', summary: 'Credit an account from a payment event' });

  const typed = app.withTypeProvider<TypeBoxTypeProvider>();
  typed.get('/accounts/:id', { schema: { params: AccountParams, response: { 200: Balance, 404: NotFound } } }, async (request, reply) => {
    const accountId = request.params.id.toLowerCase();
    const account = await db.selectFrom('accounts').select('balance_cents').where('account_id', '=', accountId).executeTakeFirst();
    if (account === undefined) {
      return reply
        .code(404)
        .type('application/problem+json')
        .send({ type: 'about:blank', title: 'Not Found', status: 404, detail: `no payment credited account ${accountId}` });
    }
    return { accountId, balanceCents: Number(account.balance_cents) };
  });
  return app;
}
