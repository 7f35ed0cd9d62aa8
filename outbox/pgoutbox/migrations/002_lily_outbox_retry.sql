-- Lily's transactional outbox, second step: the relay's look skips no rows
-- waiting for their retry.
--
-- Rows that keep failing are the oldest, so a look that walks lily_outbox by
-- id meets every one of them first, at each look. The look reads two partial
-- indexes instead: the rows never tried by id, and the failed ones by the
-- time of their next try. Neither holds a lease column, so leasing a row is
-- still a HOT update where its page has room; only a failure, which changes
-- attempts, writes an index.
--
-- Idempotent, and it takes no lock on a table that has it already, or has
-- 003's: apply it after 001, with pgoutbox.Migrate or with psql -f. On a table 001 alone
-- made, adding the column is instant, and building the indexes holds off
-- writes for as long as it takes (under a second for 500,000 rows here). The
-- rows that table's relays failed get their retry time from the relay's look
-- (its dated step), a batch at a time, so the step does not rewrite them.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                   WHERE attrelid = 'lily_outbox'::regclass AND attname = 'retry_at' AND NOT attisdropped) THEN
        ALTER TABLE lily_outbox ADD COLUMN retry_at timestamptz; -- a failed row's next try; NULL until it fails
    END IF;
    -- 003 replaces this index: on a table that has 003's, building it only
    -- for 003 to drop it again would hold off writes twice.
    -- Indexes are looked for on this lily_outbox: a schema further down the
    -- search_path may hold ones of the same names, on its own.
    IF NOT EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                   WHERE i.indrelid = 'lily_outbox'::regclass AND c.relname IN ('lily_outbox_untried', 'lily_outbox_untried_head')) THEN
        CREATE INDEX lily_outbox_untried ON lily_outbox (id) WHERE attempts = 0;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                   WHERE i.indrelid = 'lily_outbox'::regclass AND c.relname = 'lily_outbox_retry') THEN
        CREATE INDEX lily_outbox_retry ON lily_outbox (retry_at) WHERE attempts > 0;
    END IF;
END
$$;
