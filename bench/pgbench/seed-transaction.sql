-- The seed transaction: what the hand-rolled peer (peers/hand-rolled.ts) sends for one new message,
-- on the peers' tables. Run with -M prepared; :books picks the book range (10000, or 1 for the hot book).
-- Keys as in order-placed.sql: 'pgb-<client>-<random 1..10^12-1>', unique per client in practice.
\set book random(1, :books)
\set r random(1, 999999999999)
BEGIN;
INSERT INTO inbox (message_id, consumer, received_at) VALUES ('pgb-' || :client_id || '-' || :r, 'inventory', now());
UPDATE stock_items SET reserved = reserved + 1 WHERE book_id = ('00000000-0000-4000-8000-' || lpad(:book::text, 12, '0'))::uuid;
COMMIT;
