import type { Attempt } from '../inbox/two-phase.js';
import type { EmailProvider } from './email-provider.js';

export interface StockReservedEmailData {
  orderId: string;
  bookId: string;
  quantity: number;
  email: string;
}

export interface StockReservedEmailOutcome {
  result: 'sent';
  orderId: string;
  downstreamKey: string;
  providerMessageId: string | null;
  /** 'automatic' when an expired attempt was repeated safely under the same downstream key. */
  reconciled: 'automatic' | null;
  attempts: number;
}

/** Sends the stock-reserved email for an order, carrying the downstream idempotency key. */
export async function sendStockReservedEmail(
  provider: EmailProvider,
  data: StockReservedEmailData,
  attempt: Attempt,
): Promise<StockReservedEmailOutcome> {
  const sent = await provider.send(attempt.downstreamKey, {
    to: data.email,
    subject: `Order ${data.orderId}: your books are reserved`,
    text: `${data.quantity} ${data.quantity === 1 ? 'copy' : 'copies'} of book ${data.bookId} are reserved for order ${data.orderId}.`,
  });
  return {
    result: 'sent',
    orderId: data.orderId,
    downstreamKey: attempt.downstreamKey,
    providerMessageId: sent.providerMessageId,
    reconciled: attempt.number > 1 ? 'automatic' : null,
    attempts: attempt.number,
  };
}
