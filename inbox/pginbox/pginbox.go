// Package pginbox is Lily's transactional inbox on PostgreSQL (pgx v5).
//
// A claim is a row of lily_inbox inserted in the transaction that also
// carries the handler's business writes: it commits exactly when they do.
// While that transaction is open, the uncommitted row's unique key holds off
// any other worker claiming the same (consumer, message id); that worker waits
// up to Options.LockTimeout and then defers. Apply the schema with Migrate or
// migrations/001_lily_inbox.sql; an Inbox's first claim pins the lily_inbox
// its session's search_path finds, and a handler's SET search_path does not
// move it (handlers should use SET LOCAL all the same: the pool keeps session
// state). docs/inbox.md tells the whole contract.
package pginbox

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lily-mq/lily/internal/reserve"
	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime"
)

//go:embed migrations/001_lily_inbox.sql
var schemaSQL string

// Migrate creates lily_inbox in the first schema of the pool's search_path
// (current_schema()) if it is missing there, as the SQL file would. It is
// safe to call from every worker at start-up: an advisory lock lets one of
// them create the table while the others wait, and once it exists Migrate
// needs no privilege to create anything, so workers may run as a role that
// has none. An Inbox's claims use the lily_inbox the search_path finds
// first: after Migrate, the one in the first schema.
//
// Migrate refuses, creating nothing, when the first schema has no
// lily_inbox and a later schema of the path has one (under the default
// "$user", public: a schema named after the role, and the table applied into
// public): the table it would create would come first in the path, and the
// claims would use it, empty, and run again every message already claimed
// in the other. Set the search_path to start where the table is, or move the
// table into the first schema.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pginbox: migrate: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// Concurrent CREATE TABLE IF NOT EXISTS can still fail on the catalog's
	// unique index; the lock serialises them.
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('lily_inbox migrate'))"); err != nil {
		return fmt.Errorf("pginbox: migrate: %w", err)
	}
	// CREATE TABLE IF NOT EXISTS checks the CREATE privilege on the schema
	// before it looks for the table: a schema already applied is not sent.
	// The table's presence says it is applied while 001 is the only
	// migration; a second one needs its own test of what it changed.
	// It is looked for where the file creates it, in current_schema() (the
	// first schema of the search_path that exists).
	// current_schema() is NULL when no schema of the path exists.
	// elsewhere is the schema of the lily_inbox the path finds first (what
	// an unqualified name, and an Inbox's first claim, would use) when that
	// is not current_schema(): creating one there would put it in front. A
	// temporary table is left out: the claims refuse it anyway.
	var schema, elsewhere *string
	var path string
	var applied bool
	if err := tx.QueryRow(ctx, `SELECT current_schema(), current_setting('search_path'),
		CASE WHEN current_schema() IS NOT NULL
			THEN to_regclass(format('%I.lily_inbox', current_schema())) IS NOT NULL
			ELSE false END,
		(SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE c.oid = to_regclass('lily_inbox') AND c.relpersistence <> 't')`).Scan(&schema, &path, &applied, &elsewhere); err != nil {
		return fmt.Errorf("pginbox: migrate: %w", err)
	}
	if schema == nil {
		return fmt.Errorf("pginbox: migrate: no schema of the search_path exists to create lily_inbox in (search_path %q)", path)
	}
	if applied {
		return nil
	}
	if elsewhere != nil {
		return fmt.Errorf("pginbox: migrate: lily_inbox is in schema %q, later in the search_path (%q) than its first schema %q, which has none: "+
			"creating one in %q would make the claims use that empty table and run again every message already claimed in %q. "+
			"Set the search_path to start at %q, or move the table into %q (ALTER TABLE %s SET SCHEMA %s); "+
			"if %q's table is another service's, create this one's in %q with migrations/001_lily_inbox.sql",
			*elsewhere, path, *schema, *schema, *elsewhere, *elsewhere, *schema,
			quoted(*elsewhere, "lily_inbox"), quoted(*schema),
			*elsewhere, *schema)
	}
	if _, err := tx.Exec(ctx, schemaSQL); err != nil {
		return fmt.Errorf("pginbox: migrate: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pginbox: migrate: %w", err)
	}
	return nil
}

// quoted is names as SQL quotes them, sanitized as a destination's names
// are, for an error that suggests a statement: a schema may be named with
// any UTF-8 but NUL. Each name takes 63 bytes at most (PostgreSQL's limit),
// each byte escaped in four, in quotes, with a dot.
func quoted(names ...string) string {
	return sanitize.Name(pgx.Identifier(names).Sanitize(), len(names)*(4*63+3))
}

// Options tune an Inbox. The zero value takes the defaults.
type Options struct {
	// LockTimeout is how long a claim waits on another worker's open claim of
	// the same message id before it defers. Default 2s. The wait ends
	// earlier when Begin's context leaves less, with time kept back for the
	// server's answer: keep LockTimeout well under the runtime's StepTimeout.
	// PostgreSQL takes at most 2147483647ms (about 24.8 days): an inbox
	// with a longer LockTimeout or IdleTimeout defers every claim as
	// misconfigured.
	LockTimeout time.Duration
	// IdleTimeout, when set, ends a claim whose transaction sits idle (no
	// statement running) that long: the server closes the session, the claim
	// rolls back and other workers may claim the message. It bounds how long
	// a stuck worker holds a message, at the price of failing handlers that
	// spend longer than this between statements. Default 0: the server's
	// idle_in_transaction_session_timeout.
	IdleTimeout time.Duration
	// ResolveEvery is the pause between pg_xact_status look-ups while a
	// COMMIT whose answer was lost is still in progress. Default 100ms.
	ResolveEvery time.Duration
}

// The defaults of Options.
const (
	DefaultLockTimeout  = 2 * time.Second
	DefaultResolveEvery = 100 * time.Millisecond
)

// maxTimeout is the longest lock_timeout or
// idle_in_transaction_session_timeout PostgreSQL takes.
const maxTimeout = math.MaxInt32 * time.Millisecond

// Inbox implements runtime.Inbox on a pgx pool.
type Inbox struct {
	pool *pgxpool.Pool
	opts Options
	// bad says which option PostgreSQL would refuse, failing every claim:
	// New returns no error, so each claim reports it.
	bad error
	// table is the lily_inbox the claims use, pinned by the first claim:
	// nil until then, or again after a claim found the pinned one
	// misconfigured before any claim had found it.
	table atomic.Pointer[table]
}

// table is a lily_inbox named with its schema, and the statements that use
// it. Unqualified, the name would follow each session's search_path, which a
// handler's SET (not SET LOCAL) leaves on its pooled connection: a later
// claim there would look for the message in another schema's table, and run
// a committed message again.
type table struct {
	schema string
	// claim inserts the claim's row: $1 consumer, $2 message id, $3 the
	// lock_timeout to restore. It returns the transaction id, or no row
	// when the key was committed.
	claim string
	// row says whether the claim's row is there: $1 consumer, $2 message
	// id, $3 transaction id.
	row string
	// found: a claim's statement has run on this table (a claim, a
	// duplicate or a lock timeout), so it is there.
	found atomic.Bool
}

func newTable(schema string) *table {
	name := pgx.Identifier{schema, "lily_inbox"}.Sanitize()
	// An uncommitted row with the same key makes this insert wait for its
	// transaction: committed → conflict, nothing returned; aborted → ours.
	// Once the row is in, the claim's lock_timeout gives way to the earlier
	// one: it must not bound the handler's own writes.
	return &table{
		schema: schema,
		claim: `WITH claimed AS (
			INSERT INTO ` + name + ` (consumer, message_id, xact)
			VALUES ($1, $2, pg_current_xact_id())
			ON CONFLICT (consumer, message_id) DO NOTHING
			RETURNING xact::text)
		SELECT xact, set_config('lock_timeout', $3, true) FROM claimed`,
		row: `SELECT EXISTS (SELECT 1 FROM ` + name + `
			WHERE consumer = $1 AND message_id = $2 AND xact = $3::text::xid8)`,
	}
}

var _ runtime.Inbox = (*Inbox)(nil)

// New returns an inbox on pool; lily_inbox must exist (see Migrate).
func New(pool *pgxpool.Pool, opts Options) *Inbox {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	if opts.ResolveEvery <= 0 {
		opts.ResolveEvery = DefaultResolveEvery
	}
	in := &Inbox{pool: pool, opts: opts}
	for _, o := range []struct {
		name string
		d    time.Duration
	}{{"LockTimeout", opts.LockTimeout}, {"IdleTimeout", opts.IdleTimeout}} {
		if o.d > maxTimeout {
			in.bad = fmt.Errorf("the Options' %s, %s, is longer than PostgreSQL takes (%dms, %s)", o.name, o.d, maxTimeout/time.Millisecond, maxTimeout)
		}
	}
	return in
}

// SQLSTATE lock_not_available: lock_timeout expired.
const lockNotAvailable = "55P03"

// misconfigured tells a failure that no redelivery mends, by its SQLSTATE
// class: 42, syntax error or access rule violation (for the claim, lily_inbox
// missing from the search_path, 42P01, a privilege on it missing, 42501, or a
// table of another shape); 28, the role may not connect; 3D and 3F, no such
// database or schema; or by its code: 25006, read_only_sql_transaction, the
// session may not write (default_transaction_read_only, or a hot standby).
func misconfigured(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) < 2 {
		return false
	}
	if pgErr.Code == "25006" {
		return true
	}
	switch pgErr.Code[:2] {
	case "42", "28", "3D", "3F":
		return true
	}
	return false
}

// errMisconfigured is Begin's error for a misconfigured inbox. The runtime
// defers the claim as it defers any other, and will defer the next: the
// error says that only mending the database ends it, for the deferral's
// record and log line to show.
func errMisconfigured(err error) error {
	return fmt.Errorf("pginbox: the inbox is misconfigured, every claim defers until it is mended: %w", err)
}

// Begin opens a transaction and inserts the claim row in it. Its error says
// when the inbox is misconfigured (no lily_inbox in the search_path, a
// privilege on it missing, a role that may not connect, a read-only
// session, an option's timeout longer than PostgreSQL takes).
//
// The first claim pins the table: the lily_inbox its session's search_path
// finds first, the one the unqualified name would be (Migrate creates it in
// the path's first schema, so after Migrate that is the one). Every later
// claim, and every look-up of a lost COMMIT, names that schema's table
// whatever the search_path of its connection then is.
func (in *Inbox) Begin(ctx context.Context, consumer, messageID string) (runtime.InboxTx, error) {
	if in.bad != nil {
		return nil, errMisconfigured(in.bad)
	}
	tx, err := in.pool.Begin(ctx)
	if misconfigured(err) {
		return nil, errMisconfigured(err)
	}
	if err != nil {
		return nil, fmt.Errorf("pginbox: begin: %w", err)
	}
	// set_config(..., true) is SET LOCAL with a bind parameter. The
	// materialized CTE reads the lock_timeout in force before it is replaced.
	// Under synchronous_commit=off (a DBA's throughput setting) COMMIT
	// answers before its WAL is flushed, and the runtime would ACK a claim a
	// server crash can still lose: the claim raises off to local, and keeps
	// any other value, which only asks more (of a standby too).
	set := `WITH prior AS MATERIALIZED (SELECT current_setting('lock_timeout') AS v)
		SELECT v, set_config('lock_timeout', $1, true),
			CASE current_setting('synchronous_commit')
				WHEN 'off' THEN set_config('synchronous_commit', 'local', true) END`
	// The claim waits on another's no longer than ctx leaves before its
	// reserve, so that PostgreSQL answers 55P03 and the rollback still has
	// time: at ctx's end pgx would close the connection to cancel the wait,
	// and the pool lose it.
	wait, cut := in.opts.LockTimeout, ""
	if left, ok := reserve.Left(ctx); ok && left < wait {
		wait, cut = max(left, time.Millisecond), ", cut to end before the claim's context"
	}
	args := []any{millis(wait)}
	var prior string
	into := []any{&prior, nil, nil}
	if in.opts.IdleTimeout > 0 {
		set += ", set_config('idle_in_transaction_session_timeout', $2, true)"
		args = append(args, millis(in.opts.IdleTimeout))
		into = append(into, nil)
	}
	// Until a claim has pinned the table, the same round trip asks which
	// lily_inbox this session's search_path finds, the one an unqualified
	// name would use: the first schema of the path that holds one, not
	// current_schema(), which may exist and hold none (the default
	// "$user", public with the table in public). to_regclass looks only in
	// the schemas the role may use, as the INSERT would.
	t := in.table.Load()
	var schema *string // NULL: no lily_inbox in the search_path
	var path string
	if t == nil {
		set += `, (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE c.oid = to_regclass('lily_inbox')), current_setting('search_path')`
		into = append(into, &schema, &path)
	}
	if err := tx.QueryRow(ctx, set+" FROM prior", args...).Scan(into...); err != nil {
		_ = tx.Rollback(ctx)
		return nil, fmt.Errorf("pginbox: set timeouts: %w", err)
	}
	if t == nil {
		switch {
		case schema == nil:
			_ = tx.Rollback(ctx)
			return nil, errMisconfigured(fmt.Errorf("no lily_inbox in the connection's search_path (%q): apply migrations/001_lily_inbox.sql or call Migrate", path))
		case strings.HasPrefix(*schema, "pg_temp_"):
			// The session's own temporary table (searched before the
			// path): pinned, it would name another session's on every
			// other connection. No user schema's name starts with pg_.
			_ = tx.Rollback(ctx)
			return nil, errMisconfigured(fmt.Errorf("the lily_inbox the connection's search_path (%q) finds is a temporary table, in %s", path, *schema))
		}
		// The first pin wins, and every claim uses it.
		t = newTable(*schema)
		if !in.table.CompareAndSwap(nil, t) {
			t = in.table.Load()
		}
	}
	var xid string
	err = tx.QueryRow(ctx, t.claim, consumer, messageID, prior).Scan(&xid, nil)
	var pgErr *pgconn.PgError
	if err == nil || errors.Is(err, pgx.ErrNoRows) || errors.As(err, &pgErr) && pgErr.Code == lockNotAvailable {
		t.found.Store(true)
	}
	switch {
	case err == nil:
		return &claimTx{in: in, tx: tx, claimRow: claimRow{table: t, consumer: consumer, messageID: messageID, xid: xid}}, nil
	case errors.Is(err, pgx.ErrNoRows):
		_ = tx.Rollback(ctx)
		return nil, fmt.Errorf("pginbox: already committed for this consumer: %w", runtime.ErrDuplicate)
	case errors.As(err, &pgErr) && pgErr.Code == lockNotAvailable:
		_ = tx.Rollback(ctx)
		return nil, fmt.Errorf("pginbox: another worker holds the claim (waited lock_timeout %s%s)", wait.Round(time.Millisecond), cut)
	case misconfigured(err):
		_ = tx.Rollback(ctx)
		if !t.found.Load() {
			// The pinned table took no claim yet (a privilege on it
			// missing, a table of another shape, one another user of the
			// pool pointed the first claim's session at): the next claim
			// asks its session's search_path afresh, so that mending the
			// database or the path needs no new Inbox. A table once found
			// stays pinned, whatever a session says later.
			in.table.CompareAndSwap(t, nil)
		}
		return nil, errMisconfigured(err)
	default:
		_ = tx.Rollback(ctx)
		return nil, fmt.Errorf("pginbox: claim: %w", err)
	}
}

// millis is d in whole milliseconds, rounded up: PostgreSQL reads 0 as no
// timeout at all.
func millis(d time.Duration) string {
	return fmt.Sprintf("%dms", (d+time.Millisecond-1)/time.Millisecond)
}

type txKey struct{}

// Tx returns the claim's transaction that InboxTx.Bind put in ctx: the
// handler's business writes go through it. Its Commit and Rollback return an
// error, because the runtime settles the claim.
func Tx(ctx context.Context) (pgx.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(pgx.Tx)
	return tx, ok
}

// ErrInboxOwnsTx is what the handler's Commit and Rollback return.
var ErrInboxOwnsTx = errors.New("pginbox: the inbox commits or rolls back this transaction, not the handler")

// handlerTx is the transaction as the handler sees it: a handler that
// committed early would commit the claim before the runtime's decision.
type handlerTx struct{ pgx.Tx }

func (handlerTx) Commit(context.Context) error   { return ErrInboxOwnsTx }
func (handlerTx) Rollback(context.Context) error { return ErrInboxOwnsTx }

type claimTx struct {
	in *Inbox
	tx pgx.Tx
	claimRow
}

func (c *claimTx) Bind(ctx context.Context) context.Context {
	return context.WithValue(ctx, txKey{}, pgx.Tx(handlerTx{c.tx}))
}

func (c *claimTx) Rollback(ctx context.Context) {
	// A failed rollback closes the connection, and the server aborts the
	// transaction when it notices: nothing is left to do about the error.
	_ = c.tx.Rollback(ctx)
}

// Commit commits, once it has checked that the session's transaction is
// still the claim's, and, when the server's answer to COMMIT was lost, asks
// pg_xact_status on another connection until the answer is known or ctx ends
// (committed only with the claim's row in lily_inbox).
// COMMIT gets only part of ctx's time (package reserve), so that one cut at
// its own deadline can still be looked up: pgx gives up on a COMMIT at its
// context's deadline, closing the connection with a cancel request that most
// often aborts it on the server.
func (c *claimTx) Commit(ctx context.Context) error {
	if c.tx.Conn().PgConn().TxStatus() == 'I' {
		// The handler ended the claim's transaction itself, with a COMMIT or
		// ROLLBACK sent through Exec (Tx's Commit and Rollback refuse).
		// COMMIT now would be answered with a warning and taken for the
		// claim's; the transaction's own fate decides. The rollback only
		// gives the connection back to the pool.
		_ = c.tx.Rollback(ctx)
		return c.in.resolve(ctx, c.claimRow, "the handler ended the claim's transaction itself (a COMMIT or ROLLBACK sent through Exec)")
	}
	if c.tx.Conn().PgConn().TxStatus() == 'E' {
		// A statement failed in the session's transaction, which now
		// answers no query, not even one asking whose it is. Mostly it is
		// the claim's; but after a handler's COMMIT and BEGIN sent through
		// Exec it is a later one, and the claim committed with that COMMIT.
		// COMMIT would be answered ROLLBACK either way. So it is rolled
		// back, and the claim's transaction's fate asked on the pool:
		// aborted (by this rollback, when it was the claim's) or committed
		// (by the handler). One round trip more, on a path that failed.
		_ = c.tx.Rollback(ctx)
		return c.in.resolve(ctx, c.claimRow, "a statement in the transaction failed, and it was rolled back")
	}
	commitCtx, cancel := reserve.Before(ctx)
	defer cancel()
	if c.tx.Conn().PgConn().TxStatus() == 'T' {
		// A handler that sent ROLLBACK or COMMIT and then BEGIN through
		// Exec left the session in a transaction that is not the claim's.
		// After a ROLLBACK, COMMIT would commit its writes without the
		// claim: it is rolled back, and the claim's fate reported. After a
		// COMMIT, the claim is done and COMMIT commits the later writes,
		// as it does writes sent after a COMMIT alone. Asking costs a round
		// trip; sent with COMMIT in one query string, the check would still
		// leave pgx's Tx open, and its release costs one too. (An aborted
		// transaction, 'E', answers no query: see above.)
		var xid, claim *string // xid NULL: no transaction id assigned, so not the claim's
		if err := c.tx.QueryRow(commitCtx, "SELECT pg_current_xact_id_if_assigned()::text, pg_xact_status($1::text::xid8)", c.xid).Scan(&xid, &claim); err != nil {
			// COMMIT was not sent, yet the claim may have committed: by
			// the handler's own COMMIT, before its BEGIN. Its transaction's
			// fate decides, as on the paths above: aborted when it was the
			// session's (rolled back here, or ended with the connection).
			_ = c.tx.Rollback(ctx)
			return c.in.resolve(ctx, c.claimRow, fmt.Sprintf("the look before COMMIT at the session's transaction failed (%v)", err))
		}
		if (xid == nil || *xid != c.xid) && (claim == nil || *claim != "committed") {
			_ = c.tx.Rollback(ctx)
			return c.in.resolve(ctx, c.claimRow, "the handler ended the claim's transaction itself and began another (a ROLLBACK, then BEGIN, sent through Exec), which was rolled back")
		}
	}
	err := c.tx.Commit(commitCtx)
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrTxCommitRollback) {
		// The session's transaction aborted though its status said not
		// ('E' is asked above): the claim's, since COMMIT was sent.
		return errors.New("pginbox: a statement in the transaction failed; COMMIT rolled it back")
	}
	// An ERROR is the server's definite answer: the transaction aborted. A
	// FATAL (the backend terminated) or a broken connection says nothing
	// about whether the commit record was written.
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.SeverityUnlocalized == "ERROR" {
		return fmt.Errorf("pginbox: commit: %w", err)
	}
	lost := fmt.Sprintf("COMMIT's answer lost (%v)", err)
	if commitCtx.Err() != nil && ctx.Err() == nil {
		lost = fmt.Sprintf("COMMIT did not answer within its share of the step (%v)", err)
	}
	return c.in.resolve(ctx, c.claimRow, lost)
}

// claimRow is a claim's row of lily_inbox as its transaction inserted it.
type claimRow struct {
	table               *table // where
	consumer, messageID string
	xid                 string // pg_current_xact_id() of the claim's transaction, as text
}

// resolve polls pg_xact_status of the claim's transaction until it says
// committed (nil, once the claim's row is found) or aborted, or ctx ends:
// then the outcome stays ambiguous (runtime.ErrCommitAmbiguous). lost says
// why the commit's outcome is to be asked.
func (in *Inbox) resolve(ctx context.Context, claim claimRow, lost string) error {
	last := "not asked"
	for {
		var status *string // NULL: the id is too old to know
		err := in.pool.QueryRow(ctx, "SELECT pg_xact_status($1::text::xid8)", claim.xid).Scan(&status)
		switch {
		case err != nil:
			last = "pg_xact_status: " + err.Error()
		case status == nil:
			last = "pg_xact_status: unknown"
		case *status == "committed":
			// The id alone is not proof: a failover to a standby that was
			// behind hands out the lost transactions' ids again. The row
			// the claim inserted, with its id, is. Current PostgreSQL
			// says committed only once the transaction has left the
			// running ones, so this later statement's snapshot sees its
			// row; older releases read the commit log alone, and a
			// COMMIT still waiting (for a synchronous standby) reads
			// committed with its row unseen: failed below, a wasted
			// attempt (docs/inbox.md).
			var found bool
			err := in.pool.QueryRow(ctx, claim.table.row, claim.consumer, claim.messageID, claim.xid).Scan(&found)
			switch {
			case err != nil:
				last = "pg_xact_status: committed; the claim's row: " + err.Error()
			case found:
				return nil
			default:
				// Not the claim's transaction, so not committed here: a
				// failure, which the runtime retries. Were the claim
				// committed all the same, the retry would meet it as a
				// duplicate.
				return fmt.Errorf("pginbox: %s; pg_xact_status says transaction %s committed, but lily_inbox has no row of the claim by it: the id is another transaction's (after a failover to a standby that was behind), the claim's was lost", lost, claim.xid)
			}
		case *status == "aborted":
			return fmt.Errorf("pginbox: %s; pg_xact_status says aborted", lost)
		default:
			last = "pg_xact_status: " + *status
		}
		t := time.NewTimer(in.opts.ResolveEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("pginbox: %s; unresolved by the deadline, last %s: %w", lost, last, runtime.ErrCommitAmbiguous)
		case <-t.C:
		}
	}
}
