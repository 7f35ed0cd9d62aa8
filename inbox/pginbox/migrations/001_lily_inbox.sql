-- Lily's transactional inbox (github.com/lily-mq/lily/inbox/pginbox).
--
-- One row per (consumer, message id) whose handler's transaction committed.
-- The row is inserted in that transaction, so it exists exactly when the
-- business writes do. While the transaction is open, the uncommitted row's
-- unique key is the claim: a second worker inserting the same key waits on it
-- (up to lock_timeout) and then defers. xact records the claiming
-- transaction's id so that a COMMIT whose answer was lost can be looked up
-- with pg_xact_status.
--
-- Idempotent: apply it with pginbox.Migrate or with psql -f.
CREATE TABLE IF NOT EXISTS lily_inbox (
    consumer   text        NOT NULL,
    message_id text        NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now(),
    xact       xid8        NOT NULL DEFAULT pg_current_xact_id(),
    PRIMARY KEY (consumer, message_id)
);
