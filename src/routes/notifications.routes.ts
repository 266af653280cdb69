import type { FastifyInstance } from 'fastify';
import { registerCommand } from '../http/producer-command-route.js';
import { EXAMPLE_ORDERS, stockReservedEmailExamples } from '../http/openapi-examples.js';
import { STOCK_RESERVED_EMAIL } from '../command-kinds.js';
import { commandOf } from '../commands.js';

/** The stock-reserved email: a side effect outside the transaction, recorded in two phases. */
export async function notificationRoutes(app: FastifyInstance): Promise<void> {
  registerCommand(app, commandOf(STOCK_RESERVED_EMAIL, app.config), {
    operationId: 'stockReservedEmail',
    summary: 'Send the stock-reserved email (at most once per message; two-phase record)',
    description:
      'Consumer notifications.stock-reserved-email. Phase 1 claims the key as in progress and commits; the email is sent ' +
      'with Idempotency-Key <consumer>:<messageId>; phase 2 records the outcome. A copy that finds an unfinished record ' +
      'within its lease gets 409 in-flight; after the lease, 409 needs-reconciliation, or, when the provider deduplicates ' +
      '(EMAIL_PROVIDER_IDEMPOTENT=true), a resend under the same key and 201 with reconciled: automatic.',
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
    problems: [
      'needs-reconciliation',
      'email-provider-failed',
      'email-provider-error',
      'email-provider-unavailable',
      'email-provider-timeout',
    ],
  });
}
