import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { fingerprint } from '../inbox/fingerprint.js';
import { processTwoPhase } from '../inbox/two-phase.js';
import { normalizeUuid } from '../inventory/stock.repository.js';
import {
  EmailNotSentError,
  EmailOutcomeUnknownError,
  httpEmailProvider,
  logEmailProvider,
  type EmailProvider,
} from '../notifications/email-provider.js';
import { sendStockReservedEmail, type StockReservedEmailData } from '../notifications/stock-reserved-email.js';
import type { Config } from '../config.js';
import { Uuid } from '../inbox/command-schemas.js';
import { commandSchema, readCommand, sendCommandResult, webhookVerifier } from '../http/command-route.js';
import { EXAMPLE_ORDERS, stockReservedEmailExamples } from '../http/openapi-examples.js';
import { ProblemError } from '../http/problem.js';

export const STOCK_RESERVED_EMAIL = 'notifications.stock-reserved-email';

const StockReservedEmailData = Type.Object(
  {
    orderId: Uuid,
    bookId: Uuid,
    quantity: Type.Integer({ minimum: 1, maximum: 1000 }),
    email: Type.String({ format: 'email', maxLength: 254 }),
  },
  { additionalProperties: false },
);

const EmailOutcome = Type.Object(
  {
    result: Type.Literal('sent'),
    orderId: Uuid,
    downstreamKey: Type.String({ description: 'the Idempotency-Key the provider received: <consumer>:<messageId>' }),
    providerMessageId: Type.Union([Type.String(), Type.Null()]),
    reconciled: Type.Union([Type.Literal('automatic'), Type.Null()], {
      description: "'automatic' when an expired attempt was resent under the same key to a provider that deduplicates",
    }),
    attempts: Type.Integer(),
  },
  { additionalProperties: false },
);
const OperatorOutcome = Type.Object(
  {
    result: Type.Literal('reconciled'),
    resolution: Type.Literal('completed'),
    note: Type.Union([Type.String(), Type.Null()]),
    reconciledAt: Type.String({ format: 'date-time' }),
  },
  { additionalProperties: false, description: 'an operator marked the half-done email as done' },
);

/** The provider chosen by EMAIL_PROVIDER. */
export function emailProviderFor(config: Config): EmailProvider {
  return config.emailProvider === 'http'
    ? httpEmailProvider(config.emailProviderUrl as string, config.emailProviderIdempotent, config.emailProviderTimeoutMs)
    : logEmailProvider(config.emailLogFile, config.emailProviderIdempotent);
}

/** The stock-reserved email: a side effect outside the transaction, recorded in two phases. */
export async function notificationRoutes(app: FastifyInstance): Promise<void> {
  const provider = emailProviderFor(app.config);
  const webhook = webhookVerifier(app.config.webhookSecret);
  const def = {
    name: 'StockReservedEmail',
    operationId: 'stockReservedEmail',
    examples: {
      ...stockReservedEmailExamples,
      result: {
        consumer: STOCK_RESERVED_EMAIL,
        messageId: 'order-1001-email',
        outcome: {
          result: 'sent',
          orderId: EXAMPLE_ORDERS.envelope,
          downstreamKey: `${STOCK_RESERVED_EMAIL}:order-1001-email`,
          providerMessageId: null,
          reconciled: null,
          attempts: 1,
        },
      },
    },
    summary: 'Send the stock-reserved email (at most once per message; two-phase record)',
    description:
      'Consumer notifications.stock-reserved-email. Phase 1 claims the key as in progress and commits; the email is sent ' +
      'with Idempotency-Key <consumer>:<messageId>; phase 2 records the outcome. A copy that finds an unfinished record ' +
      'within its lease gets 409 in-flight; after the lease, 409 needs-reconciliation, or, when the provider deduplicates ' +
      '(EMAIL_PROVIDER_IDEMPOTENT=true), a resend under the same key and 201 with reconciled: automatic.',
    data: StockReservedEmailData,
    outcome: Type.Union([EmailOutcome, OperatorOutcome]),
  };

  app.post(
    '/notifications/stock-reserved-email',
    { schema: commandSchema(def, [502, 504]), config: { consumer: STOCK_RESERVED_EMAIL } },
    async (request, reply) => {
      const received = readCommand<StockReservedEmailData>(request, webhook);
      request.inboxKey = received.key;
      const d = received.data;
      const data = { orderId: normalizeUuid(d.orderId), bookId: normalizeUuid(d.bookId), quantity: d.quantity, email: d.email };
      const command = { consumer: STOCK_RESERVED_EMAIL, key: received.key, fingerprint: fingerprint(data), payload: data };
      try {
        const result = await processTwoPhase(
          app.inboxContext,
          command,
          { leaseMs: app.config.inboxLeaseMs, resendIsSafe: provider.deduplicates },
          async (attempt) => {
            const outcome = await sendStockReservedEmail(provider, data, attempt);
            await app.testHooks.afterSideEffect?.(command);
            return outcome;
          },
        );
        request.inboxResult = result.kind;
        if (result.takenOver) request.log.warn({ consumer: STOCK_RESERVED_EMAIL, messageId: received.key.messageId }, 'expired email attempt resent under the same idempotency key');
        return sendCommandResult(reply, STOCK_RESERVED_EMAIL, result);
      } catch (error) {
        if (error instanceof EmailNotSentError) {
          throw new ProblemError(error.reason === 'refused' ? 'email-provider-failed' : 'email-provider-unavailable', {
            detail: `${error.message}; nothing was sent and the claim was released`,
          }, error.reason === 'unreachable' ? { 'retry-after': '5' } : {});
        }
        if (error instanceof EmailOutcomeUnknownError) {
          throw new ProblemError('email-provider-timeout', {
            detail: `${error.message}; the email may have been sent. The record stays in progress`,
            consumer: STOCK_RESERVED_EMAIL,
            messageId: received.key.messageId,
            inboxRecord: `/inbox/${encodeURIComponent(STOCK_RESERVED_EMAIL)}/${encodeURIComponent(received.key.messageId)}`,
          });
        }
        throw error;
      }
    },
  );
}
