import { Type, type Static } from 'typebox';
import { commandKind, STOCK_RESERVED_EMAIL } from '../command-kinds.js';
import { normalizeUuid, type TwoPhaseKind, Uuid } from '../inbox/machinery.js';
import type { EmailProvider } from './email-provider.js';

/** The stock-reserved email: a side effect outside the transaction, recorded in two phases. */

export { STOCK_RESERVED_EMAIL };

export const StockReservedEmailData = Type.Object(
  {
    orderId: Uuid,
    bookId: Uuid,
    quantity: Type.Integer({ minimum: 1, maximum: 1000 }),
    email: Type.String({ format: 'email', maxLength: 254 }),
  },
  { additionalProperties: false },
);
export type StockReservedEmailData = Static<typeof StockReservedEmailData>;

const EmailSent = Type.Object(
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
const ReconciledByOperator = Type.Object(
  {
    result: Type.Literal('reconciled'),
    resolution: Type.Literal('completed'),
    note: Type.Union([Type.String(), Type.Null()]),
    reconciledAt: Type.String({ format: 'date-time' }),
  },
  { additionalProperties: false, description: 'an operator marked the half-done email as done' },
);
/** What a processed email records, or what an operator recorded for a half-done one. */
export const StockReservedEmailOutcome = Type.Union([EmailSent, ReconciledByOperator]);

/** The command for a provider: sends the email under the downstream idempotency key `<consumer>:<messageId>`. */
export function stockReservedEmailCommand(
  provider: EmailProvider,
): TwoPhaseKind<typeof StockReservedEmailData, typeof StockReservedEmailOutcome> {
  return {
    kind: 'two-phase',
    consumer: STOCK_RESERVED_EMAIL,
    name: commandKind(STOCK_RESERVED_EMAIL).name,
    data: StockReservedEmailData,
    outcome: StockReservedEmailOutcome,
    resendIsSafe: provider.deduplicates,
    normalize: (d) => ({ orderId: normalizeUuid(d.orderId), bookId: normalizeUuid(d.bookId), quantity: d.quantity, email: d.email }),
    perform: async (data, attempt) => {
      const sent = await provider.send(attempt.downstreamKey, {
        to: data.email,
        subject: `Order ${data.orderId}: your books are reserved`,
        text: `${data.quantity} ${data.quantity === 1 ? 'copy' : 'copies'} of book ${data.bookId} are reserved for order ${data.orderId}.`,
      });
      return {
        result: 'sent' as const,
        orderId: data.orderId,
        downstreamKey: attempt.downstreamKey,
        providerMessageId: sent.providerMessageId,
        reconciled: attempt.number > 1 ? ('automatic' as const) : null,
        attempts: attempt.number,
      };
    },
  };
}
