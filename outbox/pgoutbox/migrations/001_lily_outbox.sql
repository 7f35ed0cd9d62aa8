-- Lily's transactional outbox (github.com/lily-mq/lily/outbox/pgoutbox).
--
-- One row per message written in a business transaction and not yet
-- confirmed by the broker. pgoutbox.Write inserts it in the caller's
-- transaction, so it exists exactly when the business rows do. A relay leases
-- due rows, publishes each, and deletes it only after the broker's confirm.
--
-- A row is due when lease_until is NULL or past, and, if it has an
-- order_key, when no row of the same key with a smaller id is left: one key's
-- messages go one at a time, in id order.
--
-- Idempotent: apply it with pgoutbox.Migrate or with psql -f.
CREATE TABLE IF NOT EXISTS lily_outbox (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY, -- the write order
    exchange    text        NOT NULL,               -- '' is the default exchange
    routing_key text        NOT NULL,
    order_key   text,                               -- NULL: ordered with no other row
    properties  jsonb       NOT NULL,               -- AMQP properties; headers as tagged values
    body        bytea       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    lease_owner text,                               -- the relay publishing it now
    lease_until timestamptz,                        -- not published before: the lease's end, or the retry's time
    attempts    integer     NOT NULL DEFAULT 0,     -- publishes that failed
    last_error  text                                -- the last failure, bounded
);

-- The relay's look for an earlier row of the same key. The due rows
-- themselves are found in primary key order; the lease columns carry no
-- index, so that leasing a row is a HOT update.
CREATE INDEX IF NOT EXISTS lily_outbox_order_key ON lily_outbox (order_key, id) WHERE order_key IS NOT NULL;
