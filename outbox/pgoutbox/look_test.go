package pgoutbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lily-mq/lily/outbox/pgoutbox"
	"github.com/lily-mq/lily/runtime"
)

// The relay's look on a table whose oldest rows keep failing: it reads
// neither them nor a lease column's index, and rows an earlier version of
// the schema or of the relay failed are still retried.

// fail marks the rows whose message ids are in ids as a relay records a
// failure, retried after wait.
func (e *env) fail(wait time.Duration, ids ...string) {
	e.t.Helper()
	if _, err := e.pool.Exec(e.ctx, `UPDATE lily_outbox SET attempts = attempts + 1, last_error = 'returned',
			lease_owner = NULL, retry_at = now() + $2 * interval '1 millisecond', lease_until = now() + $2 * interval '1 millisecond'
		WHERE properties->>'message_id' = ANY($1)`, ids, wait.Milliseconds()); err != nil {
		e.t.Fatal(err)
	}
}

// messages is n messages to queue, with ids prefix0 to prefix<n-1>.
func messages(queue, prefix string, n int) ([]runtime.Message, []string) {
	var msgs []runtime.Message
	var ids []string
	for i := range n {
		id := prefix + strconv.Itoa(i)
		msgs = append(msgs, message(queue, id))
		ids = append(ids, id)
	}
	return msgs, ids
}

// A backlog of 20,000 failed rows waiting for their retry, the oldest in
// the table: the look leases the ten rows never tried and the five whose
// retry has come, and skips none of the waiting ones on the way (the look
// before the retry index walked all 20,000 at each look).
func TestLookSkipsNoRowsWaitingForTheirRetry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	waiting, waitingIDs := messages("q", "waiting-", 20000)
	e.write(waiting...)
	e.fail(time.Hour, waitingIDs...)
	due, dueIDs := messages("q", "due-", 5)
	e.write(due...)
	e.fail(-time.Second, dueIDs...)
	untried, _ := messages("q", "untried-", 10)
	e.write(untried...)
	if _, err := e.pool.Exec(e.ctx, "ANALYZE lily_outbox"); err != nil {
		t.Fatal(err)
	}

	top, plan := explainLook(t, e)
	// The leased rows and the look's tally.
	if top.Rows != 16 {
		t.Errorf("the look returned %v rows, want 15 leased (5 due for their retry, 10 never tried) and its tally", top.Rows)
	}
	if skipped := top.skipped(); skipped > 10 {
		t.Errorf("the look read and skipped %v rows, want none of the 20,000 waiting ones; plan:\n%s", skipped, plan)
	}
}

// planNode is what a test reads of a node of EXPLAIN's JSON.
type planNode struct {
	NodeType string     `json:"Node Type"`
	Rows     float64    `json:"Actual Rows"`
	Removed  float64    `json:"Rows Removed by Filter"`
	Loops    float64    `json:"Actual Loops"`
	Plans    []planNode `json:"Plans"`
}

// skipped is how many rows n and the nodes under it read and dropped.
func (n planNode) skipped() float64 {
	return n.sum(func(p planNode) float64 { return p.Removed })
}

// sum is own's count of n and of each node under it, added up.
func (n planNode) sum(own func(planNode) float64) float64 {
	s := own(n)
	for _, c := range n.Plans {
		s += c.sum(own)
	}
	return s
}

// Leasing a row, never tried or failed, writes no index: a HOT update. Only
// recording a failure, which changes attempts, writes the indexes.
func TestLeasingIsAHOTUpdate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	msgs, ids := messages("q", "m", 10)
	e.write(msgs...)
	e.fail(-time.Second, ids[:4]...)

	tx, err := e.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(e.ctx) }()
	// The counts hold what this connection has not yet flushed to the
	// statistics, earlier transactions' too: the lease's are the difference.
	updates := func() (n, hot int) {
		t.Helper()
		if err := tx.QueryRow(e.ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables
			WHERE relid = 'lily_outbox'::regclass`).Scan(&n, &hot); err != nil {
			t.Fatal(err)
		}
		return n, hot
	}
	n0, hot0 := updates()
	rows, err := tx.Query(e.ctx, pgoutbox.LeaseSQL, 100, "test", 30, 64<<20, pgoutbox.InlineBytes)
	if err != nil {
		t.Fatal(err)
	}
	leased := 0
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id, nil, nil, nil, nil, nil, nil, nil); err != nil {
			t.Fatal(err)
		}
		if id != 0 { // not the look's tally
			leased++
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	n, hot := updates()
	if n, hot := n-n0, hot-hot0; leased != 10 || n != 10 || hot != 10 {
		t.Errorf("leased %d rows in %d updates, %d of them HOT; want 10, 10, 10", leased, n, hot)
	}
}

// A table an earlier version made (001 alone) with rows that failed there:
// the relay refuses it with what to apply; Migrate brings it up to date, and
// every row is published, those failed before the migration and those an
// earlier relay fails after it (neither with a retry time) too.
func TestTableOfAnEarlierVersionIsMigratedAndItsFailedRowsRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("q", nil)
	pool := e.earlierTable()
	// As the relay of 001 records a failure: attempts, and the retry's time in
	// lease_until.
	failOld := func(ids ...string) {
		t.Helper()
		if _, err := pool.Exec(e.ctx, `UPDATE lily_outbox SET attempts = attempts + 1, last_error = 'returned',
			lease_owner = NULL, lease_until = now() - interval '1 second' WHERE properties->>'message_id' = ANY($1)`, ids); err != nil {
			t.Fatal(err)
		}
	}
	write := func(msgs ...runtime.Message) {
		t.Helper()
		if err := pgx.BeginFunc(e.ctx, pool, func(tx pgx.Tx) error { return pgoutbox.Write(e.ctx, tx, msgs...) }); err != nil {
			t.Fatal(err)
		}
	}
	before, beforeIDs := messages(q, "before-", 3)
	write(before...)
	failOld(beforeIDs...)

	p, err := runtime.NewPublisher(runtime.Config{URLs: []string{e.brokerURL}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := pgoutbox.NewRelay(pool, p, pgoutbox.Options{}).Run(e.ctx); err == nil ||
		!strings.Contains(err.Error(), "no column retry_at (apply pgoutbox.Migrate") {
		t.Errorf("Run on the earlier table = %v, want what to apply", err)
	}

	if err := pgoutbox.Migrate(e.ctx, pool); err != nil {
		t.Fatal(err)
	}
	after, afterIDs := messages(q, "after-", 3)
	write(after...)
	failOld(afterIDs...)
	untried, _ := messages(q, "untried-", 2)
	write(untried...)

	_, stop := e.relayOn(pool, e.brokerURL, relayStep, pgoutbox.Options{Poll: 20 * time.Millisecond, Lease: relayLease})
	e.eventually("every row published", func() bool { return e.ready(q) == 8 })
	rep := stop()
	if want := map[runtime.Path]int{"published": 8}; !cmp.Equal(counts(rep), want) {
		t.Errorf("report counts %v, want %v", rep.Counts, want)
	}
	var left int
	if err := pool.QueryRow(e.ctx, "SELECT count(*) FROM lily_outbox").Scan(&left); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{}
	for _, id := range append(append(beforeIDs, afterIDs...), "untried-0", "untried-1") {
		want[id] = 1
	}
	if got := ids(e.take(q)); left != 0 || !cmp.Equal(got, want) {
		t.Errorf("%d rows left; queue %s holds %v, want %v", left, q, got, want)
	}
}

// earlierTable is a pool on a schema of its own holding lily_outbox as the
// first migration alone made it.
func (e *env) earlierTable() *pgxpool.Pool {
	e.t.Helper()
	schema := "lily_outbox_test_old_" + name()
	pool := e.poolIn(schema)
	first, err := os.ReadFile("migrations/001_lily_outbox.sql")
	if err != nil {
		e.t.Fatal(err)
	}
	for _, sql := range []string{"CREATE SCHEMA " + schema, string(first)} {
		if _, err := pool.Exec(e.ctx, sql); err != nil {
			e.t.Fatal(err)
		}
	}
	e.t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			e.t.Error(err)
		}
	})
	return pool
}

// Migrate at every worker's start-up, while a long transaction has read
// lily_outbox: on a table that is up to date it takes no lock, so it returns
// at once; on one that needs a step, it gives up after its lock wait instead
// of holding off, behind that reader, every write that comes after it.
func TestMigrateWaitsBehindNoReader(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	earlier := e.earlierTable()
	for _, pool := range []*pgxpool.Pool{e.pool, earlier} {
		reader, err := pool.Begin(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = reader.Rollback(e.ctx) }()
		if _, err := reader.Exec(e.ctx, "SELECT count(*) FROM lily_outbox"); err != nil {
			t.Fatal(err)
		}
	}

	if err := pgoutbox.Migrate(e.ctx, e.pool); err != nil {
		t.Errorf("Migrate on the table that is up to date = %v, want nil at once", err)
	}
	err := pgoutbox.Migrate(e.ctx, earlier)
	if err == nil || !strings.Contains(err.Error(), "lock timeout") {
		t.Errorf("Migrate on the earlier table behind a reader = %v, want its lock wait to end it", err)
	}
}

// Two workers start at once on a table at 002 (a rolling upgrade): both find
// it behind, one takes the advisory lock and applies 003, the other waits
// for the lock. Once it has it, the second finds the table up to date and
// leaves it alone: applying the files again would wait for a lock on the
// table behind a business transaction that wrote a row (001's CREATE INDEX
// IF NOT EXISTS takes one even when the index exists), holding off every
// write after it, and give up after its lock wait (before, it did: "lock
// timeout").
func TestMigrateAfterAnotherWorkerMigratedLeavesTheTableAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pool := e.earlierTable()
	second, err := os.ReadFile("migrations/002_lily_outbox_retry.sql")
	if err != nil {
		t.Fatal(err)
	}
	third, err := os.ReadFile("migrations/003_lily_outbox_behind.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(e.ctx, string(second)); err != nil {
		t.Fatal(err)
	}
	// The first worker, as Migrate goes: the lock, then the step.
	first, err := pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Rollback(e.ctx) }()
	if _, err := first.Exec(e.ctx, "SELECT pg_advisory_xact_lock(hashtext('lily_outbox migrate ' || coalesce(current_schema(), '')))"); err != nil {
		t.Fatal(err)
	}
	var schema string
	if err := first.QueryRow(e.ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	migrated := make(chan error, 1)
	go func() { migrated <- pgoutbox.Migrate(e.ctx, pool) }()
	e.eventually("the second worker waits for the advisory lock", func() bool {
		var waiting bool
		err := pool.QueryRow(e.ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE l.locktype = 'advisory' AND NOT l.granted AND a.query LIKE '%lily_outbox migrate%'
			AND l.objid::bigint = (hashtext('lily_outbox migrate ' || $1::text)::bigint & 4294967295))`, schema).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		return waiting
	})
	// The step, on a connection of its own here, so that a business
	// transaction can write a row before the lock goes: the one that is
	// open whenever the second worker gets it.
	if _, err := pool.Exec(e.ctx, string(third)); err != nil {
		t.Fatal(err)
	}
	writer, err := pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = writer.Rollback(e.ctx) }()
	if err := pgoutbox.Write(e.ctx, writer, message("q", "w-1")); err != nil {
		t.Fatal(err)
	}
	if err := first.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-migrated; err != nil {
		t.Errorf("Migrate of a table another worker brought up to date while it waited = %v, want nil", err)
	}
}

// The files applied in order to a table that is up to date (psql -f, a
// migration tool) while a transaction that has read lily_outbox stays open:
// 002 builds no index that 003 replaced, so 003 has nothing to drop and
// waits for no lock (before, 002 built the index again, holding off writes,
// and 003's drop waited behind the reader, holding off reads too).
func TestFilesAppliedAgainBuildNothingToDrop(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reader, err := e.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reader.Rollback(e.ctx) }()
	if _, err := reader.Exec(e.ctx, "SELECT count(*) FROM lily_outbox"); err != nil {
		t.Fatal(err)
	}
	conn, err := e.pool.Acquire(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(e.ctx, "SET lock_timeout = '2s'"); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = conn.Exec(e.ctx, "RESET lock_timeout") }()
	files, err := filepath.Glob("migrations/*.sql")
	if err != nil || len(files) != 3 {
		t.Fatalf("migrations: %v, %v", files, err)
	}
	for _, f := range files {
		sql, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(e.ctx, string(sql)); err != nil {
			t.Errorf("%s applied again behind a reader: %v", f, err)
		}
	}
	var untried bool
	if err := e.pool.QueryRow(e.ctx, "SELECT to_regclass('lily_outbox_untried') IS NOT NULL").Scan(&untried); err != nil || untried {
		t.Errorf("002's untried index is there: %v, %v", untried, err)
	}
}

// A look keeps rows in turn while the bodies before each take less than its
// room under MaxBytes: the row that reaches it is leased too, whatever its
// size, beside the rows before it. A row larger than MaxBytes so does not
// go alone, and the bodies in flight reach MaxBytes plus one body at most.
func TestALookLeasesTheRowThatReachesItsRoomBesideOthers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var msgs []runtime.Message
	for i, size := range []int{300, 300, 5000, 300} {
		m := message("q", fmt.Sprint("m-", i))
		m.Body = make([]byte, size)
		msgs = append(msgs, m)
	}
	e.write(msgs...)
	const room = 1000 // bytes of bodies the relay may still lease
	rows, err := e.pool.Query(e.ctx, pgoutbox.LeaseSQL, 10, "test", 3600, room, pgoutbox.InlineBytes)
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for rows.Next() {
		var id int64
		var size int
		if err := rows.Scan(&id, nil, nil, nil, nil, nil, &size, nil); err != nil {
			t.Fatal(err)
		}
		if id != 0 {
			sizes = append(sizes, size)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []int{300, 300, 5000}; !slices.Equal(sizes, want) {
		t.Errorf("a look with room for %d bytes of bodies leased rows of %v bytes, want %v", room, sizes, want)
	}
}

// One key with a backlog of 5,000 rows, its first in flight, then ten rows
// without a key: the looks mark the backlog held, a bounded walk at a time,
// and from then on a look leases the ten and reads none of the 4,999 held
// rows (the look before 003 read and dropped every one of them at each
// look, so that draining a key took time quadratic in its backlog).
func TestLookReadsNoRowsHeldBehindTheirKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	backlog, _ := messages("q", "k-", 5000)
	for i := range backlog {
		backlog[i].OrderKey = "customer-1"
	}
	e.write(backlog...)
	free, _ := messages("q", "free-", 10)
	e.write(free...)
	if _, err := e.pool.Exec(e.ctx, "ANALYZE lily_outbox"); err != nil {
		t.Fatal(err)
	}
	// look leases as a relay with room for 100 rows does, and commits; it
	// returns the rows leased and those it marked held.
	look := func() (leased, held int) {
		t.Helper()
		rows, err := e.pool.Query(e.ctx, pgoutbox.LeaseSQL, 100, "test", 3600, 64<<20, pgoutbox.InlineBytes)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			var attempts int
			if err := rows.Scan(&id, nil, nil, nil, nil, nil, nil, &attempts); err != nil {
				t.Fatal(err)
			}
			if id == 0 {
				held = attempts
			} else {
				leased++
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return leased, held
	}
	looks, total := 0, 0
	for {
		leased, held := look()
		looks++
		total += leased
		if held == 0 {
			break
		}
		if looks > 10 {
			t.Fatalf("%d looks and still marking rows", looks)
		}
	}
	// The key's first and the ten without a key.
	if total != 11 {
		t.Errorf("the looks leased %d rows, want 11", total)
	}
	if _, err := e.pool.Exec(e.ctx, "UPDATE lily_outbox SET lease_owner = NULL, lease_until = NULL WHERE order_key IS NULL"); err != nil {
		t.Fatal(err)
	}

	top, plan := explainLook(t, e)
	if top.Rows != 11 {
		t.Errorf("the look returned %v rows, want the 10 without a key and its tally", top.Rows)
	}
	read := top.read()
	if read > 100 {
		t.Errorf("the look read %v rows, want about the 10 it leases, none of the 4,999 held; plan:\n%s", read, plan)
	}
	t.Logf("%d looks marked the backlog; then a look read %v rows", looks, read)
}

// A key's first row deleted by hand once the look marked the rows behind it
// (as a relay of an earlier version deletes, clearing no mark): the relay's
// sweep clears the next row's mark, and the key's rows go in order.
func TestRowsBehindAHandDeletedRowAreSwept(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("q", nil)
	msgs, ids := messages(q, "k-", 5)
	for i := range msgs {
		msgs[i].OrderKey = "customer-1"
	}
	e.write(msgs...)
	if _, err := e.pool.Exec(e.ctx, pgoutbox.LeaseSQL, 100, "dead relay", 3600, 64<<20, pgoutbox.InlineBytes); err != nil {
		t.Fatal(err)
	}
	var held int
	if err := e.pool.QueryRow(e.ctx, "SELECT count(*) FROM lily_outbox WHERE behind").Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 4 {
		t.Fatalf("%d rows marked held, want 4", held)
	}
	if _, err := e.pool.Exec(e.ctx, "DELETE FROM lily_outbox WHERE properties->>'message_id' = 'k-0'"); err != nil {
		t.Fatal(err)
	}
	stop := e.relay(pgoutbox.Options{Poll: 10 * time.Millisecond})
	e.eventually("the key's rows published", func() bool { return len(e.rows()) == 0 })
	stop()
	var got []string
	for _, d := range e.take(q) {
		got = append(got, d.MessageId)
	}
	if want := ids[1:]; !cmp.Equal(got, want) {
		t.Errorf("queue holds %v, want %v", got, want)
	}
}

// Rows whose order_key is the empty string (stored by hand or by another
// tool: Write stores none as NULL) are of one key to the look, which marks
// all but the first behind it: each publish clears its next row's mark, as
// for any key, and the key's rows go in order without waiting for the sweep.
// The Lease is ten minutes, so the sweep, which ran at the start before any
// mark, comes back five times later than the two minutes the test waits.
// (Before, record cleared no mark for the empty key: its rows went one per
// Lease.)
func TestRowsOfTheEmptyKeyGoWithoutTheSweep(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("q", nil)
	msgs, ids := messages(q, "k-", 5)
	for i := range msgs {
		msgs[i].OrderKey = "to be emptied"
	}
	e.write(msgs...)
	e.write(message(q, "unkeyed"))
	if _, err := e.pool.Exec(e.ctx, "UPDATE lily_outbox SET order_key = '' WHERE order_key IS NOT NULL"); err != nil {
		t.Fatal(err)
	}
	stop := e.relay(pgoutbox.Options{Poll: 10 * time.Millisecond, Lease: 10 * time.Minute})
	e.eventually("the key's rows published", func() bool { return len(e.rows()) == 0 })
	if got, want := counts(stop()), map[runtime.Path]int{"published": 6}; !cmp.Equal(got, want) {
		t.Errorf("report counts %v, want %v", got, want)
	}
	var got []string
	for _, d := range e.take(q) {
		if d.MessageId != "unkeyed" {
			got = append(got, d.MessageId)
		}
	}
	if !cmp.Equal(got, ids) {
		t.Errorf("queue holds the key's %v, want %v once each in order", got, ids)
	}
}

// explainLook runs a look of 100 rows, in a transaction it rolls back, and
// returns its plan's top node, and the plan as PostgreSQL wrote it.
func explainLook(t *testing.T, e *env) (planNode, []byte) {
	t.Helper()
	tx, err := e.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(e.ctx) }()
	var plan []byte
	if err := tx.QueryRow(e.ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+pgoutbox.LeaseSQL, 100, "test", 30, 64<<20, pgoutbox.InlineBytes).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var nodes []struct{ Plan planNode }
	if err := json.Unmarshal(plan, &nodes); err != nil {
		t.Fatal(err)
	}
	return nodes[0].Plan, plan
}

// read is how many rows the scans at n and under it returned or dropped.
func (n planNode) read() float64 {
	return n.sum(func(p planNode) float64 {
		if strings.Contains(p.NodeType, "Scan") {
			return p.Removed + p.Rows*max(p.Loops, 1)
		}
		return p.Removed
	})
}

// A sweep reads the keys it is given at most, and the next goes on after
// the last key it read: however many keys hold marked rows (millions after
// a broker outage, with keys by customer), one sweep stays within its
// statement's bound. Five keys, each with its first row deleted by hand
// behind a look that marked the second, swept two keys at a time.
func TestSweepGoesOnWhereItStopped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	q := e.queue("q", nil)
	var msgs []runtime.Message
	for _, key := range []string{"a", "b", "c", "d", "e"} {
		two, _ := messages(q, key+"-", 2)
		for i := range two {
			two[i].OrderKey = key
		}
		msgs = append(msgs, two...)
	}
	e.write(msgs...)
	if _, err := e.pool.Exec(e.ctx, pgoutbox.LeaseSQL, 100, "dead relay", 3600, 64<<20, pgoutbox.InlineBytes); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(e.ctx, "DELETE FROM lily_outbox WHERE NOT behind"); err != nil {
		t.Fatal(err)
	}
	var from *string
	var swept []int
	for range 5 {
		var keys, cleared int
		if err := e.pool.QueryRow(e.ctx, pgoutbox.SweepSQL, from, 2).Scan(&from, &keys, &cleared); err != nil {
			t.Fatal(err)
		}
		if keys != cleared {
			t.Errorf("a sweep read %d keys and cleared %d marks, want as many", keys, cleared)
		}
		swept = append(swept, keys)
		if keys < 2 {
			break
		}
	}
	if want := []int{2, 2, 1}; !cmp.Equal(swept, want) {
		t.Errorf("sweeps read %v keys, want %v", swept, want)
	}
	var held int
	if err := e.pool.QueryRow(e.ctx, "SELECT count(*) FROM lily_outbox WHERE behind").Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 0 {
		t.Errorf("%d rows still marked", held)
	}
}
