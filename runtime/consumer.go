package runtime

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/backoff"
	"github.com/lily-mq/lily/internal/frame"
	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime/internal/confirm"
	"github.com/lily-mq/lily/runtime/internal/decide"
	"github.com/lily-mq/lily/runtime/internal/guard"
	"github.com/lily-mq/lily/runtime/internal/memory"
	"github.com/lily-mq/lily/runtime/internal/outcome"
	"github.com/lily-mq/lily/runtime/internal/settle"
	"github.com/lily-mq/lily/runtime/internal/workers"
)

// errCancelled: the broker cancelled the consumer, as it does when the queue
// is deleted, when the node holding a classic queue goes down, and (RabbitMQ
// 4.3) at a quorum queue's consumer timeout. The channel stays healthy.
var errCancelled = errors.New("lily: the broker cancelled the consumer (the queue deleted, its node down, or a consumer timeout)")

// Consumer consumes one queue and settles every delivery by the decision table.
// A Consumer runs once.
type Consumer struct {
	spec   QueueSpec
	policy decide.Policy
	routes Routes
	// reader reads each delivery's envelope by its message's profile.
	reader *guard.Reader
	// inbox is each consumed message's inbox policy, by wire type.
	inbox  map[string]envelope.Inbox
	cfg    Config
	tuning tuning
	ran    atomic.Bool
	// forceNow is closed by Force: the shutdown skips what is left of its grace.
	forceNow  chan struct{}
	forceOnce sync.Once
	hooks     testHooks
	dialer    *dialer
	// links hands out the consuming connection: the consumer's own, or the
	// one shared by the consumers naming the same Publisher.
	links *links
	// running is the consumer's run once Run has begun, for Health.
	running atomic.Pointer[run]
	// served: Serve runs the consumer, so a refusal of its topology at the
	// first connection is retried, not returned.
	served atomic.Bool
	// telemetry is the Config's Telemetry, guarded.
	telemetry hook
	// userSteps counts the steps of user code running (a scope, a claim, a
	// commit, a cleanup, after_delivery), given up at their step or not.
	userSteps atomic.Int64
}

// testHooks let broker tests break the transport at exact moments of a
// delivery's journey. They do nothing outside tests.
type testHooks struct {
	beforeAck, afterAck, beforePublish, afterPublish, beforeCancel, beforeClose, enteredLane func()
	// laneTurn runs on an ordered delivery's worker before it waits for its
	// turn, with the delivery's message_id.
	laneTurn func(messageID string)
	// laneSpent runs on an ordered delivery's worker once its budget is
	// spent while it waits for a slot: it waits on for the recycle.
	laneSpent func()
	// requeuePause runs before the pause that precedes a bounded requeue
	// (the hot-loop guard), with its planned length, and returns the length
	// to wait: a test of the plan need not sit through it.
	requeuePause func(time.Duration) time.Duration
	// acker, when set, wraps each consumer channel's acker.
	acker func(settle.Acker) settle.Acker
}

// NewConsumer checks the queue's spec and dispatch table and returns a consumer
// ready to Run. Generated constructors call it.
func NewConsumer(spec QueueSpec, routes Routes, cfg Config) (*Consumer, error) {
	reader, inbox, err := spec.check(routes)
	errs := []error{err}
	// The budget must carry the handler, then the claim, commit, cleanup and
	// after_delivery steps (and the scope's opening, with a Scope), then a
	// handoff and its ACK. The default grows to it (below) when a step
	// timeout over 7 s (5.6 s with a Scope) outgrows handler timeout + 30s.
	steps := 4
	if cfg.Scope != nil {
		steps = 5
	}
	step := cfg.withDefaults().StepTimeout
	call := spec.HandlerTimeout + time.Duration(steps)*step
	need := call + decide.HandoffReserve
	if spec.SettlementBudget != 0 && spec.SettlementBudget < need {
		errs = append(errs, fmt.Errorf("queue %s: settlement budget %s is under handler timeout + %d step timeouts + %s", spec.Name, spec.SettlementBudget, steps, decide.HandoffReserve))
	}
	if err := cfg.validate(cfg.Publisher == nil); err != nil {
		errs = append(errs, err)
	}
	if cfg.Publisher != nil && closed(cfg.Publisher.conn.Closing()) {
		// Every handoff would fail, and its delivery be requeued, for good.
		errs = append(errs, errors.New("Config.Publisher has been closed: close it after the consumers' Run returns"))
	}
	if slices.ContainsFunc(spec.Messages, func(m envelope.Message) bool { return m.Inbox == envelope.InboxRequired }) && cfg.Inbox == nil {
		errs = append(errs, fmt.Errorf("queue %s requires an inbox (Config.Inbox)", spec.Name))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if spec.SettlementBudget == 0 {
		spec.SettlementBudget = max(spec.budget(), need)
		if spec.OrderKey != nil && spec.MaxAttempts > 1 {
			// A retry waits in line: the budget carries every attempt, each
			// call with its steps at this consumer's step timeout.
			park := queue.ParkBudget(spec.HandlerTimeout, spec.Topology.RetryDelays, spec.MaxAttempts, steps, step)
			spec.SettlementBudget = max(spec.SettlementBudget, min(park, queue.MaxDuration))
		}
	}
	nothing := func() {}
	policy := spec.policy()
	// Another run of the pipeline: the handler and the steps around it.
	policy.CallCost = call
	cfg = cfg.withDefaults()
	own := &dialer{cfg: cfg, name: spec.Name}
	links := &links{dialer: own}
	if cfg.Publisher != nil {
		links = cfg.Publisher.consuming
	}
	return &Consumer{
		spec: spec, policy: policy, routes: routes, reader: reader, inbox: inbox,
		cfg: cfg, tuning: defaultTuning, forceNow: make(chan struct{}), dialer: own, links: links,
		telemetry: hook{t: cfg.Telemetry, log: cfg.Logger, queue: spec.Name},
		hooks: testHooks{beforeAck: nothing, afterAck: nothing, beforePublish: nothing, afterPublish: nothing, beforeCancel: nothing, beforeClose: nothing, enteredLane: nothing,
			laneTurn: func(string) {}, laneSpent: nothing, requeuePause: func(d time.Duration) time.Duration { return d }},
	}, nil
}

// Force asks a stopping consumer to end its cooperative window now: handlers'
// contexts are cancelled at once, even while intake is still stopping (a
// second SIGINT/SIGTERM does this). A Force once Run has begun, before its
// stop, is kept for the stop: the caller may cancel Run's context and Force
// before Run sees the cancel. A Force before Run does nothing: there is no
// stop to hasten, and a Run begun later, maybe much later, gets its
// cooperative window.
func (c *Consumer) Force() {
	if c.ran.Load() {
		c.forceOnce.Do(func() { close(c.forceNow) })
	}
}

// The runtime remembers two things per process, each in a bounded memory that
// forgets its oldest keys first once full:
//
//   - requeues per message id (or, for a message without one, a fingerprint:
//     see requeueKey), to pace the next requeue (a guard, not a ledger);
//   - work completed whose ACK is ambiguous or was never sent, per message id
//     and attempt, so that a redelivery is settled from the record instead of
//     running the handler again.
const (
	requeueMemorySize   = 4096
	completedMemorySize = 65536
)

// run is the state of one Run, across reconnections.
type run struct {
	conn      *confirm.Conn // the handoffs', or the Publisher's
	handoff   handoffs
	workers   *workers.Pool
	requeues  *memory.Recent[string]
	completed *memory.Recent[memory.Work]
	busy      memory.Busy
	report    *reportBuilder
	slots     chan struct{} // bounds the deliveries in flight, across generations
	lanes     lanes         // serialize the deliveries of each order key
	// ending bounds the settled journeys whose telemetry ends, observer
	// and log run on after they left their slot: as many as the prefetch.
	ending chan struct{}
	// work is the handlers' parent context, cancelled at the force notification.
	work  context.Context
	force context.CancelFunc
	// aborted is closed at the final abort: nothing waits for handlers after it.
	aborted chan struct{}
	// stopping is closed when intake stops; requeue pauses end early then.
	stopping chan struct{}
	// stopCancelled is closed once stop intake's cancel of the consuming
	// session has returned (answered, or failed), or as the shutdown begins
	// when no session consumed: a requeue decided at the stop, on any of the
	// run's sessions, waits for it (awaitCancelAtStop), or the broker could
	// hand the message straight to the consuming session.
	stopCancelled     chan struct{}
	stopCancelledOnce sync.Once
	// stopAt is when intake began to stop, from which the grace counts (the
	// Run goroutine's alone).
	stopAt   time.Time
	stopOnce sync.Once
	// closeBy is when the shutdown's close phase ends at the latest (the
	// Run goroutine's alone).
	closeBy time.Time
	// forced is the force window a Force started while intake stopped; nil
	// when none did (written before stopIntake returns, then the Run
	// goroutine's alone).
	forced     *forceWindow
	handlers   handlerCount
	deliveries sync.WaitGroup // delivery goroutines
	// waiting counts the deliveries waiting for their order key or a slot,
	// across sessions: a lost session's too, which no stop of intake
	// requeues. The report waits for them before it is sealed.
	waiting  sync.WaitGroup
	retiring sync.WaitGroup // sessions whose intake ended, until they close
	mu       sync.Mutex     // guards generations and generated
	// generations are the channels' generations not yet revoked; generated
	// counts every generation made, for their ids.
	generations []*settle.Generation
	generated   uint64
	// consuming is the session whose intake runs now; nil between sessions.
	consuming atomic.Pointer[session]
	// ended says why Run returned, for Health; nil while it runs.
	ended atomic.Pointer[string]
	// refusal is why the broker refused the topology at the last attempt
	// to reconnect, for Health; nil once a session opens.
	refusal atomic.Pointer[string]
	// reopening is why the last session ended while its connection lived
	// on (the broker cancelled the consumer, Lily recycled the channel),
	// for Health; nil once a session opens, or a reconnect fails otherwise.
	reopening atomic.Pointer[string]
	// unserved is why the last attempt to open a session failed after a
	// node took its connection (a step not answered, the connection closed
	// under the opening, the queue's home node down), for Health; nil once
	// a session opens, or an attempt fails at the dial or the login.
	unserved atomic.Pointer[string]
	// drifted is why the broker refused the topology when a consuming
	// session declared it again, or a session opened past an external
	// exchange found missing (drift.go), for Health; nil once taken.
	drifted atomic.Pointer[string]
	// consumed is set once a session of the run has consumed: a session
	// opening after it goes on past an external exchange found missing
	// (Consumer.open).
	consumed atomic.Bool
	// lastSettled is when a delivery last ended settled (Unix ns).
	lastSettled atomic.Int64
	stuck       stuckHandlers
	// failing is the latest failure of a handoff to each destination, for
	// Health.
	failing handoffFailures
}

// handoffs publishes a consumer's retry and DLQ copies: a confirm.Publisher
// on the broker, or a test harness's recorder.
type handoffs interface {
	Publish(b confirm.Bounds, exchange, key string, msg amqp.Publishing, writing func() error) outcome.HandoffEvidence
	CloseBy(by time.Time)
}

// pause waits d, and reports whether it did: it ends sooner once the
// consumer is stopping, or once lost (the delivery's channel) is closed.
// Then no redelivery will reach this consumer, or the delivery can no
// longer be settled, so there is no loop to pace, and a retry in line goes
// back to its place in the queue before its key's later messages, which
// intake's stop requeues too.
func (r *run) pause(d time.Duration, lost <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.stopping:
	case <-lost:
	}
	return false
}

// cancelledAtStop says stop intake's cancel has returned, or that there
// was none to send.
func (r *run) cancelledAtStop() { r.stopCancelledOnce.Do(func() { close(r.stopCancelled) }) }

func (r *run) newGeneration() *settle.Generation {
	r.mu.Lock()
	defer r.mu.Unlock()
	// A revoked generation needs nothing more of revokeAll: dropped, it no
	// longer keeps its settler, channel and connection for the life of the
	// run, a run whose broker comes and goes for weeks included.
	r.generations = slices.DeleteFunc(r.generations, (*settle.Generation).Revoked)
	r.generated++
	g := &settle.Generation{ID: r.generated}
	r.generations = append(r.generations, g)
	return g
}

// revokeAll revokes every generation's authority: the final abort.
func (r *run) revokeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.generations {
		g.Revoke()
	}
}

// Run connects, declares the queue's topology and consumes until ctx is done,
// then shuts down in phases and returns the report. A lost channel or
// connection is reconnected with jittered backoff; in-flight deliveries of the
// lost channel become unresolved and the broker redelivers them. When the
// broker cancels the consumer (the queue was deleted, its node went down, a
// consumer timeout), a delivery stays unsettled past its budget, or a quorum
// queue starves the channel, the channel is healthy: what is in flight on it
// settles there while a new
// session declares the topology again and consumes. Run returns an error when
// the first connection fails, the broker's refusal of the topology among its
// causes (406, 404 for an external exchange or queue that does not exist,
// 403 for a declare or consume not permitted, 405 for a queue another
// connection holds exclusively; not under Serve, below),
// or when it is called twice. A refusal after the consumer ran (an external
// queue deleted, a queue declared again with other arguments) is what an
// operator mends: Run retries it with the backoff, logging each at error and
// not ready meanwhile, and other consumers run on. An external exchange
// deleted is not: a session opening after the consumer ran declares past
// it, consumes, and tells it as a drift, ready. Under Serve a refusal at
// the first connection is retried so too, so that one queue's deployment
// stops no other, and so is a first connection whose declare or consume a
// node that took it did not answer within a step (a quorum queue without a
// leader), or whose connection closed under it after the login (a network
// blip, a node restarting): retried as after a loss. A ctx that ends before
// the first connection is a clean stop: an empty report and no error.
func (c *Consumer) Run(ctx context.Context) (rep *Report, err error) {
	if !c.ran.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("lily: the Consumer of %s runs once", sanitize.Text(c.spec.Name, maxShortText))
	}
	r := c.newRun()
	c.running.Store(r)
	defer func() { r.ended.Store(endedWith(err)) }()
	// From the moment intake is to stop, not only once the shutdown's
	// phases begin: a second signal during the cancel is not lost. No
	// goroutine waits for ctx meanwhile: an idle consumer costs one less.
	// Run returns once the watch is unregistered, never before it: a
	// signal sent then is the program's, even for a ctx done at the start.
	ended, gone := make(chan struct{}), make(chan struct{})
	watching := context.AfterFunc(ctx, func() {
		defer close(gone)
		defer c.forceOnSignal()()
		<-ended
	})
	defer func() {
		close(ended)
		if !watching() {
			<-gone
		}
	}()
	// Closed for the ends that bypass the shutdown; after one, by the end of
	// its close phase, which began closing them: Run returns within it.
	defer func() {
		by := r.closeBy
		if by.IsZero() {
			by = time.Now().Add(c.cfg.StepTimeout)
		}
		c.closeHandoffs(r, by)
	}()
	defer r.workers.Close()
	s, err := c.connect(ctx, r)
	failures := 0
	if err != nil {
		if ctx.Err() != nil {
			// Stopped before the first connection: nothing was taken, so
			// there is nothing to settle and nothing failed.
			return c.shutdown(r, nil), nil
		}
		switch last := lastAttempt(err); {
		case unavailable(last), (stalled(last) || dropped(last)) && c.served.Load():
			// The deployment is right, the queue out of reach for now:
			// retried as after a loss, so that a Serve's other queues run on.
			// Alone, a step that does not answer, or a connection that
			// closed under the opening, fails the start, as a dial that
			// does not answer or is cut: the supervisor sees it.
			c.openFailed(r, err)
		case refused(last) && c.served.Load():
			// One queue's deployment is wrong: waited for as a refusal
			// after a start is, so that it stops no other queue of the Serve.
			c.refused(r, err)
		default:
			r.force()
			return nil, err
		}
		if s, failures = c.reconnect(ctx, r, failures); s == nil {
			return c.shutdown(r, nil), nil
		}
	}
	for {
		r.consuming.Store(s)
		r.consumed.Store(true)
		err = c.consume(ctx, r, s)
		r.consuming.Store(nil)
		if err == nil {
			return c.shutdown(r, s), nil
		}
		if errors.Is(err, errCancelled) || errors.Is(err, errRecycled) || errors.Is(err, errStarved) {
			why := strings.TrimPrefix(err.Error(), "lily: ")
			r.reopening.Store(&why)
			c.intakeLost(r, s.gen.ID, err)
			c.retire(r, s)
		} else {
			c.lost(r, s, err)
		}
		// The backoff starts over only after a session that lived a while: a
		// message that kills every connection must not make reconnects hot.
		if time.Since(s.started) > c.cfg.ReconnectMax {
			failures = 0
		}
		if s, failures = c.reconnect(ctx, r, failures); s == nil {
			return c.shutdown(r, nil), nil
		}
	}
}

// reconnect opens a session after the last one ended, or after a first
// connection that found the queue out of reach, waiting a backoff before
// each attempt: failures counts those made so far. It returns nil when ctx
// ends first.
func (c *Consumer) reconnect(ctx context.Context, r *run, failures int) (*session, int) {
	for {
		failures++
		wait := backoff.Wait(failures, c.tuning.reconnectMin, c.cfg.ReconnectMax)
		c.emit(event{stage: stageReconnect, detail: fmt.Sprintf("attempt %d in %s", failures, wait.Round(time.Millisecond))})
		if !backoff.Sleep(ctx, wait) {
			return nil, failures
		}
		s, err := c.connect(ctx, r)
		switch {
		case err == nil:
			r.refusal.Store(nil)
			r.reopening.Store(nil)
			r.unserved.Store(nil)
			if len(s.missing) > 0 {
				// Opened past an external exchange found missing: told as a
				// drift, before the session consumes and Health is ready.
				c.drifted(r, s.gen.ID, s.missing, func() bool { return true })
			} else {
				c.mended(r)
			}
			return s, failures
		case ctx.Err() != nil:
			return nil, failures
		case refused(lastAttempt(err)):
			c.refused(r, err)
		default:
			// Not refused this time: Health says why no longer.
			r.refusal.Store(nil)
			r.reopening.Store(nil)
			c.openFailed(r, err)
		}
	}
}

// openFailed records an attempt to open a session that failed other than by
// a refusal. When a node took its connection and a step of the opening
// failed, Health tells the cause: the broker is there, and an operator sent
// to the network would look in the wrong place.
func (c *Consumer) openFailed(r *run, err error) {
	detail := c.intakeEnded(r, 0, stageLost, err)
	var se *servedError
	if !errors.As(lastAttempt(err), &se) {
		r.unserved.Store(nil)
		return
	}
	r.unserved.Store(&detail)
}

// unavailable reports whether a first connection failed for the queue
// alone, on a broker that served it: RabbitMQ's 404 for a durable classic
// queue whose home node is down ("down or inaccessible"), which no
// deployment can mend and the node's return does.
func unavailable(err error) bool {
	return isCode(err, amqp.NotFound) && !errors.Is(err, errExternalMissing)
}

// retire lets a session whose intake ended on a healthy channel finish: its
// deliveries in flight settle on it; then (or at the final abort) it closes
// cleanly, which proves its ACKs and hands back to the broker whatever it
// left unresolved.
//
// A channel lost meanwhile ends no consume, whose return has a consuming
// session's loss judged (lost) before the next session opens: the new
// session consumes already, and the broker hands it at once what the lost
// channel held, an ACK cut off on its way among them. So the unproven ACKs
// are judged ambiguous as soon as the channel's end is seen, not at the
// close, after the deliveries still in flight: their work is remembered
// before its redelivery can run the handler again.
//
// An ordered queue's intake ends on the broker's cancel once the client's
// buffer is in the lanes, so deliveries may still wait on the retired
// session for their order key or a slot. Its prover still watches them: when
// one has waited its budget and a step, they are requeued in their lanes'
// order, as on the consuming session at a recycle (the broker has cancelled
// the consumer already), rather than wait on for a slot, holding their
// messages, to start with their budgets spent.
func (c *Consumer) retire(r *run, s *session) {
	// The channel is fed nothing now: its prover must not take that for
	// starvation, whose recycle would requeue the waiters before their
	// bound.
	s.retired.Store(true)
	r.retiring.Add(1)
	go func() {
		defer r.retiring.Done()
		settled, outlived, ended := waitChan(&s.inflight), s.outlived, s.chEnded
		for waiting := true; waiting; {
			select {
			case <-settled:
				waiting = false
			case <-r.aborted:
				waiting = false
			case <-outlived:
				s.endWaiting()
				outlived = nil
			case <-ended:
				// Only a loss closes the channel before closeSession does.
				c.acksAmbiguous(r, s.gen, s.gen.Acks.Close(), "the channel was lost before the proof")
				ended = nil
			}
		}
		c.closeSession(r, s, time.Now().Add(c.cfg.StepTimeout))
	}()
}

// refused reports whether the broker refused the topology itself: a 406,
// the 404 of an external exchange or queue that does not exist, the 403
// of a declare or consume the user is not permitted, or of a consume of a
// queue another connection consumes exclusively, or the 405 of a queue
// another connection declared exclusive (on the channel: a login or a
// virtual host refused is the connection's, and credentials may change by
// the next attempt). No retry mends that alone; an operator, the holder,
// or the owner of what is external, does.
func refused(err error) bool {
	if errors.Is(err, errExternalMissing) {
		return true
	}
	var ae *amqp.Error
	return errors.As(err, &ae) && (ae.Code == amqp.PreconditionFailed ||
		(ae.Code == amqp.AccessRefused || ae.Code == amqp.ResourceLocked) && ae.Recover)
}

// frameSize is the frame size Lily's connections ask for; the quarantine
// filter negotiates as the client does.
const frameSize = frame.Size

func (c *Consumer) newRun() *run {
	work, force := context.WithCancel(context.Background())
	// Handoffs publish on a connection of their own, or the Publisher's:
	// when the broker blocks publishers (a resource alarm), ACKs on the
	// consuming connection still flow.
	var conn *confirm.Conn
	if c.cfg.Publisher != nil {
		conn = c.cfg.Publisher.conn
	} else {
		conn = confirm.NewConn(func() (*amqp.Connection, net.Conn, func(), error) { return c.dialer.publishing("handoff") }, c.cfg.StepTimeout)
	}
	// A channel of the consumer's own, and a window: no publish of another
	// (a user's send, an outbox row) can fail its handoffs or hold their slots.
	publisher := confirm.New(conn, c.spec.Concurrency)
	publisher.BeforePublish, publisher.AfterPublish = c.hooks.beforePublish, c.hooks.afterPublish
	return &run{
		conn:      conn,
		handoff:   publisher,
		workers:   workers.New(),
		requeues:  memory.New[string](requeueMemorySize, memory.Keyless),
		completed: memory.New[memory.Work](completedMemorySize, memory.Work.Keyless),
		report:    &reportBuilder{r: Report{Queue: c.spec.Name, Started: time.Now(), Counts: map[Path]int{}}, inflight: map[uint64]journey{}},
		slots:     make(chan struct{}, c.spec.Concurrency),
		ending:    make(chan struct{}, c.spec.Prefetch),
		work:      work,
		force:     force,
		stopping:  make(chan struct{}),
		aborted:   make(chan struct{}),
		stuck:     stuckHandlers{slots: c.spec.Concurrency},
		failing:   newHandoffFailures(c.policy),

		stopCancelled: make(chan struct{}),
	}
}

func consumerTag(queue string) string {
	return fmt.Sprintf("lily-%s-%08x", queue, rand.Uint32())
}
