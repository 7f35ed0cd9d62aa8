-- Lily's transactional outbox, third step: the relay's look skips the rows
-- held behind an earlier row of their key.
--
-- A key with a backlog (a bulk import for one customer, a constant key) had
-- each look walk every row of the key in id order and drop each after its
-- lookup of an earlier row: the look grew with the backlog, so draining it
-- took time quadratic in its length. A look now marks each row it finds held
-- so (behind); the rows never tried are read through an index that leaves
-- out the marked ones, and the relay clears the mark of a key's next row when
-- it deletes the key's first. A mark the relay could not clear (a row
-- deleted by hand, or by a relay of an earlier version during a rolling
-- upgrade) is cleared by a relay's sweep, once per lease at most, which reads
-- one row per held key through lily_outbox_behind.
--
-- Idempotent, and it takes no lock on a table that has it already: apply it
-- after 002, with pgoutbox.Migrate or with psql -f. Adding the column with a
-- constant default is instant; building the indexes holds off writes for as
-- long as it takes. The index of 002 that read the rows never tried is
-- replaced: a relay of an earlier version still running reads them by the
-- primary key until it is replaced.
DO $$
DECLARE
    home text := (SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = 'lily_outbox'::regclass);
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                   WHERE attrelid = 'lily_outbox'::regclass AND attname = 'behind' AND NOT attisdropped) THEN
        ALTER TABLE lily_outbox ADD COLUMN behind boolean NOT NULL DEFAULT false; -- held behind an earlier row of its key
    END IF;
    -- Indexes are looked for, and dropped, on this lily_outbox: a schema
    -- further down the search_path may hold ones of the same names, on its own.
    IF NOT EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                   WHERE i.indrelid = 'lily_outbox'::regclass AND c.relname = 'lily_outbox_untried_head') THEN
        CREATE INDEX lily_outbox_untried_head ON lily_outbox (id) WHERE attempts = 0 AND NOT behind;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                   WHERE i.indrelid = 'lily_outbox'::regclass AND c.relname = 'lily_outbox_behind') THEN
        CREATE INDEX lily_outbox_behind ON lily_outbox (order_key, id) WHERE behind;
    END IF;
    EXECUTE format('DROP INDEX IF EXISTS %s.lily_outbox_untried', home);
END
$$;
