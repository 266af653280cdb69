import type { Tx } from '../schema/database.js';
import { lockKeys } from '../db/dialect.js';
import { normalizeUuid } from '../inbox/machinery.js';

/**
 * Locks the orders until the transaction ends, before any stock row: a placement and a cancellation of
 * the same order run one after the other. A whole-order cancellation that finds no reservation locks
 * no stock row, so without this a placement committing beside it would go unseen by both (READ
 * COMMITTED): a live reservation next to a recorded cancellation.
 */
export async function lockOrders(trx: Tx, orderIds: readonly string[]): Promise<void> {
  const { namespace, keys } = orderLocks(orderIds);
  await lockKeys(trx, namespace, keys);
}

export function orderLocks(orderIds: readonly string[]): { namespace: string; keys: string[] } {
  return { namespace: 'order', keys: orderIds.map(normalizeUuid) };
}

export function lineKey(orderId: string, bookId: string): string {
  return `${orderId}/${bookId}`;
}
