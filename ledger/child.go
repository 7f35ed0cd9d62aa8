package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lily-mq/lily/inbox/pginbox"
	"github.com/lily-mq/lily/internal/pgschema"
	"github.com/lily-mq/lily/outbox/pgoutbox"
	"github.com/lily-mq/lily/runtime"
)

// A child of the process ledger (processes.go) is this program run again
// with childEnv set: a consumer or the outbox relay. It tells the parent
// what it does as events, one JSON line each on its stdout, each written
// with one write: a pipe keeps such a write whole, so a process killed with
// SIGKILL leaves every event it wrote, and none cut short.

// childEnv carries a child's childConfig.
const childEnv = "LILY_LEDGER_CHILD"

// The children's roles.
const (
	consumerRole = "consumer"
	relayRole    = "relay"
)

// childConfig is what a child is told.
type childConfig struct {
	Role, Name string
	N          int
	Seed       uint64
	// AMQP reaches the broker; DSN the database, whose Schema holds the
	// run's inbox, outbox and business table; Queue is the run's queue.
	AMQP, DSN, Schema, Queue string
	App                      string // its connections' application_name
}

// The kinds of event.
const (
	evStarted     = "started"      // SIGTERM now stops it well
	evRun         = "run"          // a handler run starts: ID, Attempt, Publish, Redelivered
	evDuplicate   = "duplicate"    // the inbox settles a delivery as a duplicate: as evRun
	evRecord      = "record"       // a delivery's record: Record
	evWarning     = "warning"      // a consumer's warning or error: Stage, ID, Attempt, Detail
	evProven      = "ack-proven"   // a later reply proved the ACK of ID, Attempt
	evSucceeded   = "succeeded"    // a handler run returned success: ID, Attempt
	evEnded       = "ended"        // how a handler run ended (endedAs): ID, Attempt, Detail
	evReport      = "report"       // Run returned its report: Report
	evFailedStart = "failed-start" // the consumer's first connection failed: Detail
	evError       = "error"        // Run failed otherwise: Detail
)

// event is one line a child writes.
type event struct {
	Kind    string          `json:"kind"`
	ID      string          `json:"id,omitempty"`
	Attempt int             `json:"attempt,omitempty"`
	Stage   string          `json:"stage,omitempty"`
	Detail  string          `json:"detail,omitempty"`
	Record  *runtime.Record `json:"record,omitempty"`
	Report  *runtime.Report `json:"report,omitempty"`

	// Publish and Redelivered say how a run's or a duplicate's delivery
	// came (arrival).
	Publish     string `json:"publish,omitempty"`
	Redelivered bool   `json:"redelivered,omitempty"`
}

// events writes a child's events.
type events struct {
	mu  sync.Mutex
	enc *json.Encoder // on the unbuffered stdout: one write per event
}

func (e *events) emit(ev event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	_ = e.enc.Encode(ev)
}

// RunChild runs this program as a child of RunProcesses when the environment
// says it is one, and reports whether it was. A program that runs the
// process ledger calls it first, and returns when it reports true: a test
// binary from the test that ChildArgs names, a command from its main.
//
// The child runs until SIGTERM or the end of its stdin (the parent let go
// of it, or died), then returns after its service stopped.
func RunChild() (bool, error) {
	raw := os.Getenv(childEnv)
	if raw == "" {
		return false, nil
	}
	var cfg childConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		return true, fmt.Errorf("ledger child: %s: %w", childEnv, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	out := &events{enc: json.NewEncoder(os.Stdout)}
	out.emit(event{Kind: evStarted})
	pool, err := pgschema.Pool(ctx, cfg.DSN, cfg.Schema, cfg.App, 12)
	if err != nil {
		return true, err
	}
	defer pool.Close()
	var rep *runtime.Report
	switch cfg.Role {
	case consumerRole:
		rep, err = runConsumer(ctx, cfg, pool, out)
	case relayRole:
		rep, err = runRelay(ctx, cfg, pool)
	default:
		err = fmt.Errorf("ledger child: no role %q", cfg.Role)
	}
	switch {
	case err == nil:
		out.emit(event{Kind: evReport, Report: rep})
		return true, nil
	case rep == nil && cfg.Role == consumerRole && !refused(err):
		// As consume's errNeverConnected: bad luck under load, which the
		// parent, as a supervisor, answers by starting another.
		out.emit(event{Kind: evFailedStart, Detail: err.Error()})
		return true, nil
	}
	out.emit(event{Kind: evError, Detail: err.Error()})
	return true, err
}

// runConsumer runs a consumer of the run's queue with the ledger's
// behaviours and the PostgreSQL inbox, as consume does, and tells each
// handler run as it starts, each record, and the warnings the ledger reads.
func runConsumer(ctx context.Context, cfg childConfig, pool *pgxpool.Pool, out *events) (*runtime.Report, error) {
	r := newRun(Config{N: cfg.N, Seed: cfg.Seed, PostgresDSN: cfg.DSN}, processSpec(cfg.Queue))
	r.table = workTable
	r.assign() // the parent's behaviours: the same seed
	arrived := func(kind string, d runtime.RawDelivery) {
		k, a := arrivalOf(d)
		out.emit(event{Kind: kind, ID: k.id, Attempt: k.attempt, Publish: a.publish, Redelivered: a.redelivered})
	}
	// As the parent's handler: a success returned after the seal is not
	// said (an abandoned handler's late nil is rolled back).
	var sealed atomic.Bool
	// Said before the runtime commits or ACKs the work: a kill after either
	// leaves it said.
	behave := r.handler(&sealed, func(d runtime.RawDelivery) {
		out.emit(event{Kind: evSucceeded, ID: d.MessageID(), Attempt: d.Attempt()})
	}, func(d runtime.RawDelivery, word string) {
		out.emit(event{Kind: evEnded, ID: d.MessageID(), Attempt: d.Attempt(), Detail: word})
	})
	handle := func(ctx context.Context, d runtime.RawDelivery) error {
		arrived(evRun, d)
		return behave(ctx, d)
	}
	c, err := runtime.NewConsumer(r.spec, runtime.Routes{{Type: messageTyp, Version: 1, ContentType: "application/json"}: handle}, runtime.Config{
		URLs:    []string{cfg.AMQP},
		Observe: func(rec runtime.Record) { out.emit(event{Kind: evRecord, Record: &rec}) },
		// As the parent's afterDelivery: a duplicate's arrival is noted, and
		// a time run out.
		AfterDelivery: func(ctx context.Context, d runtime.RawDelivery, soFar runtime.Record) error {
			if soFar.Commit == "duplicate" {
				arrived(evDuplicate, d)
			}
			if ctx.Err() != nil {
				out.emit(event{Kind: evEnded, ID: d.MessageID(), Attempt: d.Attempt(), Detail: afterLate})
			}
			return nil
		},
		Logger: slog.New(diagnostics{out}),
		Inbox:  pginbox.New(pool, pginbox.Options{LockTimeout: 500 * time.Millisecond}),
		// consume's, but for the force window: no child is forced.
		StepTimeout:   2 * time.Second,
		ShutdownGrace: 5 * time.Second, ForceWindow: time.Second,
		ReconnectMax: 500 * time.Millisecond,
	})
	if err != nil {
		return nil, err
	}
	rep, err := c.Run(ctx)
	sealed.Store(true)
	return rep, err
}

// The relay's settings, the outbox ledger's: a short lease, so that a killed
// relay's rows come back soon, and a step well within four fifths of it.
const (
	relayLease = 2 * time.Second
	relayStep  = 700 * time.Millisecond
)

// runRelay runs the outbox relay, its failures logged to stderr, which the
// parent shows if the process fails.
func runRelay(ctx context.Context, cfg childConfig, pool *pgxpool.Pool) (*runtime.Report, error) {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	p, err := runtime.NewPublisher(runtime.Config{URLs: []string{cfg.AMQP}, StepTimeout: relayStep, ReconnectMax: 500 * time.Millisecond, Logger: logger}, 0)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	opts := pgoutbox.Options{Poll: 50 * time.Millisecond, Lease: relayLease, Batch: 20, MaxBackoff: 500 * time.Millisecond, Logger: logger}
	return pgoutbox.NewRelay(pool, p, opts).Run(ctx)
}

// diagnostics is a consumer's slog.Handler in a child. It passes on the
// lines the ledger's Handle keeps (ACKs never proven, sessions ended, the
// topology refused), for the parent to hand them to it, and each ACK
// proven: those of a killed process that were not are ambiguous, which it
// could not log.
type diagnostics struct{ out *events }

func (w diagnostics) Enabled(context.Context, slog.Level) bool { return true }

func (w diagnostics) Handle(_ context.Context, rec slog.Record) error {
	ev := lineOf(rec)
	switch {
	case ev.Stage == "ack-proven":
		w.out.emit(event{Kind: evProven, ID: ev.ID, Attempt: ev.Attempt})
	case ev.Stage == "ack-ambiguous" || lostStage(ev.Stage):
		w.out.emit(ev)
	}
	return nil
}

func (w diagnostics) WithAttrs([]slog.Attr) slog.Handler { return w }

func (w diagnostics) WithGroup(string) slog.Handler { return w }

// asRecord is a warning event as the slog record the consumer logged, for
// the parent's run.Handle.
func (ev event) asRecord() slog.Record {
	rec := slog.NewRecord(time.Now(), slog.LevelWarn, "lily", 0)
	rec.AddAttrs(slog.String("stage", ev.Stage), slog.String("message_id", ev.ID), slog.Int("attempt", ev.Attempt), slog.String("detail", ev.Detail))
	return rec
}
