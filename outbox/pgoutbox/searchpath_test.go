package pgoutbox_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lily-mq/lily/internal/pgschema"
	"github.com/lily-mq/lily/outbox/pgoutbox"
	"github.com/lily-mq/lily/runtime"
)

// The relay's table and search_path: which lily_outbox it reads when the
// connections of its pool look elsewhere.

// A handler (or any user of the relay's pool) that sends a session-level
// SET search_path leaves it on its pooled connection after COMMIT. The
// relay's looks, reads, deletes and sweeps that later run on that
// connection still use the lily_outbox it found at its start, never the one
// the changed path points at: it neither publishes another service's rows
// nor leaves its own unpublished.
func TestSearchPathSetOnThePoolDoesNotMoveTheRelay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("q", nil)
	theirs := e.queue("theirs", nil)
	// Another service's schema, with its own lily_outbox and a row in it.
	other := e.otherSchema()
	otherPool := e.poolIn(other)
	if err := pgx.BeginFunc(e.ctx, otherPool, func(tx pgx.Tx) error {
		return pgoutbox.Write(e.ctx, tx, message(theirs, "theirs"))
	}); err != nil {
		t.Fatal(err)
	}
	// The relay's pool has one connection, so that every statement of the
	// relay meets the path left on it.
	pool := e.oneConnection()
	e.write(message(q, "m1"))
	_, stop := e.relayOn(pool, e.brokerURL, relayStep, pgoutbox.Options{Poll: 50 * time.Millisecond, Lease: relayLease})
	e.eventually("m1 published and its row deleted", func() bool { return e.ready(q) == 1 && len(e.rows()) == 0 })

	// A handler's SET, not SET LOCAL, through a transaction on the pool.
	if err := pgx.BeginFunc(e.ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(e.ctx, "SET search_path TO "+other)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var path string
	if err := pool.QueryRow(e.ctx, "SHOW search_path").Scan(&path); err != nil || path != other {
		t.Fatalf("the pooled connection's search_path = %q (%v); the test wants the handler's left on it", path, err)
	}
	e.write(message(q, "m2"), message(q, "m3"))
	e.eventually("m2 and m3 published and their rows deleted", func() bool { return e.ready(q) == 3 && len(e.rows()) == 0 })
	rep := stop()
	if want := map[runtime.Path]int{"published": 3}; !cmp.Equal(counts(rep), want) {
		t.Errorf("report counts %v, want %v", rep.Counts, want)
	}
	if n := e.ready(theirs); n != 0 {
		t.Errorf("%d messages of the other schema's lily_outbox published; want none", n)
	}
	var left int
	if err := otherPool.QueryRow(e.ctx, "SELECT count(*) FROM lily_outbox WHERE lease_owner IS NULL").Scan(&left); err != nil || left != 1 {
		t.Errorf("%d rows of the other schema's lily_outbox left unleased (%v); want its one row, untouched", left, err)
	}
	if got := ids(e.take(q)); len(got) != 3 || got["m1"] != 1 || got["m2"] != 1 || got["m3"] != 1 {
		t.Errorf("queue holds %v, want m1, m2 and m3 once", got)
	}
}

// A lily_outbox the search_path finds among the session's temporary tables
// is refused at the start: named with its pg_temp_N schema, it would be
// another session's table on every other connection of the pool.
func TestRelayRefusesATemporaryTable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg, err := pgxpool.ParseConfig(e.pgURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = e.pool.Config().ConnConfig.RuntimeParams["search_path"]
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "CREATE TEMP TABLE lily_outbox (LIKE lily_outbox INCLUDING ALL)")
		return err
	}
	pool, err := pgxpool.NewWithConfig(e.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	p, err := runtime.NewPublisher(runtime.Config{URLs: []string{e.brokerURL}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// Refused at once; a relay that took the table would run until this
	// ends.
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	if _, err := pgoutbox.NewRelay(pool, p, pgoutbox.Options{}).Run(ctx); err == nil || !strings.Contains(err.Error(), "temporary table") {
		t.Errorf("Run = %v, want the temporary table refused", err)
	}
}

// Migrate on a search_path whose first schema holds no lily_outbox and a
// later one does: a table up to date there is left as it is, and the relay
// and Write use it; a table that lacks a migration (one an earlier version
// made) is refused, naming both schemas, with nothing created: applying the
// files would create an empty lily_outbox in the first schema, in front of
// the rows waiting in the later one, which no relay would then publish. Once
// the table is moved into the first schema, Migrate brings it up to date.
func TestMigrateRefusesATableFurtherDownThePath(t *testing.T) {
	for kind, upToDate := range map[string]bool{"a table up to date": true, "a table that lacks a migration": false} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			first, second := e.twoSchemas()
			later := e.poolIn(second)
			if upToDate {
				if err := pgoutbox.Migrate(e.ctx, later); err != nil {
					t.Fatal(err)
				}
			} else {
				sql, err := os.ReadFile("migrations/001_lily_outbox.sql")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := later.Exec(e.ctx, string(sql)); err != nil {
					t.Fatal(err)
				}
			}
			if err := pgx.BeginFunc(e.ctx, later, func(tx pgx.Tx) error {
				return pgoutbox.Write(e.ctx, tx, message("q", "waiting"))
			}); err != nil {
				t.Fatal(err)
			}
			pool := e.poolIn(first + ", " + second)
			for range 2 {
				err := pgoutbox.Migrate(e.ctx, pool)
				switch {
				case upToDate && err != nil:
					t.Fatalf("Migrate with an up-to-date lily_outbox in the path's second schema: %v", err)
				case !upToDate && (err == nil || !strings.Contains(err.Error(), `"`+first+`"`) || !strings.Contains(err.Error(), `"`+second+`"`)):
					t.Fatalf("Migrate with a lily_outbox lacking a migration in the path's second schema = %v; want a refusal naming %s and %s", err, first, second)
				}
			}
			var where string
			var rows int
			if err := e.pool.QueryRow(e.ctx, "SELECT coalesce(to_regclass($1)::text, 'nowhere'), (SELECT count(*) FROM "+second+".lily_outbox)",
				first+".lily_outbox").Scan(&where, &rows); err != nil || where != "nowhere" || rows != 1 {
				t.Fatalf("a lily_outbox in the path's first schema: %s, rows in the second's: %d (%v); want none made, the row waiting", where, rows, err)
			}
			if upToDate {
				return
			}
			// The remedy the refusal names.
			if _, err := e.pool.Exec(e.ctx, "ALTER TABLE "+second+".lily_outbox SET SCHEMA "+first); err != nil {
				t.Fatal(err)
			}
			if err := pgoutbox.Migrate(e.ctx, pool); err != nil {
				t.Fatalf("Migrate once the table is in the first schema: %v", err)
			}
			var behind bool
			if err := e.pool.QueryRow(e.ctx, "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'behind'), (SELECT count(*) FROM "+first+".lily_outbox)",
				first+".lily_outbox").Scan(&behind, &rows); err != nil || !behind || rows != 1 {
				t.Fatalf("the moved table has behind: %v, %d rows (%v); want it brought up to date, its row kept", behind, rows, err)
			}
		})
	}
}

// A schema may be named with any UTF-8 but NUL: Migrate's refusal names
// both schemas, and the statement it suggests, without their escapes or
// bidi overrides as they are.
func TestMigrateRefusalNamesHostileSchemasSanitized(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := name()
	first, second := "rv-pgfix-first-\x1b[31m\u202e-"+n, "rv-pgfix-second-\x1b[31m\u202e-"+n
	for _, schema := range []string{first, second} {
		quoted := pgx.Identifier{schema}.Sanitize()
		if _, err := e.pool.Exec(e.ctx, "CREATE SCHEMA "+quoted); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if _, err := e.pool.Exec(context.Background(), "DROP SCHEMA "+quoted+" CASCADE"); err != nil {
				t.Error(err)
			}
		})
	}
	// A table that lacks a migration, in the path's second schema.
	sql, err := os.ReadFile("migrations/001_lily_outbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.poolIn(pgx.Identifier{second}.Sanitize()).Exec(e.ctx, string(sql)); err != nil {
		t.Fatal(err)
	}
	err = pgoutbox.Migrate(e.ctx, e.poolIn(pgx.Identifier{first}.Sanitize()+", "+pgx.Identifier{second}.Sanitize()))
	if err == nil || !strings.Contains(err.Error(), strconv.Quote(first)) || !strings.Contains(err.Error(), strconv.Quote(second)) {
		t.Fatalf("Migrate with a lily_outbox lacking a migration in the path's second schema = %v; want a refusal naming %q and %q", err, first, second)
	}
	if bad := unsafeRunes(err.Error()); bad != "" {
		t.Fatalf("the refusal holds %s: %q", bad, err)
	}
}

// Migrate brings the lily_outbox the search_path finds up to date by the
// indexes on that table, not by indexes of the same names that another
// schema's lily_outbox further down the path has: with the table first in
// the path at 001 and another's at 002 behind it, the first got no
// lily_outbox_retry (the second's was found by name, and isCurrent said
// current), and 003 dropped the second's lily_outbox_untried.
func TestMigrateLooksAtTheIndexesOfItsOwnTable(t *testing.T) {
	e := newEnv(t)
	first, second := e.twoSchemas()
	apply := func(pool *pgxpool.Pool, files ...string) {
		for _, f := range files {
			sql, err := os.ReadFile("migrations/" + f)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(e.ctx, string(sql)); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
		}
	}
	apply(e.poolIn(second), "001_lily_outbox.sql", "002_lily_outbox_retry.sql")
	apply(e.poolIn(first), "001_lily_outbox.sql")
	if err := pgoutbox.Migrate(e.ctx, e.poolIn(first+", "+second)); err != nil {
		t.Fatal(err)
	}
	indexes := func(schema string) []string {
		var names []string
		if err := e.pool.QueryRow(e.ctx, `SELECT array_agg(c.relname::text ORDER BY c.relname) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
			WHERE i.indrelid = $1::regclass`, schema+".lily_outbox").Scan(&names); err != nil {
			t.Fatal(err)
		}
		return names
	}
	for schema, want := range map[string][]string{
		first:  {"lily_outbox_behind", "lily_outbox_order_key", "lily_outbox_pkey", "lily_outbox_retry", "lily_outbox_untried_head"},
		second: {"lily_outbox_order_key", "lily_outbox_pkey", "lily_outbox_retry", "lily_outbox_untried"},
	} {
		if diff := cmp.Diff(want, indexes(schema)); diff != "" {
			t.Errorf("the indexes of %s.lily_outbox (-want +got):\n%s", schema, diff)
		}
	}
}

// twoSchemas creates two schemas of the test's own, dropped with what they
// hold when it ends.
func (e *env) twoSchemas() (first, second string) {
	e.t.Helper()
	n := name()
	first, second = "lily_outbox_test_first_"+n, "lily_outbox_test_second_"+n
	if _, err := e.pool.Exec(e.ctx, "CREATE SCHEMA "+first+"; CREATE SCHEMA "+second); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		if _, err := e.pool.Exec(context.Background(), "DROP SCHEMA "+first+" CASCADE; DROP SCHEMA "+second+" CASCADE"); err != nil {
			e.t.Error(err)
		}
	})
	return first, second
}

// Write inserts into the lily_outbox its transaction's search_path finds:
// a SET LOCAL in the writer's transaction moves that transaction's writes
// alone, and the next transaction on the same connection writes where the
// pool's search_path points again.
func TestWriteUsesTheTransactionsSearchPath(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	other := e.otherSchema()
	pool := e.oneConnection()
	if err := pgx.BeginFunc(e.ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(e.ctx, "SET LOCAL search_path TO "+other); err != nil {
			return err
		}
		return pgoutbox.Write(e.ctx, tx, message("q", "there"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(e.ctx, pool, func(tx pgx.Tx) error {
		return pgoutbox.Write(e.ctx, tx, message("q", "here"))
	}); err != nil {
		t.Fatal(err)
	}
	var there, here string
	if err := e.pool.QueryRow(e.ctx, "SELECT (SELECT string_agg(properties->>'message_id', ',') FROM "+other+".lily_outbox), (SELECT string_agg(properties->>'message_id', ',') FROM lily_outbox)").Scan(&there, &here); err != nil {
		t.Fatal(err)
	}
	if there != "there" || here != "here" {
		t.Errorf("the other schema's lily_outbox holds %q, the pool's %q; want \"there\" and \"here\"", there, here)
	}
}

// otherSchema makes a schema of the test's own beside the env's, dropped at
// its end, with a lily_outbox migrated in it: another service's, or
// another tenant's.
func (e *env) otherSchema() string {
	e.t.Helper()
	other := "lily_outbox_test_other_" + name()
	if _, err := e.pool.Exec(e.ctx, "CREATE SCHEMA "+other); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		if _, err := e.pool.Exec(context.Background(), "DROP SCHEMA "+other+" CASCADE"); err != nil {
			e.t.Error(err)
		}
	})
	if err := pgoutbox.Migrate(e.ctx, e.poolIn(other)); err != nil {
		e.t.Fatal(err)
	}
	return other
}

// oneConnection is a pool of one connection on the env's schema: every
// statement sent through it meets the session state the one before left.
func (e *env) oneConnection() *pgxpool.Pool {
	e.t.Helper()
	schema := e.pool.Config().ConnConfig.RuntimeParams["search_path"]
	pool, err := pgschema.Pool(e.ctx, e.pgURL, schema, "", 1)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(pool.Close)
	return pool
}
