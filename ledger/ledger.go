// Package ledger proves that the runtime loses nothing: it publishes N
// messages with unique ids and mixed behaviours, consumes them through the
// fault harness (internal/faults) while random faults strike, shuts the
// consumer down, and then accounts for every id from the queues (drained)
// and the database. The test in this package runs it with at least 1,000
// messages; cmd/soak runs it with 100,000.
package ledger

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/topology"
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
	// On a cluster, it reaches one of its nodes, for the set-up and the
	// drain.
	BrokerURL string
	// Cluster, when set, runs the ledger on a RabbitMQ cluster: quorum
	// queues, the consumers and the publisher given every node's URL, and
	// the faults are the cluster's nodes stopped, killed and started again.
	Cluster *Cluster
	// PostgresDSN, when set, adds the inbox-backed behaviour (pginbox) and
	// the PostgreSQL fault.
	PostgresDSN string
	// FaultEvery is the mean pause between two faults; zero injects none.
	FaultEvery time.Duration
	// RestartBroker adds rabbitmqctl stop_app / start_app to the faults (on
	// a cluster, of each node in turn). It closes every client's connection
	// to the broker: only for a broker no one else uses at the time.
	RestartBroker bool
	// PublishOver spreads the publishing over at least this long, while the
	// consumer runs and faults strike: while a kind of fault has not struck
	// yet, the last 450 messages go on trickling out (one every 200 ms at
	// the most) until every kind has, or two thirds of the Deadline; zero
	// publishes everything before the consumer starts, and holds nothing
	// back.
	PublishOver time.Duration
	// Deadline bounds the run before the shutdown, whatever is left; its
	// last third is left for the journeys to end after the publishing.
	Deadline time.Duration
	// Progress, when set, receives a line every few seconds.
	Progress io.Writer
}

// Result is the ledger.
type Result struct {
	Seed     uint64
	N        int
	Queue    string
	Duration time.Duration
	// NotStarted counts the deliveries a consumer received and requeued
	// at a stop, never started; AbortedInFlight the deliveries a final
	// abort found in flight (a handler abandoned, or not started, or still
	// travelling when the report was sealed).
	NotStarted, AbortedInFlight int
	// Behaviours and Fates count messages; Faults counts faults that struck,
	// by kind, with every kind the run could strike (0 if it never did).
	Behaviours map[Behaviour]int
	Fates      map[Fate]int
	Faults     map[string]int
	// HandlerRuns counts every call of a handler; SecondDeliveries counts the
	// deliveries of one message's attempt beyond the first, by their
	// explanation: runs of its handler, and deliveries that found its work
	// done (inbox duplicates, or settled from the consumer's record).
	HandlerRuns      int
	SecondDeliveries map[string]int
	// ExtraCopies counts a message present more than once at the end (in two
	// queues, or in a queue after its work was acked), by explanation.
	ExtraCopies map[string]int
	// InboxStopped counts redeliveries the inbox ACKed as duplicates without
	// the handler; InboxRows counts the business rows committed.
	InboxStopped, InboxRows int
	// Resent counts sends made again after one that may have left a copy
	// (no confirm, or a nack): each explains an extra copy or second run.
	Resent int
	// Resumes are, by fault, how long after it the consumer acked the first
	// delivery it received after it: how soon consumption resumed.
	Resumes map[string][]time.Duration
	// NodeFaults tell of each node taken down on a cluster, in order: when,
	// by which fault, and how soon consumption resumed after it, or that it
	// did not before the next node went down, or the end (no Resumes entry).
	NodeFaults []string
	// Channel406 counts the broker's 406s: channels or connections closed,
	// and the topology refused, at a reconnect or declared again while
	// consuming.
	Channel406 int
	// FailedStarts counts consumers whose first connection failed under a
	// fault; each was started again, as a process supervisor would.
	FailedStarts int
	// Reports are the shutdown reports, one per consumer (a restart fault
	// starts a new one).
	Reports []*runtime.Report
	// Problems lists every broken promise: a lost message, an unexplained
	// second run or copy, a message in the wrong place, a 406, a queue that
	// still had a consumer or a message unacknowledged when it was drained
	// (what a channel holds unacked is in no queue a drain reads), and every
	// kind of fault that never struck (Faults 0), which the run did not test.
	Problems []string
}

// spec is the queue of one run: its own name, one retry bucket, of type
// typ.
func spec(name, typ string) runtime.QueueSpec {
	return runtime.QueueSpec{
		Name: name, Prefetch: 64, Concurrency: 32, MaxAttempts: 3,
		Topology:     topology.Queue{Type: typ, DeadLetterQueue: name + ".dlq", RetryDelays: []time.Duration{200 * time.Millisecond}},
		MaxBodyBytes: 1024, HandlerTimeout: 500 * time.Millisecond,
	}
}

// newRun is the state of a run of cfg on the queue of spec, its schedule
// seeded, nothing seen yet.
func newRun(cfg Config, spec runtime.QueueSpec) *run {
	return &run{
		cfg: cfg, spec: spec, rng: rand.New(rand.NewPCG(cfg.Seed, 1)),
		beh: map[string]Behaviour{}, slow: map[string]time.Duration{},
		restart: make(chan bool, 1), forced: make(chan *runtime.Report, 1), burst: make(chan int, 1), runs: map[workKey]int{}, succeeded: map[workKey]bool{}, ended: map[ending]bool{}, byID: map[string][]runtime.Record{}, ambiguous: map[workKey]int{}, done: map[string]bool{}, faults: map[string]int{},
		resent: map[string]int{}, arrivals: map[workKey][]arrival{}, refused: map[refusal]int{},
		consumersGone: consumersGone,
	}
}

// arrival is how a delivery came that ran the handler or that the inbox
// settled as a duplicate: the id of the publish that made it (every publish
// of Lily's carries its own, a Send's and a handoff's alike) and whether the
// broker marked it redelivered.
type arrival struct {
	publish     string
	redelivered bool
}

// urls are the broker URLs of the consumers and the publisher.
func (r *run) urls() []string {
	if r.cfg.Cluster != nil {
		return r.cfg.Cluster.URLs
	}
	return []string{r.cfg.BrokerURL}
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
	// asks for a new consumer, the old one stopped with Force when it
	// carries true, and that stop's report sent back on forced.
	deadline time.Time
	restart  chan bool
	forced   chan *runtime.Report
	// burst asks the publisher to send so many messages at once, until
	// handedOut: the publishing is over, and nothing reads it.
	burst     chan int
	handedOut atomic.Bool
	// failedInARow counts consumers in a row that never connected (consume's).
	failedInARow int
	// killArmed: the next inbox-backed handler marks its row so that its
	// COMMIT is slow and the PostgreSQL fault can kill it.
	killArmed atomic.Bool
	// bursting: a forced stop under a burst is under way; every handler
	// takes burstHandling longer (faultForcedUnderBurst).
	bursting atomic.Bool
	// consumersGone is how long the drain waits for the run's queues to
	// have no consumer left.
	consumersGone time.Duration
	// pastDeadline: the consumers were stopped at the deadline, not once
	// the journeys were over; interrupted: once the run's context ended.
	pastDeadline, interrupted atomic.Bool

	mu        sync.Mutex
	runs      map[workKey]int
	succeeded map[workKey]bool // the attempts whose handler returned success
	ended     map[ending]bool  // how the handler's runs of each attempt ended
	// failures are the failure facts of the copies drained at the end,
	// badCopies what was wrong with copies (drain's).
	failures     []failure
	badCopies    []string
	arrivals     map[workKey][]arrival // how each run's and each duplicate's delivery came
	records      []runtime.Record
	byID         map[string][]runtime.Record
	ambiguous    map[workKey]int // ACKs sent, never proven
	lost         []string        // why sessions ended, or the topology was refused
	failedStarts int
	done         map[string]bool // ids whose journey reached its end (acked work, DLQ)
	faults       map[string]int
	resent       map[string]int  // sends made again after one that may have left a copy
	refused      map[refusal]int // handoffs the broker refused, by how and where

	// heldLeft tells of the queues that still had consumers, or messages
	// unacknowledged, at the drain's end (drain's).
	heldLeft []string
	// nodeFaults are the nodes taken down, in order, each with whether and
	// how soon consumption resumed after it.
	downs []nodeDown
}

// Run runs the ledger and returns it; an error means the run could not be
// carried out (no broker, no database), not that a promise broke.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	start := time.Now()
	suffix := fmt.Sprintf("%06x", rand.Uint32()&0xffffff) // the run's own queue, table and application name
	name := fmt.Sprintf("lilyledger.%d.%s", cfg.Seed, suffix)
	typ := topology.Classic
	if cfg.Cluster != nil {
		typ = topology.Quorum // replicated on every node
	}
	r := newRun(cfg, spec(name, typ))
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
	if cfg.PublishOver == 0 {
		if err := r.publish(ctx); err != nil {
			return nil, err
		}
	}
	urls := r.urls()
	if cfg.Cluster == nil {
		// One node: the consumer goes through the frame proxy.
		p, url, err := faults.ListenFor(cfg.BrokerURL)
		if err != nil {
			return nil, err
		}
		defer p.Close()
		r.proxy, urls = p, []string{url}
	}
	reps, err := r.consume(ctx, urls)
	if err != nil {
		return nil, err
	}
	// The consumers have returned, the faults and the publisher with them:
	// nothing needs the proxy now, and the drain closes it first.
	queued, err := r.drain(r.proxy)
	if err != nil {
		return nil, err
	}
	rows, err := r.inboxRows(context.WithoutCancel(ctx))
	if err != nil {
		return nil, err
	}
	e := r.evidence(reps, queued, rows)
	e.reported = []reported{{records: e.records, reports: reps, ambiguous: e.ambiguous, runs: e.runs}}
	res := account(e)
	res.Duration = time.Since(start)
	return res, nil
}
