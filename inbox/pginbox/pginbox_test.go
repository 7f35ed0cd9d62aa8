package pginbox_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lily-mq/lily/inbox/inboxtest"
	"github.com/lily-mq/lily/inbox/pginbox"
	"github.com/lily-mq/lily/internal/services"
	_ "github.com/lily-mq/lily/internal/update"
	"github.com/lily-mq/lily/runtime"
)

// testSchema holds the business tables and the slow trigger; nothing in it
// is part of the inbox.
const testSchema = "lily_inbox_test"

// setup prepares the database at url once per test binary.
func setup(url string) error {
	setupOnce.Do(func() { setupErr = prepare(url) })
	return setupErr
}

var (
	setupOnce sync.Once
	setupErr  error
)

func prepare(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := pginbox.Migrate(ctx, pool); err != nil {
		return err
	}
	// Twice on purpose: Migrate must be idempotent.
	if err := pginbox.Migrate(ctx, pool); err != nil {
		return err
	}
	// slow_commit sleeps at COMMIT for the seconds in a row's pause: a
	// deferred constraint trigger runs while COMMIT is in progress.
	_, err = pool.Exec(ctx, `
		CREATE SCHEMA IF NOT EXISTS `+testSchema+`;
		CREATE OR REPLACE FUNCTION `+testSchema+`.slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			PERFORM pg_sleep(NEW.pause);
			RETURN NULL;
		END $$;`)
	return err
}

// env is one test's pool, business table and consumer-name prefix.
type env struct {
	t      *testing.T
	ctx    context.Context
	pool   *pgxpool.Pool
	url    string // the database's
	table  string
	prefix string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	url := services.PostgreSQL(t)
	if err := setup(url); err != nil {
		t.Fatalf("PostgreSQL at %s (set LILY_PG_DSN to another): %v", url, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	closePool(t, pool)
	unique := fmt.Sprintf("%d", time.Now().UnixNano())
	e := &env{t: t, ctx: ctx, pool: pool, url: url,
		table:  testSchema + ".biz_" + unique,
		prefix: strings.ReplaceAll(t.Name(), "/", ".") + "." + unique}
	_, err = pool.Exec(ctx, `
		CREATE TABLE `+e.table+` (key text NOT NULL, pause float8 NOT NULL DEFAULT 0);
		CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON `+e.table+`
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
			WHEN (NEW.pause > 0) EXECUTE FUNCTION `+testSchema+`.slow_commit();`)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if _, err := pool.Exec(ctx, "DROP TABLE "+e.table); err != nil {
			t.Error(err)
		}
		if _, err := pool.Exec(ctx, "DELETE FROM lily_inbox WHERE starts_with(consumer, $1)", e.prefix); err != nil {
			t.Error(err)
		}
	})
	return e
}

// write inserts a business row in the claim's transaction; pause > 0 makes
// its COMMIT sleep that many seconds.
func (e *env) write(ctx context.Context, key string, pause float64) error {
	tx, ok := pginbox.Tx(ctx)
	if !ok {
		return errors.New("no transaction in the handler's context")
	}
	_, err := tx.Exec(ctx, "INSERT INTO "+e.table+" (key, pause) VALUES ($1, $2)", key, pause)
	return err
}

// countRows counts the committed business rows with key.
func (e *env) countRows(ctx context.Context, key string) (n int, err error) {
	err = e.pool.QueryRow(ctx, "SELECT count(*) FROM "+e.table+" WHERE key = $1", key).Scan(&n)
	return n, err
}

// countClaims counts the committed claim rows of (consumer, id).
func (e *env) countClaims(ctx context.Context, consumer, id string) (n int, err error) {
	err = e.pool.QueryRow(ctx, "SELECT count(*) FROM lily_inbox WHERE consumer = $1 AND message_id = $2", consumer, id).Scan(&n)
	return n, err
}

// claim claims the test's message m1 and wants the given answer (claimed,
// duplicate or deferred).
func (e *env) claim(inbox *pginbox.Inbox, want string) runtime.InboxTx {
	e.t.Helper()
	tx, err := inbox.Begin(e.ctx, e.prefix, "m1")
	if got, detail := answer(tx, err); got != want {
		e.t.Fatalf("Begin = %s (%s); want %s", got, detail, want)
	}
	return tx
}

// claimEndedBy claims m1 and sends stmts through the claim's transaction,
// as a handler that ends it itself through Exec does; it returns the claim,
// the context it is bound to and the handler's view of its transaction.
func (e *env) claimEndedBy(inbox *pginbox.Inbox, stmts []string) (runtime.InboxTx, context.Context, pgx.Tx) {
	e.t.Helper()
	tx := e.claim(inbox, "claimed")
	ctx := tx.Bind(e.ctx)
	h, _ := pginbox.Tx(ctx)
	for _, sql := range stmts {
		if _, err := h.Exec(ctx, sql); err != nil {
			e.t.Fatal(err)
		}
	}
	return tx, ctx, h
}

// answer names Begin's answer as the runtime reads it: claimed, duplicate or
// deferred, with the error's text.
func answer(tx runtime.InboxTx, err error) (word, detail string) {
	switch {
	case err == nil && tx != nil:
		return "claimed", ""
	case errors.Is(err, runtime.ErrDuplicate):
		return "duplicate", err.Error()
	case err != nil:
		return "deferred", err.Error()
	}
	return "neither a transaction nor an error", ""
}

// said names Commit's answer as the runtime reads it: committed, failed or
// ambiguous, with the error's text.
func said(err error) (word, detail string) {
	switch {
	case err == nil:
		return "committed", ""
	case errors.Is(err, runtime.ErrCommitAmbiguous):
		return "ambiguous", err.Error()
	}
	return "failed", err.Error()
}

// expect wants n business rows with key k and n claim rows of m1.
func (e *env) expect(n int) {
	e.t.Helper()
	rows, err := e.countRows(e.ctx, "k")
	if err != nil {
		e.t.Fatal(err)
	}
	claims, err := e.countClaims(e.ctx, e.prefix, "m1")
	if err != nil {
		e.t.Fatal(err)
	}
	if rows != n || claims != n {
		e.t.Fatalf("%d business rows, %d claim rows; want %d of each", rows, claims, n)
	}
}

// commit commits tx and wants it committed.
func (e *env) commit(tx runtime.InboxTx) {
	e.t.Helper()
	if ev, detail := said(tx.Commit(e.ctx)); ev != "committed" {
		e.t.Fatalf("Commit = %v (%s), want committed", ev, detail)
	}
}

func TestConformance(t *testing.T) {
	e := newEnv(t)
	// A lock wait well past the time the suite keeps a claim open while
	// another waits on it, so that the waiting claim answers after it ended.
	inbox := pginbox.New(e.pool, pginbox.Options{LockTimeout: time.Second})
	inboxtest.Run(t, inboxtest.Harness{
		Inbox: &prefixed{inbox, e.prefix},
		Write: func(ctx context.Context, key string) error { return e.write(ctx, e.prefix+key, 0) },
		Rows:  func(ctx context.Context, key string) (int, error) { return e.countRows(ctx, e.prefix+key) },
		Claims: func(ctx context.Context, consumer, id string) (int, error) {
			return e.countClaims(ctx, e.prefix+consumer, id)
		},
		Abort: func(ctx context.Context) error {
			tx, ok := pginbox.Tx(ctx)
			if !ok {
				return errors.New("no transaction in the handler's context")
			}
			if _, err := tx.Exec(ctx, "SELECT 1/0"); err == nil {
				return errors.New("SELECT 1/0 succeeded")
			}
			return nil
		},
	})
}

// prefixed puts the test's prefix on consumer names, so that cleanup finds
// every claim row the suite made.
type prefixed struct {
	runtime.Inbox
	prefix string
}

func (p *prefixed) Begin(ctx context.Context, consumer, id string) (runtime.InboxTx, error) {
	return p.Inbox.Begin(ctx, p.prefix+consumer, id)
}

// The handler's view of the claim: the lock_timeout in force before the
// claim (the claim's own bounds only the claim), savepoints, and no Commit or
// Rollback of its own.
func TestClaimTransaction(t *testing.T) {
	e := newEnv(t)
	inbox := pginbox.New(e.pool, pginbox.Options{LockTimeout: 1500 * time.Millisecond})
	tx := e.claim(inbox, "claimed")
	ctx := tx.Bind(e.ctx)
	if err := e.write(ctx, "k", 0); err != nil {
		t.Fatal(err)
	}
	h, _ := pginbox.Tx(ctx)
	var inTx string
	if err := h.QueryRow(ctx, "SHOW lock_timeout").Scan(&inTx); err != nil {
		t.Fatal(err)
	}
	var outside string
	if err := e.pool.QueryRow(e.ctx, "SHOW lock_timeout").Scan(&outside); err != nil {
		t.Fatal(err)
	}
	if inTx != outside || inTx == "1500ms" {
		t.Errorf("lock_timeout for the handler's writes = %q, want %q as outside the claim", inTx, outside)
	}
	// A savepoint rolled back takes its own write only.
	sp, err := h.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Exec(ctx, "INSERT INTO "+e.table+" (key) VALUES ('k')"); err != nil {
		t.Fatal(err)
	}
	if err := sp.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for name, end := range map[string]func(context.Context) error{"Commit": h.Commit, "Rollback": h.Rollback} {
		if err := end(ctx); !errors.Is(err, pginbox.ErrInboxOwnsTx) {
			t.Errorf("the handler's %s = %v, want ErrInboxOwnsTx", name, err)
		}
	}
	e.commit(tx)
	e.expect(1)
}

func TestFailedStatementMeansCommitFailed(t *testing.T) {
	e := newEnv(t)
	inbox := pginbox.New(e.pool, pginbox.Options{})
	tx := e.claim(inbox, "claimed")
	ctx := tx.Bind(e.ctx)
	if err := e.write(ctx, "k", 0); err != nil {
		t.Fatal(err)
	}
	h, _ := pginbox.Tx(ctx)
	if _, err := h.Exec(ctx, "SELECT 1/0"); err == nil {
		t.Fatal("1/0 succeeded")
	}
	if ev, detail := said(tx.Commit(e.ctx)); ev != "failed" || detail == "" {
		t.Fatalf("Commit after a failed statement = %v (%q), want failed with a detail", ev, detail)
	}
	e.expect(0)
}

// A handler that ends the claim's transaction through Exec goes around
// ErrInboxOwnsTx. After a ROLLBACK its later writes commit one by one and
// the claim is gone, yet the server answers the runtime's COMMIT with only a
// warning: that must not read as committed. After a COMMIT the claim is
// committed, and is reported so. One that then sends BEGIN writes in a
// transaction that is not the claim's: it is rolled back, not committed
// without the claim, and the claim's own is reported. Either way the next
// claim finds the message as the report says.
func TestHandlerEndingTheTransactionItself(t *testing.T) {
	for _, c := range []struct {
		end  []string
		want string
		// rows is how many of the writes after the end are committed.
		rows int
	}{
		{[]string{"ROLLBACK"}, "failed", 1},
		{[]string{"COMMIT"}, "committed", 1},
		{[]string{"ROLLBACK", "BEGIN"}, "failed", 0},
		{[]string{"COMMIT", "BEGIN"}, "committed", 1},
	} {
		t.Run(strings.Join(c.end, "-"), func(t *testing.T) {
			e := newEnv(t)
			inbox := pginbox.New(e.pool, pginbox.Options{})
			tx, ctx, _ := e.claimEndedBy(inbox, c.end)
			if err := e.write(ctx, "after", 0); err != nil {
				t.Fatal(err)
			}
			if ev, detail := said(tx.Commit(e.ctx)); ev != c.want || (ev == "failed" && !strings.Contains(detail, "the handler ended the claim's transaction itself")) {
				t.Fatalf("Commit = %v (%q), want %s", ev, detail, c.want)
			}
			claims, err := e.countClaims(e.ctx, e.prefix, "m1")
			if err != nil {
				t.Fatal(err)
			}
			if want := map[string]int{"failed": 0, "committed": 1}[c.want]; claims != want {
				t.Errorf("%d claim rows, want %d", claims, want)
			}
			rows, err := e.countRows(e.ctx, "after")
			if err != nil {
				t.Fatal(err)
			}
			if rows != c.rows {
				t.Errorf("%d rows written after %s, want %d", rows, strings.Join(c.end, " and "), c.rows)
			}
			// The connection went back to the pool.
			if n := e.pool.Stat().AcquiredConns(); n != 0 {
				t.Errorf("%d connections still acquired", n)
			}
			if c.want == "committed" {
				e.claim(inbox, "duplicate")
				return
			}
			e.commit(e.claim(inbox, "claimed"))
		})
	}
}

// A handler that ends the claim's transaction through Exec, sends BEGIN and
// then a statement that fails leaves the session in an aborted transaction
// that is not the claim's, which answers no query. Its COMMIT would be
// answered ROLLBACK, yet the claim's fate was decided by the handler's
// COMMIT or ROLLBACK: that is what Commit reports, and the aborted
// transaction's writes are not committed.
func TestHandlerEndingTheTransactionThenFailing(t *testing.T) {
	for _, c := range []struct{ end, want string }{
		{"COMMIT", "committed"},
		{"ROLLBACK", "failed"},
	} {
		t.Run(c.end, func(t *testing.T) {
			e := newEnv(t)
			inbox := pginbox.New(e.pool, pginbox.Options{})
			tx := e.claim(inbox, "claimed")
			ctx := tx.Bind(e.ctx)
			if err := e.write(ctx, "k", 0); err != nil {
				t.Fatal(err)
			}
			h, _ := pginbox.Tx(ctx)
			for _, sql := range []string{c.end, "BEGIN"} {
				if _, err := h.Exec(ctx, sql); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.write(ctx, "after", 0); err != nil {
				t.Fatal(err)
			}
			if _, err := h.Exec(ctx, "SELECT 1/0"); err == nil {
				t.Fatal("1/0 succeeded")
			}
			ev, detail := said(tx.Commit(e.ctx))
			if ev != c.want {
				t.Fatalf("Commit = %v (%q), want %s", ev, detail, c.want)
			}
			rows, err := e.countRows(e.ctx, "after")
			if err != nil {
				t.Fatal(err)
			}
			if rows != 0 {
				t.Errorf("%d rows of the aborted transaction committed, want 0", rows)
			}
			if n := e.pool.Stat().AcquiredConns(); n != 0 {
				t.Errorf("%d connections still acquired", n)
			}
			if c.want == "committed" {
				e.expect(1)
				e.claim(inbox, "duplicate")
				return
			}
			e.expect(0)
			e.commit(e.claim(inbox, "claimed"))
		})
	}
}

// A unique violation found only at COMMIT (a deferred constraint) is the
// server's definite answer: failed, not ambiguous.
func TestDeferredConstraintAtCommitIsFailed(t *testing.T) {
	e := newEnv(t)
	if _, err := e.pool.Exec(e.ctx, "ALTER TABLE "+e.table+" ADD UNIQUE (key) DEFERRABLE INITIALLY DEFERRED"); err != nil {
		t.Fatal(err)
	}
	inbox := pginbox.New(e.pool, pginbox.Options{})
	tx := e.claim(inbox, "claimed")
	ctx := tx.Bind(e.ctx)
	for range 2 {
		if err := e.write(ctx, "k", 0); err != nil {
			t.Fatal(err)
		}
	}
	if ev, detail := said(tx.Commit(e.ctx)); ev != "failed" || !strings.Contains(detail, "23505") {
		t.Fatalf("Commit = %v (%q), want failed with SQLSTATE 23505", ev, detail)
	}
	e.expect(0)
}

// A claim that defers leaves no transaction open: its connection goes back
// to the pool, so that deferrals cannot drain it, and the holder's claim
// is the only one the pool lends out.
func TestDeferredClaimHoldsNoConnection(t *testing.T) {
	e := newEnv(t)
	inbox := pginbox.New(e.pool, pginbox.Options{LockTimeout: 300 * time.Millisecond})
	holder := e.claim(inbox, "claimed")
	for range 3 {
		e.claim(inbox, "deferred")
	}
	if n := e.pool.Stat().AcquiredConns(); n != 1 {
		t.Errorf("%d connections acquired from the pool after three deferrals, want the holder's 1", n)
	}
	holder.Rollback(e.ctx)
	if n := e.pool.Stat().AcquiredConns(); n != 0 {
		t.Errorf("%d connections acquired after the holder's rollback, want 0", n)
	}
	e.commit(e.claim(inbox, "claimed"))
}

// A claim whose context ends before LockTimeout (the runtime's step, or
// the little budget a delivery has left) waits on a held claim only until
// shortly before its context ends: PostgreSQL answers lock_not_available,
// and the claim defers saying another worker holds it, its connection kept.
// Waiting on to the context's end, pgx would close the connection to cancel
// the statement, one connection of the pool lost per deferral.
func TestClaimWaitEndsBeforeItsContext(t *testing.T) {
	e := newEnv(t)
	inbox := pginbox.New(e.pool, pginbox.Options{LockTimeout: 3 * time.Second})
	holder := e.claim(inbox, "claimed")
	defer holder.Rollback(e.ctx)
	// A second connection made and given back: the deferrals need no new one.
	other, err := inbox.Begin(e.ctx, e.prefix, "m2")
	if got, detail := answer(other, err); got != "claimed" {
		t.Fatalf("Begin of m2 = %s (%s); want claimed", got, detail)
	}
	other.Rollback(e.ctx)
	made := e.pool.Stat().NewConnsCount()
	for range 3 {
		// Two seconds keep back half a second for the lock's answer and the
		// rollback, which a loaded machine took over 250 ms (the least kept
		// back) to give.
		ctx, cancel := context.WithTimeout(e.ctx, 2*time.Second)
		tx, err := inbox.Begin(ctx, e.prefix, "m1")
		ended := ctx.Err()
		cancel()
		if got, detail := answer(tx, err); got != "deferred" || !strings.Contains(detail, "another worker holds the claim") || !strings.Contains(detail, "cut to end before the claim's context") || ended != nil {
			t.Errorf("Begin on a held claim with 2s = %s (%s), its context %v; want deferred, another worker holding the claim, before the context ended", got, detail, ended)
		}
	}
	if n := e.pool.Stat().NewConnsCount() - made; n != 0 {
		t.Errorf("%d connections made by the pool for three deferrals, want 0", n)
	}
}

func TestBeginWithoutDatabaseIsAnError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Port 1 on loopback: nothing listens, the dial is refused at once.
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:1/test?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	tx, err := pginbox.New(pool, pginbox.Options{}).Begin(ctx, "c", "m1")
	if got, _ := answer(tx, err); got != "deferred" || tx != nil {
		t.Fatalf("Begin without a database = %v, %v; want no transaction and an error (deferred)", tx, err)
	}
}

// A worker's role may not create anything in the schema: once lily_inbox is
// there, Migrate leaves it be (CREATE TABLE IF NOT EXISTS would want the
// schema's CREATE privilege all the same), and the worker claims.
func TestMigrateWithoutCreatePrivilege(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := worker(t, ctx, "SELECT, INSERT")
	if err := pginbox.Migrate(ctx, pool); err != nil {
		t.Fatalf("Migrate by a role without CREATE, lily_inbox there: %v", err)
	}
	tx, err := pginbox.New(pool, pginbox.Options{}).Begin(ctx, "c", "m1")
	if got, detail := answer(tx, err); got != "claimed" {
		t.Fatalf("Begin = %s (%s); want claimed", got, detail)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// The SQL file creates lily_inbox in the first schema of the search_path
// even when a later schema of the path has one: a service that found
// another's table there would take that service's claims for its own, and
// ACK its messages as duplicates without running them. Migrate, after it,
// finds the table in the first schema and leaves both be.
func TestSQLFileCreatesInTheFirstSchema(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url, admin, shared, svc := twoSchemas(t, ctx, "shared", "svc")
	a := connectAs(t, ctx, url, shared, "")
	if err := pginbox.Migrate(ctx, a); err != nil {
		t.Fatal(err)
	}
	b := connectAs(t, ctx, url, svc+", "+shared, "")
	sql, err := os.ReadFile("migrations/001_lily_inbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Exec(ctx, string(sql)); err != nil {
		t.Fatal(err)
	}
	if err := pginbox.Migrate(ctx, b); err != nil {
		t.Fatalf("Migrate with lily_inbox in the path's first schema and a later one: %v", err)
	}
	var in string
	if err := admin.QueryRow(ctx, "SELECT coalesce(to_regclass($1)::text, 'nowhere')", svc+".lily_inbox").Scan(&in); err != nil || in != svc+".lily_inbox" {
		t.Fatalf("lily_inbox in the search_path's first schema %s: %s (%v)", svc, in, err)
	}
	tx, err := pginbox.New(a, pginbox.Options{}).Begin(ctx, "orders", "m1")
	if got, detail := answer(tx, err); got != "claimed" {
		t.Fatalf("service A's Begin = %s (%s); want claimed", got, detail)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err = pginbox.New(b, pginbox.Options{}).Begin(ctx, "orders", "m1")
	if got, detail := answer(tx, err); got != "claimed" {
		t.Fatalf("service B's Begin of A's key = %s (%s); want claimed in B's own table", got, detail)
	}
	tx.Rollback(ctx)
}

// Migrate refuses a search_path whose first schema holds no lily_inbox and
// a later one does (under the default "$user", public: a schema named after
// the role, the table applied into public by hand): creating one in the
// first schema would put an empty table in front of the one holding the
// committed claims, and every redelivery would run its handler again. It
// names both schemas and creates nothing.
func TestMigrateRefusesATableFurtherDownThePath(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url, admin, first, second := tableInTheSecondSchema(t, ctx)
	pool := connectAs(t, ctx, url, first+", "+second, "")
	tx, err := pginbox.New(pool, pginbox.Options{}).Begin(ctx, "orders", "m1")
	if got, detail := answer(tx, err); got != "claimed" {
		t.Fatalf("Begin = %s (%s); want claimed", got, detail)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		err := pginbox.Migrate(ctx, pool)
		if err == nil || !strings.Contains(err.Error(), `"`+first+`"`) || !strings.Contains(err.Error(), `"`+second+`"`) {
			t.Fatalf("Migrate with lily_inbox only in the path's second schema = %v; want a refusal naming %s and %s", err, first, second)
		}
	}
	var where string
	if err := admin.QueryRow(ctx, "SELECT coalesce(to_regclass($1)::text, 'nowhere')", first+".lily_inbox").Scan(&where); err != nil || where != "nowhere" {
		t.Fatalf("a lily_inbox in the path's first schema: %s (%v); want none made", where, err)
	}
	tx, err = pginbox.New(pool, pginbox.Options{}).Begin(ctx, "orders", "m1")
	if got, detail := answer(tx, err); got != "duplicate" {
		t.Fatalf("redelivery of the committed m1 after Migrate = %s (%s); want duplicate", got, detail)
	}
}

// A schema may be named with any UTF-8 but NUL: Migrate's refusal names
// both schemas, and the statement it suggests, without their escapes or
// bidi overrides as they are.
func TestMigrateRefusalNamesHostileSchemasSanitized(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := services.PostgreSQL(t)
	admin := connectAs(t, ctx, url, "public", "")
	unique := time.Now().UnixNano()
	first := fmt.Sprintf("rv-pgfix-first-\x1b[31m\u202e-%d", unique)
	second := fmt.Sprintf("rv-pgfix-second-\x1b[31m\u202e-%d", unique)
	for _, schema := range []string{first, second} {
		quoted := pgx.Identifier{schema}.Sanitize()
		if _, err := admin.Exec(ctx, "CREATE SCHEMA "+quoted); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if _, err := admin.Exec(context.Background(), "DROP SCHEMA "+quoted+" CASCADE"); err != nil {
				t.Error(err)
			}
		})
	}
	if err := pginbox.Migrate(ctx, connectAs(t, ctx, url, pgx.Identifier{second}.Sanitize(), "")); err != nil {
		t.Fatal(err)
	}
	err := pginbox.Migrate(ctx, connectAs(t, ctx, url, pgx.Identifier{first}.Sanitize()+", "+pgx.Identifier{second}.Sanitize(), ""))
	if err == nil || !strings.Contains(err.Error(), strconv.Quote(first)) || !strings.Contains(err.Error(), strconv.Quote(second)) {
		t.Fatalf("Migrate with lily_inbox only in the path's second schema = %v; want a refusal naming %q and %q", err, first, second)
	}
	for i, r := range err.Error() {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			t.Fatalf("the refusal holds %U at byte %d: %q", r, i, err)
		}
	}
}

// With no schema of the search_path in existence there is nowhere to
// create lily_inbox: Migrate says so.
func TestMigrateWithoutASchemaSaysSo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := connectAs(t, ctx, services.PostgreSQL(t), fmt.Sprintf("lily_inbox_nowhere_%d", time.Now().UnixNano()), "")
	if err := pginbox.Migrate(ctx, pool); err == nil || !strings.Contains(err.Error(), "no schema of the search_path exists") {
		t.Fatalf("Migrate with no schema of the search_path = %v; want an error saying so", err)
	}
}

// A misconfigured inbox fails every claim, and the runtime defers each: the
// error says plainly that only mending the database ends that, and holds no
// connection.
func TestMisconfiguredInboxSaysSo(t *testing.T) {
	for name, c := range map[string]struct {
		connect func(t *testing.T, ctx context.Context) *pgxpool.Pool
		says    string // what the error says: "SQLSTATE " and the class, or its own words
	}{
		"no lily_inbox in the search_path": {func(t *testing.T, ctx context.Context) *pgxpool.Pool {
			url := services.PostgreSQL(t)
			schema := fmt.Sprintf("lily_inbox_empty_%d", time.Now().UnixNano())
			admin := connectAs(t, ctx, url, "public", "")
			if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if _, err := admin.Exec(context.Background(), "DROP SCHEMA "+schema); err != nil {
					t.Error(err)
				}
			})
			return connectAs(t, ctx, url, schema, "")
		}, "no lily_inbox in the connection's search_path"},
		"no schema of the search_path exists": {func(t *testing.T, ctx context.Context) *pgxpool.Pool {
			return connectAs(t, ctx, services.PostgreSQL(t), "lily_inbox_nowhere", "")
		}, `no lily_inbox in the connection's search_path ("lily_inbox_nowhere")`},
		"a temporary lily_inbox": {func(t *testing.T, ctx context.Context) *pgxpool.Pool {
			return connectWith(t, ctx, services.PostgreSQL(t), func(cfg *pgxpool.Config) {
				cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
					_, err := conn.Exec(ctx, "CREATE TEMP TABLE lily_inbox (consumer text, message_id text, claimed_at timestamptz DEFAULT now(), xact xid8, PRIMARY KEY (consumer, message_id))")
					return err
				}
			})
		}, "is a temporary table"},
		"no INSERT privilege": {func(t *testing.T, ctx context.Context) *pgxpool.Pool { return worker(t, ctx, "SELECT") }, "SQLSTATE 42"},
		"a role that does not exist": {func(t *testing.T, ctx context.Context) *pgxpool.Pool {
			return connectWith(t, ctx, services.PostgreSQL(t), func(cfg *pgxpool.Config) { cfg.ConnConfig.User = "lily_inbox_nobody" })
		}, "SQLSTATE 28"},
		"a database that does not exist": {func(t *testing.T, ctx context.Context) *pgxpool.Pool {
			return connectWith(t, ctx, services.PostgreSQL(t), func(cfg *pgxpool.Config) { cfg.ConnConfig.Database = "lily_inbox_nowhere" })
		}, "SQLSTATE 3D"},
		// As on a hot standby, or with a role whose sessions are read-only.
		"a read-only session": {func(t *testing.T, ctx context.Context) *pgxpool.Pool {
			url := services.PostgreSQL(t)
			schema := fmt.Sprintf("lily_inbox_readonly_%d", time.Now().UnixNano())
			admin := connectAs(t, ctx, url, schema, "")
			if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if _, err := admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
					t.Error(err)
				}
			})
			if err := pginbox.Migrate(ctx, admin); err != nil {
				t.Fatal(err)
			}
			return connectWith(t, ctx, url, func(cfg *pgxpool.Config) {
				cfg.ConnConfig.RuntimeParams["search_path"] = schema
				cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
			})
		}, "SQLSTATE 25006"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			pool := c.connect(t, ctx)
			tx, err := pginbox.New(pool, pginbox.Options{}).Begin(ctx, "c", "m1")
			if got, detail := answer(tx, err); got != "deferred" || !strings.Contains(detail, "the inbox is misconfigured") || !strings.Contains(detail, c.says) {
				t.Fatalf("Begin = %s (%s); want deferred, the inbox misconfigured (%s)", got, detail, c.says)
			}
			if n := pool.Stat().AcquiredConns(); n != 0 {
				t.Errorf("%d connections acquired after the failed claim, want 0", n)
			}
		})
	}
}

// A timeout PostgreSQL cannot take (over 2147483647 ms, about 24.8 days)
// would fail every claim's SET, no redelivery mending it: the claims say
// the inbox is misconfigured, as operators are told to alert on, and name
// the option. The limit itself is taken.
func TestTimeoutOverTheServersLimitIsMisconfigured(t *testing.T) {
	const limit = 2147483647 * time.Millisecond
	for name, c := range map[string]struct {
		opts pginbox.Options
		says string // "": claimed
	}{
		"LockTimeout over the limit": {pginbox.Options{LockTimeout: 30 * 24 * time.Hour}, "the Options' LockTimeout, 720h0m0s,"},
		"IdleTimeout over the limit": {pginbox.Options{IdleTimeout: limit + time.Nanosecond}, "the Options' IdleTimeout, 596h31m23.647000001s,"},
		"LockTimeout at the limit":   {pginbox.Options{LockTimeout: limit}, ""},
		"IdleTimeout at the limit":   {pginbox.Options{IdleTimeout: limit}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			tx, err := pginbox.New(e.pool, c.opts).Begin(e.ctx, e.prefix, "m1")
			got, detail := answer(tx, err)
			if c.says == "" {
				if got != "claimed" {
					t.Fatalf("Begin = %s (%s); want claimed", got, detail)
				}
				tx.Rollback(e.ctx)
				return
			}
			if got != "deferred" || !strings.Contains(detail, "the inbox is misconfigured") || !strings.Contains(detail, c.says) {
				t.Fatalf("Begin = %s (%s); want deferred, the inbox misconfigured (%s)", got, detail, c.says)
			}
			if n := e.pool.Stat().AcquiredConns(); n != 0 {
				t.Errorf("%d connections acquired after the failed claim, want 0", n)
			}
		})
	}
}

// connectWith returns a pool to the PostgreSQL at url with its config
// changed by change. It connects lazily, so a config that cannot connect
// fails at the first use.
func connectWith(t *testing.T, ctx context.Context, url string, change func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	change(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	closePool(t, pool)
	return pool
}

// worker makes a schema and a role of the test's own, dropped when it ends:
// the role may use the schema but not create in it, and has the privileges
// given on the schema's lily_inbox. It returns a pool whose connections act
// as that role in that schema.
func worker(t *testing.T, ctx context.Context, privileges string) *pgxpool.Pool {
	t.Helper()
	url := services.PostgreSQL(t)
	name := fmt.Sprintf("lily_inbox_worker_%d", time.Now().UnixNano())
	admin := connectAs(t, ctx, url, name, "")
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+name+"; CREATE ROLE "+name+"; GRANT USAGE ON SCHEMA "+name+" TO "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec(context.Background(), "DROP SCHEMA "+name+" CASCADE; DROP ROLE "+name); err != nil {
			t.Error(err)
		}
	})
	if err := pginbox.Migrate(ctx, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "GRANT "+privileges+" ON lily_inbox TO "+name); err != nil {
		t.Fatal(err)
	}
	return connectAs(t, ctx, url, name, name)
}

// connectAs returns a pool on url, closed when the test ends, whose
// connections have schema as their search_path and act as role ("": the
// user's own).
// oneConnectionMigrated is a pool of one connection on schema, with
// lily_inbox migrated there: every statement of the test meets the session
// state the one before left.
func oneConnectionMigrated(t *testing.T, ctx context.Context, url, schema string) *pgxpool.Pool {
	t.Helper()
	pool := connectWith(t, ctx, url, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
		cfg.MaxConns = 1
	})
	if err := pginbox.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	return pool
}

// twoSchemas makes two schemas of the test's own, named after a and b,
// dropped at its end. It returns the database's URL, a pool on public and
// the two schemas' names.
func twoSchemas(t *testing.T, ctx context.Context, a, b string) (url string, admin *pgxpool.Pool, first, second string) {
	t.Helper()
	url = services.PostgreSQL(t)
	unique := time.Now().UnixNano()
	first = fmt.Sprintf("lily_inbox_%s_%d", a, unique)
	second = fmt.Sprintf("lily_inbox_%s_%d", b, unique)
	admin = connectAs(t, ctx, url, "public", "")
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+first+"; CREATE SCHEMA "+second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec(context.Background(), "DROP SCHEMA "+first+" CASCADE; DROP SCHEMA "+second+" CASCADE"); err != nil {
			t.Error(err)
		}
	})
	return url, admin, first, second
}

// tableInTheSecondSchema makes two schemas with twoSchemas, and lily_inbox
// in the second alone: a search_path of both finds
// the table past a first schema without one. It returns what twoSchemas
// does.
func tableInTheSecondSchema(t *testing.T, ctx context.Context) (url string, admin *pgxpool.Pool, first, second string) {
	t.Helper()
	url, admin, first, second = twoSchemas(t, ctx, "first", "second")
	if err := pginbox.Migrate(ctx, connectAs(t, ctx, url, second, "")); err != nil {
		t.Fatal(err)
	}
	return url, admin, first, second
}

func connectAs(t *testing.T, ctx context.Context, url, schema, role string) *pgxpool.Pool {
	t.Helper()
	return connectWith(t, ctx, url, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
		if role != "" {
			cfg.ConnConfig.RuntimeParams["role"] = role
		}
	})
}

// A claim that meets another worker's open claim waits for it and follows
// its outcome: duplicate when it commits, claimed when it rolls back.
func TestWaitingClaimFollowsTheHolder(t *testing.T) {
	for name, holderCommits := range map[string]bool{"holder commits": true, "holder rolls back": false} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			inbox := pginbox.New(e.pool, pginbox.Options{LockTimeout: 10 * time.Second})
			holder := e.claim(inbox, "claimed")
			ctx := holder.Bind(e.ctx)
			if err := e.write(ctx, "k", 0); err != nil {
				t.Fatal(err)
			}
			h, _ := pginbox.Tx(ctx)
			answered := make(chan string, 1)
			go func() {
				tx, err := inbox.Begin(e.ctx, e.prefix, "m1")
				status, _ := answer(tx, err)
				if tx != nil {
					if err := e.write(tx.Bind(e.ctx), "k", 0); err != nil {
						t.Error(err)
					}
					if ev, detail := said(tx.Commit(e.ctx)); ev != "committed" {
						t.Errorf("the waiting claim's Commit = %v (%s)", ev, detail)
					}
				}
				answered <- status
			}()
			e.waitUntil("a claim waiting on the open one",
				"SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid)))",
				h.Conn().PgConn().PID())
			want := "claimed"
			if holderCommits {
				e.commit(holder)
				want = "duplicate"
			} else {
				holder.Rollback(e.ctx)
			}
			if got := <-answered; got != want {
				t.Fatalf("the waiting claim = %v, want %v", got, want)
			}
			e.expect(1)
		})
	}
}

// waitUntil polls the predicate query, a SELECT of one boolean about the
// backend pid, until it is true; what names the awaited state for a failure.
func (e *env) waitUntil(what, query string, pid uint32) {
	e.t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		var ok bool
		if err := e.pool.QueryRow(e.ctx, query, int64(pid)).Scan(&ok); err != nil {
			e.t.Fatal(err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("waited 2m for %s", what)
		}
	}
}

// A worker that sits in its claim longer than IdleTimeout loses it: the
// server ends the session, the commit fails, and another worker claims the
// message at once instead of waiting.
func TestIdleClaimIsReleased(t *testing.T) {
	e := newEnv(t)
	inbox := pginbox.New(e.pool, pginbox.Options{IdleTimeout: 200 * time.Millisecond, LockTimeout: 5 * time.Second})
	stuck := e.claim(inbox, "claimed")
	ctx := stuck.Bind(e.ctx)
	if err := e.write(ctx, "k", 0); err != nil {
		t.Fatal(err)
	}
	h, _ := pginbox.Tx(ctx)
	// The session's own timeout is the inbox's IdleTimeout: the server ends
	// it that long after it went idle.
	var timeout string
	if err := h.QueryRow(ctx, "SELECT current_setting('idle_in_transaction_session_timeout')").Scan(&timeout); err != nil || timeout != "200ms" {
		t.Fatalf("the claim's idle timeout is %q (%v), want 200ms", timeout, err)
	}
	e.waitUntil("the server to end the idle session",
		"SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", h.Conn().PgConn().PID())
	// Its lock went with it: the next claim takes the message (a lock still
	// held would defer it at the lock timeout). Through an inbox of the
	// default idle timeout: the stuck worker's Commit below looks up its
	// transaction's fate (pg_xact_status), which on a loaded machine took
	// longer than 200 ms, and the server ended this claim's session too.
	next := e.claim(pginbox.New(e.pool, pginbox.Options{LockTimeout: 5 * time.Second}), "claimed")
	if ev, detail := said(stuck.Commit(e.ctx)); ev != "failed" {
		t.Fatalf("the stuck worker's Commit = %v (%s), want failed", ev, detail)
	}
	if err := e.write(next.Bind(e.ctx), "k", 0); err != nil {
		t.Fatal(err)
	}
	e.commit(next)
	e.expect(1)
}

// startSlowCommit claims m1, writes a business row whose COMMIT sleeps pause
// seconds, starts Commit under commitCtx and returns once the backend is
// asleep inside COMMIT, with its pid and a channel for Commit's answer.
func (e *env) startSlowCommit(inbox *pginbox.Inbox, commitCtx context.Context, pause float64) (pid uint32, done <-chan [2]string) {
	e.t.Helper()
	tx := e.claim(inbox, "claimed")
	ctx := tx.Bind(e.ctx)
	if err := e.write(ctx, "k", pause); err != nil {
		e.t.Fatal(err)
	}
	h, _ := pginbox.Tx(ctx)
	pid = h.Conn().PgConn().PID()
	answer := make(chan [2]string, 1)
	go func() {
		ev, detail := said(tx.Commit(commitCtx))
		answer <- [2]string{ev, detail}
	}()
	// The backend sleeping in pg_sleep has received COMMIT.
	e.waitUntil("the backend to sleep in COMMIT",
		"SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'PgSleep')", pid)
	return pid, answer
}

// The backend is terminated while COMMIT runs: the server's FATAL says
// nothing definite, pg_xact_status says aborted, and nothing was written.
// The message is not lost: the next claim succeeds and writes once.
func TestBackendKilledDuringCommit(t *testing.T) {
	e := newEnv(t)
	inbox := pginbox.New(e.pool, pginbox.Options{})
	pid, done := e.startSlowCommit(inbox, e.ctx, 30)
	var killed bool
	if err := e.pool.QueryRow(e.ctx, "SELECT pg_terminate_backend($1)", int64(pid)).Scan(&killed); err != nil || !killed {
		t.Fatalf("pg_terminate_backend = %v, %v", killed, err)
	}
	got := <-done
	if got[0] != "failed" || !strings.Contains(got[1], "pg_xact_status says aborted") {
		t.Fatalf("Commit = %s (%s), want failed as pg_xact_status says", got[0], got[1])
	}
	e.expect(0)

	tx := e.claim(inbox, "claimed")
	if err := e.write(tx.Bind(e.ctx), "k", 0); err != nil {
		t.Fatal(err)
	}
	e.commit(tx)
	e.expect(1)
}

// The backend is terminated before Commit, while the session is in a
// transaction: the question Commit asks first, whose transaction it is,
// fails with the connection. That is no proof the claim did not commit: a
// handler that sent COMMIT and then BEGIN through Exec committed it itself.
// The claim's own transaction decides, as pg_xact_status and its row say:
// committed after the handler's COMMIT, aborted (by the termination)
// without it.
func TestBackendKilledBeforeCommit(t *testing.T) {
	for _, c := range []struct {
		end  []string
		want string
	}{
		{[]string{"COMMIT", "BEGIN"}, "committed"},
		{nil, "failed"},
	} {
		t.Run(strings.Join(append([]string{"after"}, c.end...), "-"), func(t *testing.T) {
			e := newEnv(t)
			inbox := pginbox.New(e.pool, pginbox.Options{})
			tx, _, h := e.claimEndedBy(inbox, c.end)
			pid := h.Conn().PgConn().PID()
			var killed bool
			if err := e.pool.QueryRow(e.ctx, "SELECT pg_terminate_backend($1)", int64(pid)).Scan(&killed); err != nil || !killed {
				t.Fatalf("pg_terminate_backend = %v, %v", killed, err)
			}
			e.waitUntil("the backend to end", "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", pid)
			err := tx.Commit(e.ctx)
			claims, cerr := e.countClaims(e.ctx, e.prefix, "m1")
			if cerr != nil {
				t.Fatal(cerr)
			}
			ev, detail := said(err)
			if ev != c.want || claims != map[string]int{"failed": 0, "committed": 1}[c.want] || ev == "failed" && !strings.Contains(detail, "pg_xact_status says aborted") {
				t.Fatalf("Commit said %v (ambiguous=%v); committed claim rows: %d; want %s", err, errors.Is(err, runtime.ErrCommitAmbiguous), claims, c.want)
			}
			if c.want == "committed" {
				e.claim(inbox, "duplicate")
				return
			}
			e.commit(e.claim(inbox, "claimed"))
		})
	}
}

// The client's connection is cut while COMMIT sleeps; the server goes on and
// commits. The adapter sees the transaction in progress, then committed.
func TestConnectionLostDuringCommitResolvesCommitted(t *testing.T) {
	e := newEnv(t)
	proxy := newProxy(t)
	inbox := pginbox.New(proxy.pool(e), pginbox.Options{ResolveEvery: 50 * time.Millisecond})
	_, done := e.startSlowCommit(inbox, e.ctx, 1)
	proxy.cut()
	got := <-done
	// The cut took COMMIT's answer: only pg_xact_status could say committed.
	if got[0] != "committed" {
		t.Fatalf("Commit = %s (%s), want committed as pg_xact_status says", got[0], got[1])
	}
	e.expect(1)
	e.claim(inbox, "duplicate")
}

// As above, but the deadline comes while the server still sleeps in COMMIT:
// the evidence is ambiguous, and rightly so, since the commit lands later.
func TestConnectionLostDuringCommitUnresolvedIsAmbiguous(t *testing.T) {
	e := newEnv(t)
	proxy := newProxy(t)
	inbox := pginbox.New(proxy.pool(e), pginbox.Options{ResolveEvery: 50 * time.Millisecond})
	commitCtx, cancel := context.WithTimeout(e.ctx, 1500*time.Millisecond)
	defer cancel()
	// COMMIT sleeps well past the deadline, which starts before the claim:
	// on a loaded machine the rows are still uncommitted when counted.
	_, done := e.startSlowCommit(inbox, commitCtx, 8)
	proxy.cut()
	got := <-done
	// On a loaded machine the last look-up may itself time out; either way
	// the outcome was still unknown at the deadline.
	if got[0] != "ambiguous" || !strings.Contains(got[1], "unresolved by the deadline") {
		t.Fatalf("Commit = %s (%s), want ambiguous, unresolved by the deadline", got[0], got[1])
	}
	if n, err := e.countRows(e.ctx, "k"); err != nil || n != 0 {
		t.Fatalf("%d business rows (%v) while COMMIT still runs; want 0", n, err)
	}
	// The requeued message meets the open claim and defers, then the duplicate.
	for deadline := time.Now().Add(30 * time.Second); ; {
		status, detail := answer(inbox.Begin(e.ctx, e.prefix, "m1"))
		if status == "duplicate" {
			break
		}
		if status != "deferred" || !strings.Contains(detail, "another worker holds the claim") || time.Now().After(deadline) {
			t.Fatalf("claim while the ambiguous commit finishes = %v (%s); want deferred by the open claim, then duplicate", status, detail)
		}
	}
	e.expect(1)
}

// A COMMIT slower than the whole step (here a deferred trigger sleeping past
// it) is cut short while time is left to ask pg_xact_status: pgx's cancel
// aborts it on the server, so the answer is failed, not ambiguous, and the
// runtime's retry spends an attempt instead of requeueing for ever.
func TestCommitSlowerThanTheStepIsFailed(t *testing.T) {
	e := newEnv(t)
	inbox := pginbox.New(e.pool, pginbox.Options{})
	// 6 s keeps 1.5 s back for pg_xact_status, room enough on a loaded
	// machine.
	commitCtx, cancel := context.WithTimeout(e.ctx, 6*time.Second)
	defer cancel()
	_, done := e.startSlowCommit(inbox, commitCtx, 12)
	got := <-done
	if got[0] != "failed" || !strings.Contains(got[1], "pg_xact_status says aborted") {
		t.Fatalf("Commit = %s (%s), want failed as pg_xact_status says", got[0], got[1])
	}
	if commitCtx.Err() != nil {
		t.Errorf("Commit answered after its deadline: the runtime takes that for ambiguous")
	}
	e.expect(0)
	// The claim's lock went with the abort: the next claim is ours at once.
	e.commit(e.claim(inbox, "claimed"))
}

// A lost COMMIT is looked up by its transaction id, and pg_xact_status
// saying committed is not enough: after a failover to a standby that was
// behind, the id of a transaction lost with the old primary is handed out
// again, and may be another's, committed. Committed is the answer only when
// the claim's row, inserted with that id, is there; otherwise the claim's
// work is not in the database, and the answer is failed, not committed.
func TestResolveWantsTheClaimsRow(t *testing.T) {
	e := newEnv(t)
	inbox := pginbox.New(e.pool, pginbox.Options{ResolveEvery: 50 * time.Millisecond})
	tx := e.claim(inbox, "claimed")
	if err := e.write(tx.Bind(e.ctx), "k", 0); err != nil {
		t.Fatal(err)
	}
	e.commit(tx)
	var claims, other string
	if err := e.pool.QueryRow(e.ctx, "SELECT xact::text FROM lily_inbox WHERE consumer = $1 AND message_id = 'm1'", e.prefix).Scan(&claims); err != nil {
		t.Fatal(err)
	}
	// A transaction of its own, committed, with nothing of the claim's.
	if err := e.pool.QueryRow(e.ctx, "SELECT pg_current_xact_id()::text").Scan(&other); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, id, xid, want string
	}{
		{"the claim's row and id", "m1", claims, "committed"},
		{"another transaction's id, no row of the message", "m2", other, "failed"},
		{"another transaction's id, the message's row by another", "m1", other, "failed"},
	} {
		ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
		got, detail := said(inbox.Resolve(ctx, e.prefix, c.id, c.xid))
		cancel()
		if got != c.want || (c.want == "failed" && !strings.Contains(detail, "lily_inbox has no row of the claim")) {
			t.Errorf("%s: resolve = %s (%s), want %s", c.name, got, detail, c.want)
		}
	}
}

// cancelRequestCode opens a PostgreSQL CancelRequest message.
const cancelRequestCode = 80877102

// proxy forwards TCP to PostgreSQL, drops cancel requests, and can cut every
// connection open now.
type proxy struct {
	t     *testing.T
	url   string // the database's
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newProxy(t *testing.T) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, url: services.PostgreSQL(t), ln: ln}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go p.serve()
	return p
}

func (p *proxy) serve() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		cfg, err := pgxpool.ParseConfig(p.url)
		if err != nil {
			client.Close()
			continue
		}
		server, err := net.Dial("tcp", net.JoinHostPort(cfg.ConnConfig.Host, fmt.Sprint(cfg.ConnConfig.Port)))
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		go func() {
			// pgx sends a CancelRequest on a new connection when it loses
			// one; dropping it plays a network that lost that too.
			first := make([]byte, 8)
			if _, err := io.ReadFull(client, first); err != nil || binary.BigEndian.Uint32(first[4:]) == cancelRequestCode {
				client.Close()
				server.Close()
				return
			}
			if _, err := server.Write(first); err == nil {
				_, _ = io.Copy(server, client)
			}
			server.Close()
		}()
		go func() { _, _ = io.Copy(client, server); client.Close() }()
	}
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// pool connects through the proxy.
func (p *proxy) pool(e *env) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(p.url)
	if err != nil {
		p.t.Fatal(err)
	}
	addr := p.ln.Addr().(*net.TCPAddr)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = addr.IP.String(), uint16(addr.Port)
	// In plain text the proxy can tell a CancelRequest from a startup.
	cfg.ConnConfig.TLSConfig, cfg.ConnConfig.Fallbacks = nil, nil
	pool, err := pgxpool.NewWithConfig(e.ctx, cfg)
	if err != nil {
		p.t.Fatal(err)
	}
	closePool(p.t, pool)
	return pool
}

// Timeouts are rounded up to whole milliseconds, never down: PostgreSQL
// reads 0 as no timeout at all, so truncating a timeout under a millisecond
// would turn its bound off. (A longer one with a fraction shows the rounding
// without a session that times out between the test's statements.)
func TestTimeoutsRoundUpToWholeMilliseconds(t *testing.T) {
	e := newEnv(t)
	inbox := pginbox.New(e.pool, pginbox.Options{IdleTimeout: 1500*time.Millisecond + 500*time.Microsecond, LockTimeout: 5 * time.Second})
	tx := e.claim(inbox, "claimed")
	defer tx.Rollback(e.ctx)
	ctx := tx.Bind(e.ctx)
	h, _ := pginbox.Tx(ctx)
	var timeout string
	if err := h.QueryRow(ctx, "SELECT current_setting('idle_in_transaction_session_timeout')").Scan(&timeout); err != nil || timeout != "1501ms" {
		t.Fatalf("the claim's idle timeout is %q (%v), want 1501ms", timeout, err)
	}
}

// Under synchronous_commit=off COMMIT answers before its WAL is flushed: a
// server crash just after would lose the claim the runtime ACKed. The
// claim's transaction raises off to local; any other value the session has
// (the DBA's, for a standby) it keeps. Only for the claim: the session's own
// is unchanged after it.
func TestClaimCommitIsDurableUnderSynchronousCommitOff(t *testing.T) {
	for _, c := range []struct{ session, claim string }{
		{"off", "local"}, {"local", "local"}, {"on", "on"},
		{"remote_write", "remote_write"}, {"remote_apply", "remote_apply"},
	} {
		t.Run(c.session, func(t *testing.T) {
			e := newEnv(t)
			pool := connectWith(t, e.ctx, e.url, func(cfg *pgxpool.Config) {
				cfg.MaxConns = 1
				cfg.ConnConfig.RuntimeParams["synchronous_commit"] = c.session
			})
			tx, err := pginbox.New(pool, pginbox.Options{}).Begin(e.ctx, e.prefix, "m1")
			if got, detail := answer(tx, err); got != "claimed" {
				t.Fatalf("Begin = %s (%s); want claimed", got, detail)
			}
			ctx := tx.Bind(e.ctx)
			h, _ := pginbox.Tx(ctx)
			var inClaim string
			if err := h.QueryRow(ctx, "SELECT current_setting('synchronous_commit')").Scan(&inClaim); err != nil {
				t.Fatal(err)
			}
			if err := e.write(ctx, "k", 0); err != nil {
				t.Fatal(err)
			}
			e.commit(tx)
			e.expect(1)
			var after string
			if err := pool.QueryRow(e.ctx, "SHOW synchronous_commit").Scan(&after); err != nil {
				t.Fatal(err)
			}
			if inClaim != c.claim || after != c.session {
				t.Errorf("synchronous_commit in the claim %q, after it %q; want %q, then the session's %q", inClaim, after, c.claim, c.session)
			}
		})
	}
}

// A handler that sends a session-level SET search_path through the claim's
// transaction leaves it on the pooled connection after COMMIT (pgxpool keeps
// session state). The claims and the look-up of a lost COMMIT that later run
// on that connection still use the inbox's own lily_inbox, never the one the
// handler's path points at: a redelivery of the committed message is a
// duplicate, and a schema without a lily_inbox does not make the next claim
// misconfigured.
func TestHandlersSearchPathDoesNotMoveTheClaims(t *testing.T) {
	for name, tenantHasInbox := range map[string]bool{"tenant schema with its own lily_inbox": true, "tenant schema without one": false} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			url, admin, home, tenant := twoSchemas(t, ctx, "home", "tenant")
			if _, err := admin.Exec(ctx, "CREATE TABLE "+home+".biz (key text NOT NULL)"); err != nil {
				t.Fatal(err)
			}
			if tenantHasInbox {
				if err := pginbox.Migrate(ctx, connectAs(t, ctx, url, tenant, "")); err != nil {
					t.Fatal(err)
				}
			}
			// One connection, so that every claim meets the handler's path.
			pool := oneConnectionMigrated(t, ctx, url, home)
			inbox := pginbox.New(pool, pginbox.Options{LockTimeout: 300 * time.Millisecond})
			setPath := "SET search_path TO " + tenant + ", public"
			if !tenantHasInbox {
				setPath = "SET search_path TO " + tenant // public may hold one
			}
			deliver := func(id string) (string, string) {
				tx, err := inbox.Begin(ctx, "orders", id)
				if got, detail := answer(tx, err); got != "claimed" {
					return got, detail
				}
				hctx := tx.Bind(ctx)
				h, _ := pginbox.Tx(hctx)
				for _, sql := range []string{"INSERT INTO " + home + ".biz VALUES ('" + id + "')", setPath} {
					if _, err := h.Exec(hctx, sql); err != nil {
						tx.Rollback(ctx)
						t.Fatal(err)
					}
				}
				return said(tx.Commit(ctx))
			}
			if got, detail := deliver("m1"); got != "committed" {
				t.Fatalf("first delivery of m1: %s (%s); want committed", got, detail)
			}
			var path string
			if err := pool.QueryRow(ctx, "SHOW search_path").Scan(&path); err != nil || !strings.HasPrefix(path, tenant) {
				t.Fatalf("the pooled connection's search_path = %q (%v); the test wants the handler's left on it", path, err)
			}
			if got, detail := deliver("m1"); got != "duplicate" {
				t.Errorf("redelivery of the committed m1: %s (%s); want duplicate", got, detail)
			}
			if got, detail := deliver("m2"); got != "committed" {
				t.Errorf("first delivery of m2 on the same connection: %s (%s); want committed", got, detail)
			}
			// The look-up of a lost COMMIT finds the claim's row where the
			// claim put it.
			var xid string
			if err := admin.QueryRow(ctx, "SELECT xact::text FROM "+home+".lily_inbox WHERE consumer = 'orders' AND message_id = 'm1'").Scan(&xid); err != nil {
				t.Fatal(err)
			}
			rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
			got, detail := said(inbox.Resolve(rctx, "orders", "m1", xid))
			rcancel()
			if got != "committed" {
				t.Errorf("resolve of m1's claim: %s (%s); want committed", got, detail)
			}
			var rows, homeClaims int
			if err := admin.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+home+".biz), (SELECT count(*) FROM "+home+".lily_inbox)").Scan(&rows, &homeClaims); err != nil {
				t.Fatal(err)
			}
			if rows != 2 || homeClaims != 2 {
				t.Errorf("%d business rows, %d claims in the inbox's schema; want 2 of each (m1 and m2 once)", rows, homeClaims)
			}
			if tenantHasInbox {
				var n int
				if err := admin.QueryRow(ctx, "SELECT count(*) FROM "+tenant+".lily_inbox").Scan(&n); err != nil || n != 0 {
					t.Errorf("%d claims in the tenant's lily_inbox (%v); want 0", n, err)
				}
			}
		})
	}
}

// A first claim that finds no usable lily_inbox where its session looks
// (another user of the pool changed the connection's search_path) leaves no
// table pinned: once the connection looks where the inbox is, a claim pins
// that one. With no lily_inbox there it pins none; with one that takes no
// claim (another shape, another service's perhaps) its pin is dropped.
func TestMisconfiguredFirstClaimPinsNoTable(t *testing.T) {
	for name, elsewhere := range map[string]string{
		"no lily_inbox":                 "",
		"a lily_inbox of another shape": "CREATE TABLE %s.lily_inbox (id int)",
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			url, admin, home, other := twoSchemas(t, ctx, "home", "other")
			if elsewhere != "" {
				if _, err := admin.Exec(ctx, fmt.Sprintf(elsewhere, other)); err != nil {
					t.Fatal(err)
				}
			}
			pool := oneConnectionMigrated(t, ctx, url, home)
			if _, err := pool.Exec(ctx, "SET search_path TO "+other); err != nil {
				t.Fatal(err)
			}
			inbox := pginbox.New(pool, pginbox.Options{})
			tx, err := inbox.Begin(ctx, "c", "m1")
			if got, detail := answer(tx, err); got != "deferred" || !strings.Contains(detail, "the inbox is misconfigured") {
				t.Fatalf("Begin where the session finds no usable lily_inbox = %s (%s); want deferred, misconfigured", got, detail)
			}
			if _, err := pool.Exec(ctx, "RESET search_path"); err != nil {
				t.Fatal(err)
			}
			tx, err = inbox.Begin(ctx, "c", "m1")
			if got, detail := answer(tx, err); got != "claimed" {
				t.Fatalf("Begin once the session finds the inbox's lily_inbox = %s (%s); want claimed", got, detail)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			var n int
			if err := admin.QueryRow(ctx, "SELECT count(*) FROM "+home+".lily_inbox").Scan(&n); err != nil || n != 1 {
				t.Fatalf("%d claims in %s.lily_inbox (%v); want 1", n, home, err)
			}
		})
	}
}

// A claim uses the lily_inbox its session's search_path finds, as an
// unqualified name would, though an earlier schema of the path exists and
// holds none (under the default "$user", public: a schema named after the
// role, the table applied into public). The first claim pins that table.
func TestClaimsUseTheTableThePathFinds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url, admin, first, second := tableInTheSecondSchema(t, ctx)
	pool := connectAs(t, ctx, url, first+", "+second, "")
	inbox := pginbox.New(pool, pginbox.Options{LockTimeout: 300 * time.Millisecond})
	tx, err := inbox.Begin(ctx, "orders", "m1")
	if got, detail := answer(tx, err); got != "claimed" {
		t.Fatalf("Begin with lily_inbox in the path's second schema = %s (%s); want claimed", got, detail)
	}
	if got, detail := said(tx.Commit(ctx)); got != "committed" {
		t.Fatalf("Commit = %s (%s); want committed", got, detail)
	}
	tx, err = inbox.Begin(ctx, "orders", "m1")
	if got, detail := answer(tx, err); got != "duplicate" {
		t.Fatalf("redelivery of the committed m1 = %s (%s); want duplicate", got, detail)
	}
	var xid string
	if err := admin.QueryRow(ctx, "SELECT xact::text FROM "+second+".lily_inbox WHERE consumer = 'orders' AND message_id = 'm1'").Scan(&xid); err != nil {
		t.Fatalf("m1's claim in %s.lily_inbox: %v", second, err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	got, detail := said(inbox.Resolve(rctx, "orders", "m1", xid))
	rcancel()
	if got != "committed" {
		t.Errorf("resolve of m1's claim: %s (%s); want committed", got, detail)
	}
	var where string
	if err := admin.QueryRow(ctx, "SELECT coalesce(to_regclass($1)::text, 'nowhere')", first+".lily_inbox").Scan(&where); err != nil || where != "nowhere" {
		t.Errorf("a lily_inbox in the path's first schema: %s (%v); want none made", where, err)
	}
}

// closePool closes pool when t ends. pool.Close waits for every connection
// to come back: a claim a failed test left open would hold it until go
// test's timeout, minutes on, the failure buried under a goroutine dump.
// It waits a minute at most, and says so.
func closePool(t *testing.T, pool *pgxpool.Pool) {
	t.Cleanup(func() {
		closed := make(chan struct{})
		go func() {
			pool.Close()
			close(closed)
		}()
		select {
		case <-closed:
		case <-time.After(time.Minute):
			t.Errorf("a minute after the test ended, the pool still lends out connections (%d): a claim left open", pool.Stat().AcquiredConns())
		}
	})
}
