import type { FastifyInstance } from 'fastify';
import { registerCommand } from '../http/producer-command-route.js';
import { EXAMPLE_BOOK_ID, EXAMPLE_ORDERS, orderCancelledExamples, orderPlacedExamples } from '../http/openapi-examples.js';
import { RELEASE_STOCK, RESERVE_STOCK } from '../command-kinds.js';
import { commandOf } from '../commands.js';

/** The inventory commands: reserve stock for a placed order, release it for a cancelled one. */
export async function inventoryRoutes(app: FastifyInstance): Promise<void> {
  registerCommand(app, commandOf(RESERVE_STOCK, app.config), {
    operationId: 'orderPlaced',
    summary: 'Reserve stock for a placed order (exactly once per message)',
    description:
      'Consumer inventory.reserve-stock. Reserves quantity of bookId for orderId when enough is available. ' +
      'A refusal (insufficient-stock, unknown-book, order-cancelled, already-reserved) is still a processed message: 201, recorded and replayed. ' +
      'order-cancelled: a cancellation of the order (or of this book) was processed first; the placement reserves nothing.',
    examples: {
      ...orderPlacedExamples,
      result: {
        consumer: RESERVE_STOCK,
        messageId: 'order-1001-placed',
        outcome: { result: 'reserved', orderId: EXAMPLE_ORDERS.envelope, bookId: EXAMPLE_BOOK_ID, quantity: 2 },
      },
    },
  });

  registerCommand(app, commandOf(RELEASE_STOCK, app.config), {
    operationId: 'orderCancelled',
    summary: "Release a cancelled order's reservation (exactly once per message)",
    description:
      "Consumer inventory.release-stock. Releases the order's live reservations: released, or not-reserved. " +
      'The cancellation is recorded either way: a placement of the order (or of this book) processed later is refused as order-cancelled.',
    examples: {
      ...orderCancelledExamples,
      result: {
        consumer: RELEASE_STOCK,
        messageId: 'order-1001-cancelled',
        outcome: { result: 'released', orderId: EXAMPLE_ORDERS.envelope, released: [{ bookId: EXAMPLE_BOOK_ID, quantity: 2 }] },
      },
    },
  });
}
