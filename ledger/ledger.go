// Package ledger proves that the runtime loses nothing: it publishes N
// messages with unique ids and mixed behaviours, consumes them through the
// fault harness (internal/faults) while random faults strike, shuts the
// consumer down, and then accounts for every id from the queues (drained)
// and the database. The test in this package runs it with at least 1,000
// messages; cmd/soak runs it with 100,000.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/inbox/pginbox"
	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/runtime"
)

// Config says what to run.
type Config struct {
	// N is the number of messages, each with its own id.
	N int
	// Seed chooses every message's behaviour and the faults' kinds, moments
	// and lengths. The interleaving with the broker is not reproducible; the
	// schedule is.
	Seed uint64
	// BrokerURL reaches RabbitMQ directly; the consumer goes through a proxy.
	BrokerURL string
	// PostgresDSN, when set, adds the inbox-backed behaviour (pginbox) and
	// the PostgreSQL fault.
	PostgresDSN string
	// FaultEvery is the mean pause between two faults; zero injects none.
	FaultEvery time.Duration
	// RestartBroker adds rabbitmqctl stop_app / start_app to the faults. It
	// closes every client's connection to the broker: only for a broker no
	// one else uses at the time.
	RestartBroker bool
	// PublishOver spreads the publishing over this long, while the consumer
	// runs and faults strike; zero publishes everything before the consumer
	// starts (required with RestartBroker: the publisher does not reconnect).
	PublishOver time.Duration
	// Deadline bounds the run before the shutdown, whatever is left.
	Deadline time.Duration
	// Progress, when set, receives a line every few seconds.
	Progress io.Writer
}

// Behaviour is what a message's handler does.
type Behaviour string

// The behaviours, and the fate each should reach.
const (
	Success   Behaviour = "success"                // acked
	Flaky     Behaviour = "retryable-then-success" // retried once, then acked
	Refused   Behaviour = "permanent"              // dead-lettered
	Panics    Behaviour = "panic"                  // panics on every attempt: dead-lettered when exhausted
	Slow      Behaviour = "slow"                   // 5 to 50 ms, then acked
	Hangs     Behaviour = "hang"                   // outlives its timeout on attempt 1, then acked
	InboxWork Behaviour = "inbox-backed"           // writes a row in the claim's transaction, then acked
)

// weights are per mille; InboxWork's share goes to Success without a database.
var weights = []struct {
	b Behaviour
	w int
}{{Success, 420}, {Flaky, 150}, {Refused, 60}, {Panics, 40}, {Slow, 125}, {Hangs, 5}, {InboxWork, 200}}

// dead says whether a behaviour should end in the DLQ.
func (b Behaviour) dead() bool { return b == Refused || b == Panics }

// Fate is where a message was found at the end.
type Fate string

// The fates.
const (
	Acked    Fate = "handled and acked"
	InDLQ    Fate = "in the DLQ"
	InBucket Fate = "in a retry bucket"
	InMain   Fate = "still in the main queue"
	Lost     Fate = "LOST"
)

// messageTyp is the AMQP type of the ledger's messages.
const messageTyp = "LedgerTest"

// Result is the ledger.
type Result struct {
	Seed     uint64
	N        int
	Queue    string
	Duration time.Duration
	// Behaviours and Fates count messages; Faults counts faults that struck,
	// by kind.
	Behaviours map[Behaviour]int
	Fates      map[Fate]int
	Faults     map[string]int
	// HandlerRuns counts every call of a handler; SecondRuns counts the runs
	// beyond the first of one message's attempt, by their explanation.
	HandlerRuns int
	SecondRuns  map[string]int
	// ExtraCopies counts a message present more than once at the end (in two
	// queues, or in a queue after its work was acked), by explanation.
	ExtraCopies map[string]int
	// InboxStopped counts redeliveries the inbox ACKed as duplicates without
	// the handler; InboxRows counts the business rows committed.
	InboxStopped, InboxRows int
	// Channel406 counts channels or connections closed with 406.
	Channel406 int
	// FailedStarts counts consumers whose first connection failed under a
	// fault; each was started again, as a process supervisor would.
	FailedStarts int
	// Reports are the shutdown reports, one per consumer (a restart fault
	// starts a new one).
	Reports []*runtime.Report
	// Problems lists every broken promise: a lost message, an unexplained
	// second run or copy, a message in the wrong place, a 406.
	Problems []string
}

// spec is the queue of one run: its own name, one retry bucket.
func spec(name string) runtime.QueueSpec {
	return runtime.QueueSpec{
		Name: name, Type: "classic", Prefetch: 64, Concurrency: 32,
		RetryDelays: []time.Duration{200 * time.Millisecond}, MaxAttempts: 3,
		DeadLetterQueue: name + ".dlq", MaxBodyBytes: 1024, HandlerTimeout: 500 * time.Millisecond,
	}
}

type workKey struct {
	id      string
	attempt int
}

// run is the state of one ledger run.
type run struct {
	cfg   Config
	spec  runtime.QueueSpec
	rng   *rand.Rand // the fault schedule's; only the fault loop draws from it
	ids   []string
	beh   map[string]Behaviour
	slow  map[string]time.Duration
	pool  *pgxpool.Pool
	table string
	app   string
	proxy *faults.Proxy
	// deadline is when the consumer shuts down, whatever is left; restart
	// asks for a new consumer.
	deadline time.Time
	restart  chan struct{}
	// failedInARow counts consumers in a row that never connected (consume's).
	failedInARow int
	// killArmed: the next inbox-backed handler marks its row so that its
	// COMMIT is slow and the PostgreSQL fault can kill it.
	killArmed atomic.Bool

	mu           sync.Mutex
	runs         map[workKey]int
	records      []runtime.Record
	byID         map[string][]runtime.Record
	ambiguous    map[workKey]int // ACKs sent, never proven
	lost         []string        // why sessions ended
	failedStarts int
	done         map[string]bool // ids whose journey reached its end (acked work, DLQ)
	faults       map[string]int
}

// Run runs the ledger and returns it; an error means the run could not be
// carried out (no broker, no database), not that a promise broke.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	start := time.Now()
	suffix := fmt.Sprintf("%06x", rand.Uint32()&0xffffff) // the run's own queue, table and application name
	name := fmt.Sprintf("lilyledger.%d.%s", cfg.Seed, suffix)
	r := &run{
		cfg: cfg, spec: spec(name), rng: rand.New(rand.NewPCG(cfg.Seed, 1)),
		beh: map[string]Behaviour{}, slow: map[string]time.Duration{},
		restart: make(chan struct{}, 1), runs: map[workKey]int{}, byID: map[string][]runtime.Record{}, ambiguous: map[workKey]int{}, done: map[string]bool{}, faults: map[string]int{},
	}
	r.assign()
	if err := r.declare(); err != nil {
		return nil, err
	}
	defer r.deleteQueues()
	if cfg.PostgresDSN != "" {
		if err := r.openDB(ctx, suffix); err != nil {
			return nil, err
		}
		defer r.closeDB()
	}
	if cfg.RestartBroker && cfg.PublishOver > 0 {
		return nil, errors.New("ledger: a broker restart needs everything published first (PublishOver 0)")
	}
	if cfg.PublishOver == 0 {
		if err := r.publish(); err != nil {
			return nil, err
		}
	}
	p, url, err := faults.ListenFor(cfg.BrokerURL)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	r.proxy = p
	reps, err := r.consume(ctx, url)
	if err != nil {
		return nil, err
	}
	queued, err := r.drain()
	if err != nil {
		return nil, err
	}
	rows, err := r.inboxRows(context.WithoutCancel(ctx))
	if err != nil {
		return nil, err
	}
	res := r.account(reps, queued, rows)
	res.Duration = time.Since(start)
	return res, nil
}

// assign gives each message its behaviour, from the seed.
func (r *run) assign() {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, 0))
	for i := range r.cfg.N {
		id := fmt.Sprintf("m%07d", i)
		b := pick(rng.IntN(1000))
		if b == InboxWork && r.cfg.PostgresDSN == "" {
			b = Success
		}
		r.ids = append(r.ids, id)
		r.beh[id] = b
		r.slow[id] = time.Duration(5+rng.IntN(46)) * time.Millisecond
	}
}

func pick(n int) Behaviour {
	for _, w := range weights {
		if n < w.w {
			return w.b
		}
		n -= w.w
	}
	return Success
}

func (r *run) declare() error {
	err := faults.OnChannel(r.cfg.BrokerURL, func(ch *amqp.Channel) error { return runtime.DeclareTopology(ch, r.spec) })
	if err != nil {
		return fmt.Errorf("declare on RabbitMQ at %s: %w", r.cfg.BrokerURL, err)
	}
	return nil
}

func (r *run) deleteQueues() {
	conn, err := amqp.Dial(r.cfg.BrokerURL)
	if err != nil {
		return
	}
	defer conn.Close()
	for _, d := range declarations(r.spec) {
		for _, q := range []string{d.Name, d.Name + ".faults-aside"} {
			if ch, err := conn.Channel(); err == nil {
				_, _ = ch.QueueDelete(q, false, false, false)
				_ = ch.Close()
			}
		}
	}
}

func (r *run) openDB(ctx context.Context, suffix string) error {
	r.app = "lily-ledger-" + suffix
	r.table = "lily_ledger_" + suffix
	pool, err := pgxpool.New(ctx, r.cfg.PostgresDSN+" application_name="+r.app+" pool_max_conns=40")
	if err != nil {
		return err
	}
	r.pool = pool
	if err := pginbox.Migrate(ctx, pool); err != nil {
		return fmt.Errorf("PostgreSQL at %s: %w", r.cfg.PostgresDSN, err)
	}
	_, err = pool.Exec(ctx, "CREATE TABLE "+r.table+" (message_id text NOT NULL, attempt int NOT NULL, slow bool NOT NULL)")
	if err == nil {
		_, err = faults.Psql(ctx, r.cfg.PostgresDSN, faults.SlowCommitSQL(r.table, 2*time.Second, "NEW.slow"))
	}
	return err
}

func (r *run) closeDB() {
	ctx := context.Background()
	_, _ = r.pool.Exec(ctx, "DROP TABLE "+r.table)
	_, _ = r.pool.Exec(ctx, "DROP FUNCTION "+r.table+"_faults_slow_commit()")
	_, _ = r.pool.Exec(ctx, "DELETE FROM lily_inbox WHERE consumer = $1", r.spec.Name)
	r.pool.Close()
}

// publish sends every message, confirmed, straight to the main queue, spread
// over PublishOver.
func (r *run) publish() error {
	return faults.OnChannel(r.cfg.BrokerURL, r.publishOn)
}

func (r *run) publishOn(ch *amqp.Channel) error {
	start := time.Now()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	var window []*amqp.DeferredConfirmation
	flush := func() error {
		for _, dc := range window {
			if !dc.Wait() {
				return errors.New("ledger: a publish was nacked")
			}
		}
		window = window[:0]
		return nil
	}
	for i, id := range r.ids {
		if r.cfg.PublishOver > 0 {
			time.Sleep(time.Until(start.Add(r.cfg.PublishOver * time.Duration(i) / time.Duration(len(r.ids)))))
		}
		dc, err := ch.PublishWithDeferredConfirm("", r.spec.Name, true, false,
			runtime.NewPublishing(messageTyp, 1, id, fmt.Appendf(nil, `{"n":%d}`, i)))
		if err != nil {
			return err
		}
		if window = append(window, dc); len(window) == 1000 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// handle is every message's handler: it counts the run, then behaves.
func (r *run) handle(ctx context.Context, d runtime.RawDelivery) error {
	id, attempt := d.MessageID(), d.Attempt()
	r.mu.Lock()
	r.runs[workKey{id, attempt}]++
	r.mu.Unlock()
	switch r.beh[id] {
	case Flaky:
		if attempt == 1 {
			return runtime.Retryable(errors.New("flaky: the first attempt fails"))
		}
	case Refused:
		return runtime.Permanent(errors.New("refused"))
	case Panics:
		return faults.Panics("ledger: this message panics")(ctx, d)
	case Slow:
		time.Sleep(r.slow[id])
	case Hangs:
		if attempt == 1 {
			release := make(chan struct{})
			time.AfterFunc(r.spec.HandlerTimeout+200*time.Millisecond, func() { close(release) })
			return faults.Hangs(release)(ctx, d)
		}
	case InboxWork:
		tx, ok := pginbox.Tx(ctx)
		if !ok {
			return runtime.Permanent(errors.New("no inbox transaction"))
		}
		slow := r.killArmed.CompareAndSwap(true, false)
		_, err := tx.Exec(ctx, "INSERT INTO "+r.table+" (message_id, attempt, slow) VALUES ($1, $2, $3)", id, attempt, slow)
		return err
	}
	return nil
}

// observe keeps every record, and notes the ids whose journey is over.
func (r *run) observe(rec runtime.Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec)
	recs := append(r.byID[rec.MessageID], rec)
	r.byID[rec.MessageID] = recs
	if workAcked(recs) || (rec.Handoff == "confirmed" && rec.Destination == r.spec.DeadLetterQueue) {
		r.done[rec.MessageID] = true
	}
}

// workAcked: the message's records show the ACK of the handler's completed
// work: directly, through the inbox's record of it, or from the runtime's
// record after the ACK of a successful run was lost. A settlement from the
// runtime's record of a handoff is not: the copy carries on.
func workAcked(recs []runtime.Record) bool {
	for _, rec := range recs {
		switch {
		case rec.Path != runtime.PathAcked:
		case rec.Commit == "duplicate", handled(rec):
			return true
		case rec.Handler == "completed earlier" && slices.ContainsFunc(recs, func(e runtime.Record) bool { return e.Attempt == rec.Attempt && handled(e) }):
			return true
		}
	}
	return false
}

// handled: the handler succeeded and its work stands (no failed commit).
func handled(rec runtime.Record) bool {
	return rec.Handler == "ok" && rec.Handoff == "" && rec.Commit != "failed" && rec.Commit != "ambiguous"
}

// The run is the consumers' slog.Handler: of their diagnostics it keeps the
// ACKs never proven and the reasons sessions ended, both logged as warnings.

func (r *run) Enabled(_ context.Context, level slog.Level) bool { return level >= slog.LevelWarn }

func (r *run) Handle(_ context.Context, rec slog.Record) error {
	var stage, id, detail string
	var attempt int
	rec.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "stage":
			stage = a.Value.String()
		case "message_id":
			id = a.Value.String()
		case "attempt":
			attempt = int(a.Value.Int64())
		case "detail":
			detail = a.Value.String()
		}
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	switch stage {
	case "ack-ambiguous":
		r.ambiguous[workKey{id, attempt}]++
	case "intake-lost":
		r.lost = append(r.lost, detail)
	}
	return nil
}

func (r *run) WithAttrs([]slog.Attr) slog.Handler { return r }

func (r *run) WithGroup(string) slog.Handler { return r }

// consume runs consumers through the proxy while faults strike, until every
// message's journey is over or the deadline, then shuts the last one down. A
// restart fault shuts the consumer down and starts a new one, whose process
// memory is empty: what the old one left unresolved meets the inbox, or runs
// again. It returns every consumer's report, in order.
func (r *run) consume(ctx context.Context, url string) ([]*runtime.Report, error) {
	cfg := runtime.Config{
		URL: url, Observe: r.observe, Logger: slog.New(r),
		// Long enough for a first connection on a loaded machine (Run fails
		// when that one does), short enough for a stall to outlast it.
		StepTimeout:   2 * time.Second,
		ShutdownGrace: 5 * time.Second, ForceWindow: time.Second,
		ReconnectMax: 500 * time.Millisecond,
	}
	if r.pool != nil {
		cfg.Inbox = pginbox.New(r.pool, pginbox.Options{LockTimeout: 500 * time.Millisecond})
	}
	published := make(chan error, 1)
	if r.cfg.PublishOver > 0 {
		go func() { published <- r.publish() }()
	}
	faultCtx, stopFaults := context.WithCancel(ctx)
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		r.strike(faultCtx)
	}()
	defer func() {
		stopFaults()
		<-faultsDone
	}()
	r.deadline = time.Now().Add(r.cfg.Deadline)
	var reports []*runtime.Report
	for {
		c, err := runtime.NewConsumer(r.spec, runtime.Routes{{Type: messageTyp, Version: 1, ContentType: "application/json"}: r.handle}, cfg)
		if err != nil {
			return reports, err
		}
		runCtx, stop := context.WithCancel(ctx)
		var rep *runtime.Report
		ran := make(chan error, 1)
		go func() {
			var err error
			rep, err = c.Run(runCtx)
			if rep == nil && err != nil && !refused(err) {
				err = fmt.Errorf("%w: %w", errNeverConnected, err)
			}
			ran <- err
		}()
		restart, err := r.await(ctx, ran, published)
		if errors.Is(err, errNeverConnected) && ctx.Err() == nil {
			stop()
			if err := r.failedStart(ctx, err); err != nil {
				return reports, err
			}
			continue
		}
		if err != nil {
			stop()
			return reports, fmt.Errorf("ledger: %w", err)
		}
		if !restart {
			stopFaults()
			<-faultsDone
		}
		stop()
		if err := <-ran; errors.Is(err, errNeverConnected) {
			if err := r.failedStart(ctx, err); err != nil {
				return reports, err
			}
		} else if err != nil {
			return reports, fmt.Errorf("ledger: Run: %w", err)
		} else {
			r.failedInARow = 0
			reports = append(reports, rep)
		}
		if !restart {
			return reports, nil
		}
	}
}

// errNeverConnected marks a Run that ended because its first connection
// failed: a fault struck while it connected. A 406 is not one: the broker
// refusing the topology is a broken promise, not bad luck.
var errNeverConnected = errors.New("the consumer's first connection failed")

// failedStart counts a consumer that never connected and pauses before the
// next, as a supervisor restarting a process would. Like a supervisor it
// gives up on a consumer that never connects: a fault lasts at most three
// seconds and each failed start at least 100 ms, so fifty in a row are a
// setup error (credentials, vhost).
func (r *run) failedStart(ctx context.Context, err error) error {
	r.failedInARow++
	if r.failedInARow == 50 {
		return fmt.Errorf("ledger: %d consumers in a row never connected: %w", r.failedInARow, err)
	}
	r.mu.Lock()
	r.failedStarts++
	r.mu.Unlock()
	sleep(ctx, 100*time.Millisecond)
	return nil
}

func refused(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed
}

// waitingFor names up to n ids whose journey is not over, with their records.
func (r *run) waitingFor(n int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ids)-len(r.done) > n {
		return ""
	}
	var b strings.Builder
	for _, id := range r.ids {
		if !r.done[id] {
			fmt.Fprintf(&b, "; waiting for %s (%s): %s", id, r.beh[id], paths(r.byID[id]))
		}
	}
	return b.String()
}

// await returns when every id's journey is over or at the deadline, or
// with restart when the restart fault asks for a new consumer; it returns
// an error when the consumer stopped by itself or the publisher failed.
func (r *run) await(ctx context.Context, ran, published <-chan error) (restart bool, err error) {
	deadline := time.After(time.Until(r.deadline))
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	lastProgress := time.Now()
	for {
		r.mu.Lock()
		done, records := len(r.done), len(r.records)
		r.mu.Unlock()
		if done == len(r.ids) {
			return false, nil
		}
		if r.cfg.Progress != nil && time.Since(lastProgress) > 5*time.Second {
			lastProgress = time.Now()
			fmt.Fprintf(r.cfg.Progress, "ledger: %d of %d messages through, %d records, faults %v%s\n", done, len(r.ids), records, r.faultCounts(), r.waitingFor(3))
		}
		select {
		case err := <-ran:
			if err == nil {
				err = errors.New("the consumer stopped by itself")
			}
			return false, err
		case err := <-published:
			if err != nil {
				return false, err
			}
		case <-r.restart:
			return true, nil
		case <-deadline:
			return false, nil
		case <-ctx.Done():
			return false, nil
		case <-tick.C:
		}
	}
}

func (r *run) faultCounts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.faults)
}

// fault is one kind of fault: strike reports whether it struck.
type fault struct {
	name   string
	strike func(ctx context.Context) (bool, error)
}

// strike injects a random fault every FaultEvery on average (between half
// and one and a half of it), one at a time, each healed before the next.
func (r *run) strike(ctx context.Context) {
	if r.cfg.FaultEvery <= 0 {
		return
	}
	kinds := r.faultKinds()
	for {
		pause := r.cfg.FaultEvery/2 + time.Duration(r.rng.Int64N(int64(r.cfg.FaultEvery)))
		if !sleep(ctx, pause) {
			return
		}
		k := kinds[r.rng.IntN(len(kinds))]
		struck, err := k.strike(ctx)
		r.mu.Lock()
		switch {
		case err != nil && ctx.Err() == nil:
			r.faults["harness error: "+k.name+": "+err.Error()]++
		case struck:
			r.faults[k.name]++
		}
		r.mu.Unlock()
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// between draws a duration in [lo, hi).
func (r *run) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.rng.Int64N(int64(hi-lo)))
}

func (r *run) faultKinds() []fault {
	consume, handoff := faults.ConnectionName(r.spec.Name, "consume"), faults.ConnectionName(r.spec.Name, "handoff")
	var armAck, armConfirm atomic.Bool
	fired := make(chan struct{}, 1)
	r.proxy.Intercept(func(f faults.Frame) faults.Action {
		switch {
		case f.Dir == faults.ToBroker && f.Is(faults.BasicAck) && f.Conn == consume && armAck.CompareAndSwap(true, false):
			fired <- struct{}{}
			return faults.CutBefore
		case f.Dir == faults.ToClient && f.Is(faults.BasicAck) && f.Conn == handoff && armConfirm.CompareAndSwap(true, false):
			r.proxy.CutConns(func(name string) bool { return name == consume })
			fired <- struct{}{}
		}
		return faults.Forward
	})
	// armed arms a one-shot frame fault and waits up to 2 s for it to fire.
	armed := func(arm *atomic.Bool) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			select {
			case <-fired:
			default:
			}
			arm.Store(true)
			t := time.NewTimer(2 * time.Second)
			defer t.Stop()
			select {
			case <-fired:
				return true, nil
			case <-t.C:
			case <-ctx.Done():
			}
			return !arm.CompareAndSwap(true, false), nil
		}
	}
	kinds := []fault{
		{"connection cut (proxy)", func(context.Context) (bool, error) { return r.proxy.Cut() > 0, nil }},
		{"ACK dropped, then its connection cut", armed(&armAck)},
		{"consume connection cut after a handoff confirm, before the ACK", armed(&armConfirm)},
		{"stall", func(ctx context.Context) (bool, error) {
			dir := []faults.Direction{faults.ToBroker, faults.ToClient, 0}[r.rng.IntN(3)]
			r.proxy.Stall(dir)
			sleep(ctx, r.between(200*time.Millisecond, 3*time.Second))
			r.proxy.Resume()
			return true, nil
		}},
		{"delay", func(ctx context.Context) (bool, error) {
			r.proxy.Delay(r.between(5*time.Millisecond, 40*time.Millisecond))
			sleep(ctx, r.between(500*time.Millisecond, 2*time.Second))
			r.proxy.Delay(0)
			return true, nil
		}},
		{"connection closed by the broker", func(ctx context.Context) (bool, error) {
			name := []string{consume, handoff}[r.rng.IntN(2)]
			closed, err := faults.CloseConnections(ctx, func(n string) bool { return n == name }, "ledger fault")
			return len(closed) > 0, err
		}},
		{"retry bucket deleted (handoffs returned)", func(ctx context.Context) (bool, error) {
			bucket := declarations(r.spec)[1]
			hold := r.between(300*time.Millisecond, 800*time.Millisecond)
			// Handoffs are held back while the bucket goes: one racing the
			// delete would be confirmed and dropped by the broker.
			r.proxy.Stall(faults.ToBroker)
			time.Sleep(200 * time.Millisecond)
			heal, err := faults.Unroute(r.cfg.BrokerURL, bucket, 20)
			r.proxy.Resume()
			if errors.Is(err, faults.ErrNotEmpty) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			sleep(ctx, hold)
			return true, heal()
		}},
		{"DLQ refusing publishes (handoffs nacked)", func(ctx context.Context) (bool, error) {
			hold := r.between(500*time.Millisecond, 1500*time.Millisecond)
			heal, err := faults.RejectPublishes(context.WithoutCancel(ctx), r.cfg.BrokerURL, r.spec.DeadLetterQueue)
			if err != nil {
				return false, err
			}
			sleep(ctx, hold)
			return true, heal(context.WithoutCancel(ctx))
		}},
	}
	kinds = append(kinds, fault{"consumer restarted (its memory of completed work lost)", func(context.Context) (bool, error) {
		select {
		case r.restart <- struct{}{}:
			return true, nil
		default:
			return false, nil
		}
	}})
	if r.pool != nil {
		kinds = append(kinds, fault{"PostgreSQL backend killed during COMMIT", func(ctx context.Context) (bool, error) {
			r.killArmed.Store(true)
			defer r.killArmed.Store(false)
			pid, err := faults.KillInCommit(ctx, r.cfg.PostgresDSN, r.app, 3*time.Second)
			return pid > 0, err
		}})
	}
	if r.cfg.RestartBroker {
		kinds = append(kinds, fault{"broker restarted (stop_app, start_app)", func(ctx context.Context) (bool, error) {
			return true, faults.RestartBroker(ctx, r.between(time.Second, 3*time.Second))
		}})
	}
	return kinds
}

// found is one copy of a message found in a queue at the end.
type found struct {
	fate    Fate
	attempt int
}

// drain takes every message out of the run's queues, until a whole pass
// finds none (a pass waits out the retry bucket's delay, whose messages move
// to the main queue).
func (r *run) drain() (map[string][]found, error) {
	conn, err := amqp.Dial(r.cfg.BrokerURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	fates := map[string]Fate{r.spec.Name: InMain, r.spec.DeadLetterQueue: InDLQ}
	for _, d := range r.spec.RetryDelays {
		fates[queue.RetryBucket(r.spec.Name, d)] = InBucket
	}
	for q, f := range maps.Clone(fates) {
		fates[q+".faults-aside"] = f // left over only if a heal failed
	}
	out := map[string][]found{}
	for empty := 0; empty < 2; {
		time.Sleep(300 * time.Millisecond)
		got := 0
		for q, fate := range fates {
			for {
				d, ok, err := ch.Get(q, true)
				var ae *amqp.Error
				if errors.As(err, &ae) && ae.Code == amqp.NotFound {
					if ch, err = conn.Channel(); err != nil {
						return nil, err
					}
					break
				}
				if err != nil {
					return nil, err
				}
				if !ok {
					break
				}
				got++
				attempt := 1
				if a, ok := d.Headers["x-lily-attempt"].(int64); ok {
					attempt = int(a)
				}
				out[d.MessageId] = append(out[d.MessageId], found{fate, attempt})
			}
		}
		if got == 0 {
			empty++
		} else {
			empty = 0
		}
	}
	return out, nil
}

// inboxRows counts the business rows each message committed.
func (r *run) inboxRows(ctx context.Context) (map[string]int, error) {
	rows := map[string]int{}
	if r.pool == nil {
		return rows, nil
	}
	res, err := r.pool.Query(ctx, "SELECT message_id, count(*) FROM "+r.table+" GROUP BY message_id")
	if err != nil {
		return nil, err
	}
	defer res.Close()
	for res.Next() {
		var id string
		var n int
		if err := res.Scan(&id, &n); err != nil {
			return nil, err
		}
		rows[id] = n
	}
	return rows, res.Err()
}

// account finds every id's fate and checks every promise.
func (r *run) account(reps []*runtime.Report, queued map[string][]found, rows map[string]int) *Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := &Result{
		Seed: r.cfg.Seed, N: r.cfg.N, Queue: r.spec.Name, Reports: reps,
		Behaviours: map[Behaviour]int{}, Fates: map[Fate]int{}, Faults: maps.Clone(r.faults),
		SecondRuns: map[string]int{}, ExtraCopies: map[string]int{}, FailedStarts: r.failedStarts,
	}
	problem := func(format string, args ...any) { res.Problems = append(res.Problems, fmt.Sprintf(format, args...)) }
	for k := range res.Faults {
		if strings.HasPrefix(k, "harness error") {
			problem("%s", k)
		}
	}
	byID := r.byID
	for _, rec := range r.records {
		if rec.Commit == "duplicate" {
			res.InboxStopped++
		}
	}
	inFlightAtClose := map[string]int{}
	var lost []string
	for _, rep := range reps {
		for _, u := range rep.Unresolved {
			if strings.Contains(u.Reason, "(final abort)") {
				inFlightAtClose[u.MessageID]++
			}
		}
		lost = append(lost, rep.Lost...)
	}
	for _, id := range r.ids {
		b := r.beh[id]
		res.Behaviours[b]++
		recs, copies := byID[id], queued[id]
		acked := workAcked(recs)
		fate := fateOf(copies, acked)
		res.Fates[fate]++
		switch {
		case fate == Lost:
			problem("%s (%s) is lost: in no queue, and no ACK of its work; records: %s", id, b, paths(recs))
		case fate == Acked && b.dead():
			problem("%s (%s) was acked as handled; it should be in the DLQ", id, b)
		case fate == InDLQ && !b.dead() && !slices.ContainsFunc(recs, commitFailed):
			problem("%s (%s) is in the DLQ; records: %s", id, b, paths(recs))
		}
		// Copies beyond one: a confirmed handoff whose original came back, or
		// an ACK never proven whose message came back.
		presences := len(copies)
		if acked {
			presences++
		}
		var because []string
		for _, rec := range recs {
			switch {
			case rec.Handoff == "confirmed" && rec.Path == runtime.PathUnresolved:
				because = append(because, "handoff confirmed, the original's ACK not sent (unresolved)")
			case rec.Handoff == "timed out" || rec.Handoff == "failed":
				// The publish may have reached the queue: only its confirm is missing.
				because = append(because, "handoff "+rec.Handoff+" after its publish (requeued; the copy may exist)")
			}
		}
		for k, n := range r.ambiguous {
			if k.id == id {
				because = append(because, slices.Repeat([]string{"ACK sent, never proven (ambiguous)"}, n)...)
			}
		}
		because = append(because, slices.Repeat([]string{"in flight at the final abort (unresolved)"}, inFlightAtClose[id])...)
		if extra := presences - 1; extra > len(because) {
			problem("%s (%s) is present %d times at the end (%v, acked %v), and only %d explained", id, b, presences, copies, acked, len(because))
		} else {
			for _, why := range because[:max(extra, 0)] {
				res.ExtraCopies[why]++
			}
		}
		if b == InboxWork {
			if rows[id] > 1 {
				problem("%s: the inbox let %d commits of its work through", id, rows[id])
			}
			if fate == Acked && rows[id] != 1 {
				problem("%s was acked as handled, and %d rows of its work committed", id, rows[id])
			}
		}
		res.InboxRows += rows[id]
	}
	// Second runs of one message's attempt.
	for k, n := range r.runs {
		res.HandlerRuns += n
		if n < 2 {
			continue
		}
		// Each run's journey that ended without proof sent the message back
		// once. Journeys of one attempt may overlap (a delivery whose channel
		// was lost still finishes its handler while the broker redelivers),
		// so records are not in the order the runs started: every journey of
		// the attempt counts.
		var because []string
		for _, rec := range byID[k.id] {
			if rec.Attempt == k.attempt && rec.Handler != "" && (rec.Path == runtime.PathRequeued || rec.Path == runtime.PathUnresolved) {
				because = append(because, string(rec.Path)+": "+explain(rec))
			}
		}
		because = append(because, slices.Repeat([]string{"ACK sent, never proven (ambiguous)"}, r.ambiguous[k])...)
		because = append(because, slices.Repeat([]string{"in flight when a consumer closed (unresolved)"}, inFlightAtClose[k.id])...)
		// A later attempt exists once per handoff of the one before that may
		// have reached the bucket: confirmed, or timed out or failed after
		// its publish (then the original was requeued and handed off again).
		copies := 0
		for _, rec := range byID[k.id] {
			if rec.Attempt == k.attempt-1 && rec.Destination != r.spec.DeadLetterQueue &&
				(rec.Handoff == "confirmed" || rec.Handoff == "timed out" || rec.Handoff == "failed") {
				copies++
			}
		}
		because = append(because, slices.Repeat([]string{"another copy of this attempt: a handoff of the attempt before timed out or failed after its publish, and was made again"}, max(copies-1, 0))...)
		if n-1 > len(because) {
			problem("%s attempt %d: the handler ran %d times; only %d earlier journeys ended without proof: %s", k.id, k.attempt, n, len(because), paths(byID[k.id]))
			continue
		}
		for _, why := range because[:n-1] {
			res.SecondRuns[why]++
		}
	}
	for _, why := range append(slices.Clone(r.lost), lost...) {
		if strings.Contains(why, "406") || strings.Contains(why, "PRECONDITION_FAILED") {
			res.Channel406++
		}
	}
	if res.Channel406 > 0 {
		problem("%d channels or connections were closed with 406", res.Channel406)
	}
	return res
}

// declarations lists the queues of spec's topology, as the runtime declares them.
func declarations(spec runtime.QueueSpec) []queue.Declaration {
	return queue.Declarations(queue.Topology{Name: spec.Name, Type: spec.Type, DeadLetterQueue: spec.DeadLetterQueue, RetryDelays: spec.RetryDelays})
}

func fateOf(copies []found, acked bool) Fate {
	for _, want := range []Fate{InDLQ, InBucket, InMain} {
		if slices.ContainsFunc(copies, func(f found) bool { return f.fate == want }) {
			return want
		}
	}
	if acked {
		return Acked
	}
	return Lost
}

func commitFailed(rec runtime.Record) bool {
	return rec.Commit == "failed" || rec.Commit == "ambiguous"
}

// explain names why a journey ended without proof, in a few words.
func explain(rec runtime.Record) string {
	switch {
	case rec.Handoff != "" && rec.Handoff != "confirmed":
		return "handoff " + rec.Handoff
	case rec.Handler == "cancelled":
		return "handler cancelled by the forced shutdown"
	case rec.Commit == "ambiguous":
		return "commit ambiguous"
	case strings.HasPrefix(rec.Reason, "settlement not attempted: "):
		return "settlement not attempted (" + strings.SplitN(strings.TrimPrefix(rec.Reason, "settlement not attempted: "), ":", 2)[0] + ")"
	case strings.HasPrefix(rec.Reason, "settlement ambiguous"):
		return "settlement ambiguous"
	}
	return rec.Reason
}

func paths(recs []runtime.Record) string {
	var b strings.Builder
	for i, rec := range recs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "#%d %s (%s)", rec.Attempt, rec.Path, rec.Reason)
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// String prints the ledger.
func (res *Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "ledger: seed %d, %d messages, queue %s, %s\n", res.Seed, res.N, res.Queue, res.Duration.Round(time.Millisecond))
	fmt.Fprintf(&b, "  behaviours: %s\n", counts(res.Behaviours))
	fmt.Fprintf(&b, "  fates: %s\n", counts(res.Fates))
	fmt.Fprintf(&b, "  lost: %d\n", res.Fates[Lost])
	fmt.Fprintf(&b, "  faults (%d): %s\n", total(res.Faults), counts(res.Faults))
	fmt.Fprintf(&b, "  handler runs: %d; second runs of one attempt: %d: %s\n", res.HandlerRuns, total(res.SecondRuns), counts(res.SecondRuns))
	fmt.Fprintf(&b, "  extra copies at the end: %d: %s\n", total(res.ExtraCopies), counts(res.ExtraCopies))
	fmt.Fprintf(&b, "  inbox: %d rows committed, %d redeliveries stopped as duplicates\n", res.InboxRows, res.InboxStopped)
	fmt.Fprintf(&b, "  406 channel errors: %d\n", res.Channel406)
	if res.FailedStarts > 0 {
		fmt.Fprintf(&b, "  consumers started again after their first connection failed: %d\n", res.FailedStarts)
	}
	for i, rep := range res.Reports {
		first, _, _ := strings.Cut(rep.String(), "\n")
		fmt.Fprintf(&b, "  report %d of %d: %s; %d unresolved listed, %d more counted\n", i+1, len(res.Reports), first, len(rep.Unresolved), rep.Omitted)
	}
	if len(res.Problems) == 0 {
		b.WriteString("  problems: none\n")
	}
	for _, p := range res.Problems {
		fmt.Fprintf(&b, "  PROBLEM: %s\n", p)
	}
	return b.String()
}

func counts[K ~string](m map[K]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[K(k)]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func total[K comparable](m map[K]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
