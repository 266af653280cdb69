-- The statements the service sends for one order-placed message (src/inbox/process-once.ts,
-- src/inventory/stock.repository.ts, src/db/dialect.ts), in the same transaction and order, captured
-- with log_statement=all. Run with -M prepared (the service prepares them too); :books picks the book
-- range (10000, or 1 for the hot book).
-- Keys: pgbench has no sequences, so a message is 'pgb-<client>-<random 1..10^12-1>': unique per
-- client in practice (a collision would be a duplicate claim that still does the rest of the work).
\set book random(1, :books)
\set r random(1, 999999999999)
BEGIN;
INSERT INTO inbox (message_id, consumer, key_source, fingerprint, received_at, completed_at, outcome, lease_until)
  VALUES ('pgb-' || :client_id || '-' || :r, 'inventory.reserve-stock', 'body',
          '27842e161dbdd1c329229a3bb924d243c44e4f605daf5aa73f9dca8c84c7afa6', now(), NULL, NULL, NULL)
  ON CONFLICT (message_id, consumer) DO NOTHING;
WITH inserted AS (
    INSERT INTO stock_reservations (order_id, book_id, quantity, reserved_by, reserved_at, released_by, released_at)
      VALUES ((lpad(:client_id::text, 8, '0') || '-0000-4000-8000-' || lpad(:r::text, 12, '0'))::uuid,
              ('00000000-0000-4000-8000-' || lpad(:book::text, 12, '0'))::uuid,
              1, 'pgb-' || :client_id || '-' || :r, now(), NULL, NULL)
      ON CONFLICT (order_id, book_id) DO NOTHING
      RETURNING 1 AS one),
  updated AS (
    UPDATE stock_items SET reserved = reserved + 1, updated_at = now()
      WHERE book_id = ('00000000-0000-4000-8000-' || lpad(:book::text, 12, '0'))::uuid AND on_hand - reserved >= 1
        AND EXISTS (SELECT 1 FROM inserted)
      RETURNING 1 AS one)
SELECT (SELECT count(*) FROM inserted)::int AS inserted, (SELECT count(*) FROM updated)::int AS updated;
UPDATE inbox SET completed_at = now(),
    outcome = ('{"bookId": "00000000-0000-4000-8000-' || lpad(:book::text, 12, '0') || '", "result": "reserved", "orderId": "'
               || lpad(:client_id::text, 8, '0') || '-0000-4000-8000-' || lpad(:r::text, 12, '0') || '", "quantity": 1}')::jsonb,
    lease_until = NULL
  WHERE message_id = 'pgb-' || :client_id || '-' || :r AND consumer = 'inventory.reserve-stock' AND completed_at IS NULL;
COMMIT;
