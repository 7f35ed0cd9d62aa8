package ledger

// The process ledger: processes die too. Three consumer processes compete
// on the run's queue, fed by the outbox relay in a process of its own, while
// the parent writes the messages into the outbox and kills one of the four
// with SIGKILL every FaultEvery or so, starting another of its role after a
// short pause. Each process reaches the broker through a frame proxy of its
// slot's, so that its kill strikes as it is busy. The children (child.go)
// stream what they do; children.go runs them; the accounting is account's,
// with the evidence a kill leaves.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/inbox/pginbox"
	"github.com/lily-mq/lily/internal/backoff"
	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/internal/pgschema"
	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/outbox/pgoutbox"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/topology"
)

// ProcessConfig says what a process ledger runs. Of Config it reads N, Seed,
// BrokerURL, PostgresDSN (required: the outbox and the inbox), FaultEvery
// (the mean pause between two kills; zero kills none), PublishOver (the
// writes into the outbox spread over it; zero writes as fast as it can),
// Deadline and Progress; it runs on one broker node, without its restart.
type ProcessConfig struct {
	Config
	// ChildArgs are the arguments with which this program, run again, calls
	// RunChild: for a test binary, the -test.run of the test that does.
	ChildArgs []string
}

// The kills, as Result.Faults counts them.
const (
	consumerKilled = "consumer process killed (SIGKILL), started again"
	relayKilled    = "relay process killed (SIGKILL), started again"
)

// workTable is the inbox-backed behaviour's business table, in the run's
// schema.
const workTable = "ledger_work"

// quietFor ends the wait for journeys that no record will show over: with
// the outbox and the queues empty, nothing happened for this long, and a
// process killed before its record ran each of them (one killed after an
// ACK leaves such a journey).
const quietFor = 3 * time.Second

// processSpec is the run's queue as the consumer processes take it: the
// ledger's, with fewer handlers each, as each delivery holds a database
// connection for its claim and three processes share PostgreSQL's hundred
// with the other tests.
func processSpec(name string) runtime.QueueSpec {
	s := spec(name, topology.Classic)
	s.Concurrency = 10
	return s
}

// processRun is the state of one process ledger run.
type processRun struct {
	*run
	pcfg   ProcessConfig
	schema string
	kids   *children
	// proxies and urls: each slot's way to the broker.
	proxies [len(slots)]*faults.Proxy
	urls    [len(slots)]string
}

// RunProcesses runs the process ledger and returns it; an error means the
// run could not be carried out, not that a promise broke. The messages go
// through the PostgreSQL outbox, written by this process in transactions of
// 1 to 5 while the children run; each id's fate is then accounted for as Run
// does, with what a kill leaves as evidence of its own: the handler runs a
// killed process wrote no record of, the ACKs it sent and had not proven,
// and the rows the relay leased again after a relay was killed or got no
// confirm (their messages may be published twice; the inbox ACKs the copies
// of committed work as duplicates).
func RunProcesses(ctx context.Context, cfg ProcessConfig) (*Result, error) {
	if cfg.PostgresDSN == "" || cfg.Cluster != nil || cfg.RestartBroker {
		return nil, errors.New("ledger: the process ledger needs PostgreSQL, one broker node and no broker restart")
	}
	start := time.Now()
	suffix := fmt.Sprintf("%06x", rand.Uint32()&0xffffff) // the run's own queue, schema and application names
	r := newRun(cfg.Config, processSpec(fmt.Sprintf("lilyledger.processes.%d.%s", cfg.Seed, suffix)))
	r.table, r.app = workTable, "lily-ledger-"+suffix
	pr := &processRun{run: r, pcfg: cfg, schema: "lily_ledger_" + suffix}
	pr.assign()
	if err := pr.declare(); err != nil {
		return nil, err
	}
	defer pr.deleteQueues()
	if err := pr.openSchema(ctx); err != nil {
		return nil, err
	}
	defer pr.dropSchema()
	for slot := range slots {
		p, url, err := faults.ListenFor(cfg.BrokerURL)
		if err != nil {
			return nil, err
		}
		defer p.Close()
		pr.proxies[slot], pr.urls[slot] = p, url
	}
	pr.kids = newChildren(pr)
	defer pr.kids.killAll()
	for slot := range slots {
		if err := pr.kids.start(slot); err != nil {
			return nil, err
		}
	}

	// The writes and the kills end before the children are stopped, and
	// before the schema goes on an early return.
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	written := make(chan error, 1)
	wg.Go(func() { written <- pr.write(runCtx) })
	wg.Go(func() { pr.strike(runCtx) })
	pr.deadline = time.Now().Add(cfg.Deadline)
	err := pr.await(runCtx, written)
	cancel()
	wg.Wait()
	if err != nil {
		return nil, err
	}
	reps := pr.kids.stopAll()

	// Every process has ended, and the kills with them: nothing needs the
	// proxies now, and the drain closes them first.
	queued, err := pr.drain(pr.proxies[:]...)
	if err != nil {
		return nil, err
	}
	dbCtx := context.WithoutCancel(ctx)
	rows, err := pr.inboxRows(dbCtx)
	if err != nil {
		return nil, err
	}
	e := pr.evidence(reps, queued, rows)
	e.killed, e.killedAcks, e.killedDuplicates = pr.kids.killedRuns()
	e.unheard = pr.kids.unheardRuns()
	e.reported = pr.kids.reported()
	if e.leasedAgain, e.claimed, err = pr.trail(dbCtx); err != nil {
		return nil, err
	}
	res := account(e)
	res.Duration = time.Since(start)
	return res, nil
}

// trailSQL makes the business table and, beside the outbox, a trail of
// every lease of its rows, written in the lease's own transaction: a row
// leased again may have been published before (its relay was killed after
// the publish, or got no confirm), and only the inbox stops that copy.
const trailSQL = `
CREATE TABLE ` + workTable + ` (message_id text NOT NULL, attempt int NOT NULL, slow bool NOT NULL);
CREATE TABLE ledger_leases (message_id text NOT NULL);
CREATE FUNCTION ledger_lease() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO ledger_leases VALUES (NEW.properties->>'message_id');
	RETURN NULL;
END $$;
CREATE TRIGGER ledger_lease AFTER UPDATE ON lily_outbox FOR EACH ROW WHEN (NEW.lease_owner IS NOT NULL)
	EXECUTE FUNCTION ledger_lease();`

// openSchema makes the run's schema: its inbox, its outbox with the lease
// trail, and the business table; the parent's pool has it as search_path.
func (pr *processRun) openSchema(ctx context.Context) error {
	pool, err := pgschema.Pool(ctx, pr.cfg.PostgresDSN, pr.schema, pr.app, 8)
	if err != nil {
		return err
	}
	pr.pool = pool
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pr.schema); err != nil {
		pool.Close()
		return fmt.Errorf("PostgreSQL at %s: %w", pr.cfg.PostgresDSN, err)
	}
	err = pginbox.Migrate(ctx, pool)
	if err == nil {
		err = pgoutbox.Migrate(ctx, pool)
	}
	if err == nil {
		_, err = pool.Exec(ctx, trailSQL)
	}
	if err != nil {
		pr.dropSchema()
	}
	return err
}

func (pr *processRun) dropSchema() {
	_, _ = pr.pool.Exec(context.Background(), "DROP SCHEMA "+pr.schema+" CASCADE")
	pr.pool.Close()
}

// writers is how many transactions write into the outbox at once.
const writers = 4

// write writes every message into the outbox, in transactions of 1 to 5
// messages (sizes from the seed), their starts spread over PublishOver.
func (pr *processRun) write(ctx context.Context) error {
	rng := rand.New(rand.NewPCG(pr.cfg.Seed, 2))
	type batch struct{ first, n int }
	var txs []batch
	for i := 0; i < len(pr.ids); {
		n := min(1+rng.IntN(5), len(pr.ids)-i)
		txs = append(txs, batch{i, n})
		i += n
	}
	return pr.spread(ctx, len(txs), writers, func(j int) int { return txs[j].first }, func(j int) error {
		return pr.writeTx(ctx, txs[j].first, txs[j].n)
	})
}

// writeTx writes messages first to first+n-1 in one transaction. Nothing
// strikes the database here: a failure fails the run.
func (pr *processRun) writeTx(ctx context.Context, first, n int) error {
	msgs := make([]runtime.Message, n)
	for j := range msgs {
		i := first + j
		msgs[j] = runtime.Message{RoutingKey: pr.spec.Name, Publishing: runtime.NewPublishing(envelope.Message{Type: messageTyp}, 1, pr.ids[i], bodyOf(i))}
	}
	tx, err := pr.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("ledger: writing into the outbox: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := pgoutbox.Write(ctx, tx, msgs...); err != nil {
		return fmt.Errorf("ledger: writing into the outbox: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("ledger: writing into the outbox: %w", err)
	}
	return nil
}

// await returns when the run is over: every message written and relayed
// (the outbox empty), the main queue and the retry bucket empty, and every
// id's journey over, or nothing seen for quietFor and every journey not
// seen over run by a killed process; or at the deadline. It returns an
// error when the writes failed.
func (pr *processRun) await(ctx context.Context, written <-chan error) error {
	conn, err := amqp.Dial(pr.cfg.BrokerURL)
	if err != nil {
		return err
	}
	defer conn.Close()
	deadline := time.After(time.Until(pr.deadline))
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	lastProgress, allWritten := time.Now(), false
	for {
		select {
		case err := <-written:
			if err != nil {
				return err
			}
			allWritten = true
		case <-deadline:
			pr.pastDeadline.Store(true)
			return nil
		case <-ctx.Done():
			pr.interrupted.Store(true)
			return nil
		case <-tick.C:
		}
		pr.mu.Lock()
		done, records := len(pr.done), len(pr.records)
		pr.mu.Unlock()
		if pr.cfg.Progress != nil && time.Since(lastProgress) > 5*time.Second {
			lastProgress = time.Now()
			fmt.Fprintf(pr.cfg.Progress, "ledger: %d of %d messages through, %d records, faults %v%s\n", done, len(pr.ids), records, pr.faultCounts(), pr.waitingFor(3))
		}
		if !allWritten || (done < len(pr.ids) && (time.Since(pr.kids.lastEvent()) < quietFor || !pr.openOnlyWhereKilled())) {
			continue
		}
		empty, err := pr.empty(ctx, conn)
		if err != nil {
			return err
		}
		if empty {
			return nil
		}
	}
}

// openOnlyWhereKilled says whether every journey not seen over was run, or
// settled as an inbox duplicate, by a process killed before its record.
// Any other is still under way: its
// delivery held by a live consumer (in a requeue's pause, or never to be
// settled), which the queues' counts do not show, as they count only the
// messages ready.
func (pr *processRun) openOnlyWhereKilled() bool {
	runs, _, duplicates := pr.kids.killedRuns()
	killed := map[string]bool{}
	for _, of := range []map[workKey]int{runs, duplicates} {
		for k := range of {
			killed[k.id] = true
		}
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	for _, id := range pr.ids {
		if !pr.done[id] && !killed[id] {
			return false
		}
	}
	return true
}

// empty says whether the outbox, the main queue and the retry bucket hold
// nothing ready.
func (pr *processRun) empty(ctx context.Context, conn *amqp.Connection) (bool, error) {
	var rows int
	if err := pr.pool.QueryRow(ctx, "SELECT count(*) FROM lily_outbox").Scan(&rows); err != nil {
		return false, err
	}
	if rows > 0 {
		return false, nil
	}
	ch, err := conn.Channel()
	if err != nil {
		return false, err
	}
	defer ch.Close()
	for _, q := range []string{pr.spec.Name, queue.RetryBucket(pr.spec.Name, pr.spec.Topology.RetryDelays[0])} {
		info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			return false, err
		}
		if info.Messages > 0 {
			return false, nil
		}
	}
	return true, nil
}

// trail reads the lease trail (each id's leases after the first) and the
// inbox's claims (the ids whose work committed).
func (pr *processRun) trail(ctx context.Context) (leasedAgain map[string]int, claimed map[string]bool, err error) {
	leasedAgain, claimed = map[string]int{}, map[string]bool{}
	if err := scan(ctx, pr.pool, "SELECT message_id, count(*) - 1 FROM ledger_leases GROUP BY message_id HAVING count(*) > 1", func(id string, n int) {
		leasedAgain[id] = n
	}); err != nil {
		return nil, nil, err
	}
	if err := scan(ctx, pr.pool, "SELECT message_id, 1 FROM lily_inbox WHERE consumer = $1", func(id string, _ int) {
		claimed[id] = true
	}, pr.spec.Name); err != nil {
		return nil, nil, err
	}
	return leasedAgain, claimed, nil
}

// scan runs a query of (text, integer) rows and hands each to row.
func scan(ctx context.Context, pool *pgxpool.Pool, sql string, row func(string, int), args ...any) error {
	rows, err := pool.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return err
		}
		row(id, n)
	}
	return rows.Err()
}

// strike kills one of the four processes with SIGKILL every FaultEvery on
// average (between half and one and a half of it), and starts another of
// its role after 100 to 500 ms. Each round of four kills takes the four in
// an order drawn from the seed, so that even a short run kills both roles.
// A kill strikes as the process is busy (killBusy). Both kinds are counted
// from the start, as Run counts its faults, so that one that never struck
// shows as 0, and is a problem.
func (pr *processRun) strike(ctx context.Context) {
	if pr.cfg.FaultEvery <= 0 {
		return
	}
	pr.mu.Lock()
	pr.faults[consumerKilled] += 0
	pr.faults[relayKilled] += 0
	pr.mu.Unlock()
	var order []int
	for {
		pause := pr.cfg.FaultEvery/2 + time.Duration(pr.rng.Int64N(int64(pr.cfg.FaultEvery)))
		if !backoff.Sleep(ctx, pause) {
			return
		}
		if len(order) == 0 {
			order = pr.rng.Perm(len(slots))
		}
		slot := order[0]
		order = order[1:]
		if !pr.killBusy(slot) {
			continue // it had ended by itself: supervise starts another
		}
		what := consumerKilled
		if slots[slot] == relayRole {
			what = relayKilled
		}
		pr.mu.Lock()
		pr.faults[what]++
		pr.mu.Unlock()
		// Started again even when the run is ending, so that it ends with
		// four processes, each stopped well.
		time.Sleep(pr.between(100*time.Millisecond, 500*time.Millisecond))
		if err := pr.kids.start(slot); err != nil {
			pr.harnessError("starting a %s process: %v", slots[slot], err)
		}
	}
}

// killBusy kills the process in slot as it is busy, or after 2 s without:
// a consumer as an ACK travels to the broker, which never gets it (the work
// committed: its redelivery meets the inbox, while the handlers it was
// running at the time run again); the relay as a confirm travels to it,
// which it never reads (its row is not deleted: when its lease ends, a
// relay publishes it again). The frame is held in the proxy until the
// process is dead and its connections gone.
func (pr *processRun) killBusy(slot int) bool {
	consume := faults.ConnectionName(pr.spec.Name, "consume")
	dir := faults.ToBroker
	if slots[slot] == relayRole {
		dir = faults.ToClient
	}
	p := pr.proxies[slot]
	held := make(chan struct{})
	var once sync.Once
	p.Intercept(func(f faults.Frame) faults.Action {
		if f.Dir == dir && f.Is(faults.BasicAck) && (dir == faults.ToClient || f.Conn == consume) {
			once.Do(func() {
				p.Stall(dir)
				close(held)
			})
		}
		return faults.Forward
	})
	select {
	case <-held:
	case <-time.After(2 * time.Second):
	}
	killed := pr.kids.kill(slot)
	p.Intercept(nil)
	for end := time.Now().Add(time.Second); len(p.Conns()) > 0 && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	p.Resume()
	return killed
}

// harnessError notes a failure of the harness, which the accounting
// reports as a problem.
func (pr *processRun) harnessError(format string, args ...any) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.faults["harness error: "+fmt.Sprintf(format, args...)]++
}
