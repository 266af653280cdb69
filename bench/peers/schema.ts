/**
 * What both peers accept: the service's order-placed envelope. Fastify validates it with this JSON
 * schema before the handler runs (a malformed message is a 400, as in the service).
 */
export interface OrderPlaced {
  messageId: string;
  data: { orderId: string; bookId: string; quantity: number };
}

export const orderPlacedSchema = {
  type: 'object',
  required: ['messageId', 'data'],
  properties: {
    messageId: { type: 'string', minLength: 1, maxLength: 200 },
    type: { type: 'string' },
    data: {
      type: 'object',
      required: ['orderId', 'bookId', 'quantity'],
      properties: {
        orderId: { type: 'string', format: 'uuid' },
        bookId: { type: 'string', format: 'uuid' },
        quantity: { type: 'integer', minimum: 1 },
      },
    },
  },
} as const;

/** Port, database and pool size from the environment the runner sets. */
export function peerSettings() {
  const databaseUrl = process.env.DATABASE_URL;
  if (databaseUrl === undefined) throw new Error('DATABASE_URL is required');
  return {
    port: Number(process.env.PORT ?? 3010),
    databaseUrl,
    poolMax: Number(process.env.PEER_POOL_MAX ?? 10),
  };
}
