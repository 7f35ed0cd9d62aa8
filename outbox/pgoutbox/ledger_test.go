package pgoutbox_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/runtime"
)

// The outbox ledger (docs/reliability.md, "The outbox ledger"): messages
// written through the outbox while faults strike all arrive, and every extra
// copy is explained. This file runs it; ledger_writers_test.go writes,
// ledger_relays_test.go runs the relays (one in a process of its own, which
// is killed), ledger_faults_test.go strikes, ledger_account_test.go accounts.

// The ledger's relays: a short lease, so that a killed relay's rows come
// back soon, and a step well within four fifths of it.
const (
	ledgerLease      = 2 * time.Second
	ledgerStep       = 700 * time.Millisecond
	ledgerPoll       = 50 * time.Millisecond
	ledgerBatch      = 20
	ledgerMaxBackoff = 500 * time.Millisecond
)

// TestOutboxLedger writes LILY_OUTBOX_LEDGER_N messages (3,000 unless set)
// from 4 writers, in transactions of 1 to 5 messages with a business row,
// about one message in five with one of 5 order keys, while 3 relays (two
// in this process, one in a process of its own) publish them through a
// frame proxy and faults strike, 0.2 to 0.8 s apart: a writer's COMMIT
// killed, the relay process killed with SIGKILL and started again, a relay's
// connection cut as a confirm travels to it, a relay's delete killed in the
// database for longer than a lease. LILY_OUTBOX_LEDGER_SEED fixes the
// messages and the fault schedule (not the interleaving).
//
// Then, with the table empty and the relays stopped, it drains the queue
// and asserts: every committed message id arrived (none lost), no id of a
// rolled-back transaction did, each key's first arrivals are in write order,
// and every extra copy is explained by the relays' logs and the table's
// lease trail (see accountOutbox).
func TestOutboxLedger(t *testing.T) {
	t.Parallel()
	start := time.Now()
	e := newEnv(t)
	n := ledgerEnv(t, "LILY_OUTBOX_LEDGER_N", 3000)
	seed := ledgerEnv(t, "LILY_OUTBOX_LEDGER_SEED", rand.Uint64()>>16)
	t.Logf("seed %d (rerun the schedule with LILY_OUTBOX_LEDGER_SEED=%d)", seed, seed)
	// The writes take about n/250 seconds; the rest is bounded by leases and
	// backoffs, generously for a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute+time.Duration(n)*10*time.Millisecond)
	defer cancel()

	l := newLedgerRun(ctx, t, e, n, seed)
	inProcess := []*ledgerRelay{l.startInProcess("a"), l.startInProcess("b")}
	proc, err := l.startProcess()
	if err != nil {
		t.Fatal(err)
	}
	l.proc = proc

	written := make(chan struct{})
	struck := make(chan struct{})
	go func() {
		defer close(struck)
		l.strike(written)
	}()
	// However write ends, even by t.Fatal, the faults stop before the test
	// does: none may strike, or start a relay, after it.
	var once sync.Once
	stopFaults := func() {
		once.Do(func() { close(written) })
		<-struck
	}
	t.Cleanup(stopFaults)
	tally := l.write()
	stopFaults()

	l.eventually("the outbox empty", func() bool {
		var left int
		if err := e.pool.QueryRow(ctx, "SELECT count(*) FROM lily_outbox").Scan(&left); err != nil {
			t.Fatal(err)
		}
		return left == 0
	})
	for _, r := range inProcess {
		r.report = r.stop()
	}
	l.stopProcess(l.proc)

	ev := l.evidence(e.take(l.queue))
	res := accountOutbox(ev)
	for _, r := range inProcess {
		l.checkReport(r, ev)
	}
	for i, p := range res.problems {
		if i == maxLedgerProblems {
			t.Errorf("... and %d more problems", len(res.problems)-i)
			break
		}
		t.Error(p)
	}
	t.Logf("outbox ledger: seed %d, %d messages (%d with an order key, %d keys) in %d transactions, %d more rolled back; %s\n"+
		"  writers: COMMITs killed %d (aborted, written again %d; had committed %d), statements failed before COMMIT %d (written again)\n"+
		"  faults: %s; relay backends killed in deletes %d\n"+
		"  publish answers: %s\n"+
		"  arrivals %d; lost %d; never committed %d\n"+
		"  extra copies %d: %s; unexplained %d",
		seed, res.messages, l.keyed, ledgerKeys, tally.committed, tally.rolledBack, time.Since(start).Round(100*time.Millisecond),
		tally.killedAborted+tally.killedCommitted, tally.killedAborted, tally.killedCommitted, tally.failedBefore,
		counted(l.faults), l.deleteKills,
		counted(res.answers),
		res.arrivals, res.lost, res.strays,
		total(res.copies), counted(res.copies), res.unexplained)
	if res.messages != n {
		t.Errorf("%d messages committed, want %d", res.messages, n)
	}
	if len(l.faults) == 0 {
		t.Error("no fault struck")
	}
}

// ledgerEnv reads a positive number from the environment, or def.
func ledgerEnv[T int | uint64](t *testing.T, name string, def T) T {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v == 0 {
		t.Fatalf("%s=%q: want a positive number", name, s)
	}
	return T(v)
}

// ledgerRun is the state of one ledger run.
type ledgerRun struct {
	t      *testing.T
	e      *env
	ctx    context.Context
	n      int
	seed   uint64
	schema string
	queue  string
	// app prefixes the application_name of the writers' and the relays'
	// database connections, which the database faults aim at.
	app string
	dir string // the relays' logs
	// The broker through a proxy: for the relays of this process, and for
	// the relay process.
	proxy, procProxy *faults.Proxy
	amqpURL, procURL string

	plans []txPlan
	keyed int
	// proc is the relay process running now; relays lists every relay
	// started, killed or not.
	proc   *ledgerRelay
	procs  int
	relays []*ledgerRelay
	// The fault loop's own: its schedule, what struck.
	rng         *rand.Rand
	faults      map[string]int
	deleteKills int // backends killed in the delete faults
	// slowCommit asks the next writer transaction for a slow COMMIT.
	slowCommit atomic.Bool
}

// ledgerSQL makes the ledger's tables beside lily_outbox, in the test's
// schema: the writers' business rows and key counters, the lease trail and
// the relays whose deletes the delete fault slows down.
const ledgerSQL = `
-- One row per committed transaction, naming its messages: what committed.
CREATE TABLE ledger_business (tx text PRIMARY KEY, ids text[] NOT NULL, keys text[] NOT NULL, seqs int[] NOT NULL, slow boolean NOT NULL);
-- Each order key's committed messages; its row lock orders the key's writers.
CREATE TABLE ledger_keys (key text PRIMARY KEY, written int NOT NULL DEFAULT 0);
-- Every lease of a row, written in the lease's own transaction.
CREATE TABLE ledger_leases (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	message_id text NOT NULL, owner text NOT NULL, at timestamptz NOT NULL);
CREATE FUNCTION ledger_lease() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO ledger_leases (message_id, owner, at) VALUES (NEW.properties->>'message_id', NEW.lease_owner, clock_timestamp());
	RETURN NULL;
END $$;
CREATE TRIGGER ledger_lease AFTER UPDATE ON lily_outbox FOR EACH ROW WHEN (NEW.lease_owner IS NOT NULL)
	EXECUTE FUNCTION ledger_lease();
-- A relay named here (by application_name) deletes slowly, so that the
-- delete fault finds its DELETE running and kills it.
CREATE TABLE ledger_slow_deleters (app text PRIMARY KEY);
CREATE FUNCTION ledger_slow_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF EXISTS (SELECT 1 FROM ledger_slow_deleters WHERE app = current_setting('application_name')) THEN
		PERFORM pg_sleep(0.3);
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER ledger_slow_delete AFTER DELETE ON lily_outbox FOR EACH STATEMENT EXECUTE FUNCTION ledger_slow_delete();
`

func newLedgerRun(ctx context.Context, t *testing.T, e *env, n int, seed uint64) *ledgerRun {
	l := &ledgerRun{
		t: t, e: e, ctx: ctx, n: n, seed: seed, schema: e.pool.Config().ConnConfig.RuntimeParams["search_path"],
		queue: e.queue("dest", nil), dir: t.TempDir(), rng: rand.New(rand.NewPCG(seed, 1)), faults: map[string]int{},
	}
	// application_name keeps 63 bytes: the schema's unique suffix fits.
	l.app = "lily-ledger-" + strings.TrimPrefix(l.schema, "lily_outbox_test_")
	// A proxy for the relays of this process, and one for the relay
	// process, so that its kill can be timed on its own traffic.
	l.proxy, l.amqpURL = l.listen()
	l.procProxy, l.procURL = l.listen()
	l.plan()
	keys := "INSERT INTO ledger_keys (key) SELECT 'k' || i FROM generate_series(0, " + strconv.Itoa(ledgerKeys-1) + ") i;"
	if _, err := e.pool.Exec(ctx, ledgerSQL+keys+faults.SlowCommitSQL("ledger_business", 500*time.Millisecond, "NEW.slow")); err != nil {
		t.Fatal(err)
	}
	return l
}

// listen starts a frame proxy to the broker, closed when the test ends.
func (l *ledgerRun) listen() (*faults.Proxy, string) {
	proxy, url, err := faults.ListenFor(l.e.brokerURL)
	if err != nil {
		l.t.Fatal(err)
	}
	l.t.Cleanup(func() { _ = proxy.Close() })
	return proxy, url
}

// eventually polls ok until it holds, or fails t at the run's deadline.
func (l *ledgerRun) eventually(what string, ok func() bool) {
	l.t.Helper()
	for !ok() {
		if l.ctx.Err() != nil {
			l.t.Fatalf("%s: not by the run's deadline", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// evidence gathers what the accounting reads: the business rows, the lease
// trail, the relays' logs and the queue's messages.
func (l *ledgerRun) evidence(queued []amqp.Delivery) outboxEvidence {
	t := l.t
	ev := outboxEvidence{committed: map[string]committedMessage{}}
	rows, err := l.e.pool.Query(l.ctx, "SELECT m.id, m.key, m.seq FROM ledger_business, unnest(ids, keys, seqs) AS m(id, key, seq)")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var c committedMessage
		if err := rows.Scan(&id, &c.key, &c.seq); err != nil {
			t.Fatal(err)
		}
		ev.committed[id] = c
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows, err = l.e.pool.Query(l.ctx, "SELECT message_id, owner, at FROM ledger_leases ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var ls lease
		if err := rows.Scan(&ls.id, &ls.owner, &ls.at); err != nil {
			t.Fatal(err)
		}
		ev.leases = append(ev.leases, ls)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, p := range l.plans {
		if p.rollback {
			ev.rolledBack = append(ev.rolledBack, p.ids...)
		}
	}
	for _, r := range l.relays {
		tr, err := readTrail(r)
		if err != nil {
			t.Fatal(err)
		}
		ev.relays = append(ev.relays, tr)
	}
	for _, d := range queued {
		a := arrival{id: d.MessageId}
		a.key, _ = d.Headers["x-ledger-key"].(string)
		seq, _ := d.Headers["x-ledger-seq"].(int64)
		a.seq = int(seq)
		ev.arrived = append(ev.arrived, a)
	}
	return ev
}

// checkReport checks that an in-process relay's report counts what its log
// says it answered.
func (l *ledgerRun) checkReport(r *ledgerRelay, ev outboxEvidence) {
	if r.report == nil {
		return // its Run failed, and said so
	}
	for _, tr := range ev.relays {
		if tr.name != r.name {
			continue
		}
		logged := map[runtime.Path]int{}
		for _, a := range tr.answers {
			logged[runtime.Path(a.path)]++
		}
		if got := counts(r.report); !maps.Equal(got, logged) {
			l.t.Errorf("relay %s: report counts %v, its log %v", r.name, got, logged)
		}
		// Its possible copies are its unconfirmed publishes and the confirmed
		// rows no longer its own at their delete: at its stop, no confirmed
		// row was left undeleted.
		var want, copies []string
		for _, a := range tr.answers {
			if a.path == "unconfirmed" {
				want = append(want, a.id)
			}
		}
		want = append(want, tr.leaseLost...)
		for _, c := range r.report.PossibleCopies {
			copies = append(copies, c.MessageID)
		}
		slices.Sort(want)
		slices.Sort(copies)
		if !slices.Equal(copies, want) {
			l.t.Errorf("relay %s: possible copies %v, unconfirmed publishes and lost leases logged %v", r.name, copies, want)
		}
	}
}

// counted writes counts as "kind n, kind n", by kind.
func counted(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
