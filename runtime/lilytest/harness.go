package lilytest

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	goruntime "runtime"
	"sync"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/frame"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/guard"
	"github.com/lily-mq/lily/runtime/internal/trial"
)

// Harness is one consumer of one queue, with a fake broker in RabbitMQ's
// place: each Deliver carries a message through the consumer's own journey
// and returns what became of it. Deliveries share the consumer's memory, as
// on the broker: work that completed is remembered, and so are the requeues
// that pace the next one; an Inbox in the Config keeps its claims. Deliver
// calls run one at a time: calls made at once from several goroutines wait
// for one another, in no set order. Close a Harness when the test ends.
//
// A handler may call AnswerHandoffs: its own delivery's copy is answered so
// too. A handler that calls Deliver or Close on its own harness, during its
// delivery, would wait for that delivery, which waits for the handler: the
// call panics, and so, once the delivery is settled, does the Deliver under
// way, on the test's goroutine. So do such calls from the Config's other
// functions that run for the delivery: Scope, the cleanup it returns,
// AfterDelivery, Observe, the Telemetry's methods and the Logger's handler,
// which would wait for their step's timeout, or, having none, for good;
// and from the spec's OrderKey, which would wait for good (the runtime
// logs its panic, as any of OrderKey's, and the delivery goes on). Made
// from a goroutine one of them started and waits for, or by the Inbox's
// methods, the call is not caught: it waits as long as its caller does,
// until the handler's timeout or the step's, or, from Observe, the
// Telemetry or the Logger, for good. Made by a handler past its
// timeout, whose delivery has ended, while another delivery's user code
// runs, or by user code of another harness's delivery while this one's
// Deliver runs on a goroutine of its own, it is refused as if it were this
// one's.
type Harness struct {
	spec     runtime.QueueSpec
	journeys trial.Journeys
	broker   *broker

	mu  sync.Mutex // one delivery at a time; guards tag
	tag uint64
	// current is the delivery under way, which the routes and the broker
	// report to.
	current atomic.Pointer[call]
	closed  sync.Once
}

// call is what one Deliver gathers beside the record.
type call struct {
	mu         sync.Mutex // the settler and a late handler write from their own goroutines
	err        error
	copy       *runtime.Publishing
	settlement string
	// running counts the user code running for the delivery, until it
	// ends: its routes, and the Config's functions the harness watches.
	running int
	ended   bool
	// reentered says which call user code made back into the harness
	// during its delivery, for Deliver to panic with.
	reentered string
}

func (c *call) setErr(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
}

// run runs f, user code of the delivery. Its frame on a goroutine's stack
// tells lock that the goroutine runs user code.
func (c *call) run(f func()) {
	c.add(1)
	defer c.add(-1)
	f()
}

func (c *call) add(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running += n
}

// underWay says whether user code is running for the delivery, and it has
// not ended.
func (c *call) underWay() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running > 0 && !c.ended
}

// New returns the harness of a consumer of spec that dispatches by routes,
// built by runtime.NewConsumer, which checks them as it does for Run.
// cfg's Scope, Inbox, AfterDelivery, Observe, Telemetry and Logger (nil:
// slog.Default()) take part as they would on the broker, and StepTimeout
// bounds the steps they take; NewConsumer checks these as for Run. The
// fields that reach only the broker (URLs, TLS, Credentials, Publisher,
// ReconnectMax) or only a shutdown (ShutdownGrace, ForceWindow: Close
// forces at once) are neither used nor checked.
func New(spec runtime.QueueSpec, routes runtime.Routes, cfg runtime.Config) (*Harness, error) {
	h := &Harness{spec: spec}
	h.broker = &broker{h: h}
	h.AnswerHandoffs(confirmed)
	// The trial uses none of these: cleared, NewConsumer checks none.
	cfg.URLs, cfg.TLS, cfg.ReconnectMax, cfg.ShutdownGrace, cfg.ForceWindow = nil, nil, 0, 0, 0
	c, err := runtime.NewConsumer(h.watchSpec(spec), h.watch(routes), h.watchConfig(cfg))
	if err != nil {
		return nil, err
	}
	h.journeys = trial.Open(c, h.broker)
	return h, nil
}

// watch wraps each route so that the harness keeps what it returned, as it
// returned it.
func (h *Harness) watch(routes runtime.Routes) runtime.Routes {
	out := make(runtime.Routes, len(routes))
	for key, route := range routes {
		if route == nil {
			out[key] = nil // NewConsumer refuses it
			continue
		}
		out[key] = func(ctx context.Context, d runtime.RawDelivery) error {
			return h.handle(ctx, route, d)
		}
	}
	return out
}

// handle runs route for the delivery under way.
func (h *Harness) handle(ctx context.Context, route func(context.Context, runtime.RawDelivery) error, d runtime.RawDelivery) (err error) {
	c := h.current.Load()
	c.run(func() {
		// A call that panics returns nothing: the error an earlier attempt
		// returned must not stand for it.
		c.setErr(nil)
		err = route(ctx, d)
		c.setErr(err)
	})
	return err
}

// watchSpec wraps spec's OrderKey, which runs for a delivery on a
// goroutine of its own, as the intake's, while its Deliver holds the
// harness, so that lock tells it calling back, as it tells a handler.
func (h *Harness) watchSpec(spec runtime.QueueSpec) runtime.QueueSpec {
	if key := spec.OrderKey; key != nil {
		spec.OrderKey = func(headers map[string]any, body []byte) (k string) {
			h.current.Load().run(func() { k = key(headers, body) })
			return k
		}
	}
	return spec
}

// watchConfig wraps the functions of cfg that run for a delivery on
// goroutines of their own while its Deliver holds the harness, Scope (and
// the cleanup it returns) and AfterDelivery, so that lock tells them
// calling back, as it tells a handler. The others (Observe, the Telemetry,
// the Logger) run on Deliver's goroutine, which lock tells by Deliver's
// frame: wrapping each would miss the next the runtime adds.
func (h *Harness) watchConfig(cfg runtime.Config) runtime.Config {
	if scope := cfg.Scope; scope != nil {
		cfg.Scope = func(ctx context.Context, d runtime.RawDelivery) (scoped context.Context, cleanup func(context.Context) error, err error) {
			c := h.current.Load()
			c.run(func() { scoped, cleanup, err = scope(ctx, d) })
			if inner := cleanup; inner != nil {
				// Of this delivery, though it may run once the delivery
				// has ended (after an abandoned handler).
				cleanup = func(ctx context.Context) (err error) {
					c.run(func() { err = inner(ctx) })
					return err
				}
			}
			return scoped, cleanup, err
		}
	}
	if after := cfg.AfterDelivery; after != nil {
		cfg.AfterDelivery = func(ctx context.Context, d runtime.RawDelivery, soFar runtime.Record) (err error) {
			h.current.Load().run(func() { err = after(ctx, d, soFar) })
			return err
		}
	}
	return cfg
}

// runFunc and deliverFunc are call.run's and Deliver's names in a stack
// trace, set by init: Deliver calls inUserCode, which reads them.
var runFunc, deliverFunc string

func init() {
	name := func(f any) string { return goruntime.FuncForPC(reflect.ValueOf(f).Pointer()).Name() }
	runFunc, deliverFunc = name((*call).run), name((*Harness).Deliver)
}

// lock takes h.mu for method, once the delivery under way, if any, has
// ended. It panics when user code of that delivery calls, which would wait
// for the delivery waiting for it: on Deliver's own goroutine (Observe, the
// Telemetry, the Logger), or in call.run on a goroutine of its own. (It
// cannot tell which harness user code is of: that of another harness, or a
// handler of an earlier delivery that outlived its timeout, calling while
// this one's Deliver holds h.mu, is taken for this one's.)
func (h *Harness) lock(method string) {
	if h.mu.TryLock() {
		return
	}
	c := h.current.Load()
	if own, run := inUserCode(); own || run && c != nil && c.underWay() {
		msg := "lilytest: " + method + " called during its own delivery by its handler or a function of its Config, which it would wait for: call it once Deliver has returned"
		if c != nil {
			c.mu.Lock()
			c.reentered = msg
			c.mu.Unlock()
		}
		panic(msg)
	}
	h.mu.Lock()
}

// inUserCode says whether the goroutine calling lock's caller (Deliver or
// Close) runs Deliver (own), which holds its harness, or user code of a
// harness's delivery that call.run runs on a goroutine of its own (run).
func inUserCode() (own, run bool) {
	pcs := make([]uintptr, 1024)
	// Past Callers, inUserCode, lock and the Deliver or Close calling it.
	frames := goruntime.CallersFrames(pcs[:goruntime.Callers(4, pcs)])
	for {
		f, more := frames.Next()
		switch f.Function {
		case deliverFunc:
			return true, false
		case runFunc:
			run = true
		}
		if !more {
			return false, run
		}
	}
}

// Deliver hands p to the consumer as the broker would, and returns once the
// delivery is settled or left unresolved: the guard reads it, dispatch finds
// its route, the Scope, the Inbox claim, the handler under the queue's
// HandlerTimeout, the commit, the cleanup and AfterDelivery run, and the
// runtime's decision table settles it. Unless an Option says otherwise, p
// was published to the queue by name through the default exchange, and is
// not redelivered.
//
// p arrives as the broker delivers it: its headers and timestamp as the
// client decodes them, not as the Go values p holds (an int reads as an
// int32, a time in whole seconds, in the local zone), and without BCC,
// which the broker takes out. Deliver panics on a message no client
// publishes, as a Publisher refuses it before writing: a property or a
// header name over 255 bytes, an expiration the broker does not read as
// milliseconds (it reads "+5000", which another producer may send, though
// a Publisher does not), a reply_to of the bare amq.rabbitmq.reply-to or a
// CC or BCC header that is not an array (on any of these the broker closes
// the channel), a header value of a type AMQP has no word for, an int
// outside the int32 range, which the client would truncate, a NaN or an
// infinity. An x-death RabbitMQ's dead-lettering cannot read, which a
// Publisher refuses but another producer sends and the broker delivers,
// is quarantined as the consumer connection's filter quarantines it: the
// guard reads the filter's stand-in header table, and the message is
// poison, its reason and its DLQ copy as on the broker.
//
// A delivery that is requeued waits the runtime's pause first (250 ms,
// doubling for each earlier requeue of the same message), and a retry on
// an ordered queue (QueueSpec.OrderKey) waits in line for its retry delay,
// as an inbox deferral there waits for its pause, as all do on the broker:
// long RetryDelays make slow tests. A handler past its timeout keeps its
// concurrency slot until it returns: with every slot so held, Deliver waits
// for one as the runtime does, for the queue's settlement budget and one
// StepTimeout, and then requeues the delivery unstarted (PathNotStarted), as
// the runtime does when it recycles the channel. On an ordered queue it
// keeps its order key's turn too, as does a Scope, its cleanup or
// AfterDelivery given up on at its StepTimeout: Deliver of the key's next message waits, before it takes a slot,
// until that user code returns or the earlier delivery's settlement budget
// ends, as the runtime's lane waits. That bounds the wait even for a
// Deliver made by the late handler itself, once its delivery has ended.
func (h *Harness) Deliver(p runtime.Publishing, opts ...Option) Result {
	d, err := delivery(p, h.spec.Name, opts)
	if err != nil {
		panic("lilytest: Deliver: " + err.Error())
	}
	h.lock("Deliver")
	defer h.mu.Unlock()
	h.tag++
	d.DeliveryTag = h.tag
	c := &call{}
	h.current.Store(c)
	rec := h.journeys.Deliver(d).(runtime.Record)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = true
	if c.reentered != "" {
		panic(c.reentered)
	}
	res := Result{Record: rec, Err: c.err, Copy: c.copy, Settlement: c.settlement}
	if rec.Handler == "timed out" {
		// The runtime stopped waiting for the route: what it returns
		// later, even before Deliver does, decides nothing. (A handler is
		// "abandoned" only at the final abort, which a Harness never does.)
		res.Err = nil
	}
	return res
}

// AnswerHandoffs sets what the fake broker says of each retry or DLQ copy
// the consumer publishes from now on, in the words of Record.Handoff:
// "confirmed" (the default), "returned" (unroutable), "nacked", "timed out"
// (the copy was written; no confirm came) or "failed" (the copy was not
// written). It panics on any other word. It does not wait for a Deliver
// under way: called by a handler, it answers the copy of the handler's own
// delivery.
func (h *Harness) AnswerHandoffs(evidence string) {
	ev, ok := answers[evidence]
	if !ok {
		panic("lilytest: AnswerHandoffs: no handoff evidence is called " + evidence)
	}
	h.broker.answer.Store(&ev)
}

// Close ends the consumer: its handlers' context is cancelled, as by a
// forced shutdown, and a later Deliver runs no scope, claim, handler or
// after_delivery and settles nothing, as after the runtime's final abort:
// its Result is unresolved, not started (Observe sees it; the telemetry
// hook, as of any unresolved delivery that never started, is told by
// Settled alone). A handler still
// running past its timeout returns on its own. Close waits for a Deliver
// under way; a second Close does nothing.
//
// So the forced shutdown never meets a delivery under way: no Harness
// shows the decision table's row of a handler cancelled by it (Record's
// Handler "cancelled": requeued, no application retry spent), nor a
// handler abandoned at the final abort. The runtime's broker tests show
// them (TestBrokerForcedCancelSpendsNoRetry,
// TestBrokerFinalAbortAbandonsAStuckHandler).
func (h *Harness) Close() {
	h.lock("Close")
	defer h.mu.Unlock()
	h.closed.Do(h.journeys.Close)
}

// Option changes how Deliver and RawDelivery hand a message over.
type Option struct{ apply func(*amqp.Delivery) }

// Redelivered marks the delivery redelivered, as the broker does when it
// hands back a message that was not settled. The runtime trusts the flag
// for nothing: only the inbox tells a duplicate.
func Redelivered() Option {
	return Option{func(d *amqp.Delivery) { d.Redelivered = true }}
}

// Via says the message was published to exchange with routingKey, which
// the handler reads as RawDelivery.Exchange and RoutingKey.
func Via(exchange, routingKey string) Option {
	return Option{func(d *amqp.Delivery) { d.Exchange, d.RoutingKey = exchange, routingKey }}
}

// Attempt sets the message's attempt header (x-lily-attempt), as the copy
// a retry bucket hands back carries it: Attempt(3) on a queue of three
// attempts tests the last. The guard reads it: one out of bounds makes the
// message poison.
func Attempt(n int) Option {
	return Option{func(d *amqp.Delivery) {
		if d.Headers == nil {
			d.Headers = amqp.Table{}
		}
		d.Headers[guard.HeaderAttempt] = int64(n)
	}}
}

// delivery is p as the broker delivers it from queue, changed by opts, or
// why no client could have published it. Its headers and body are its own,
// as a broker's delivery is decoded afresh: the caller may change p after,
// and a handler still running its delivery sees nothing of it. Its headers
// and timestamp are what the client decodes, not the Go values p holds. It
// has no acknowledger: the runtime settles through the fake channel.
func delivery(p runtime.Publishing, queue string, opts []Option) (*amqp.Delivery, error) {
	if err := frame.CheckProperties(p); err != nil {
		return nil, fmt.Errorf("no client publishes the message: %w", err)
	}
	headers, err := received(p.Headers)
	if err != nil {
		return nil, fmt.Errorf("no client publishes the message: headers: %w", err)
	}
	d := &amqp.Delivery{
		Headers: headers, ContentType: p.ContentType, ContentEncoding: p.ContentEncoding,
		DeliveryMode: p.DeliveryMode, Priority: p.Priority, CorrelationId: p.CorrelationId,
		ReplyTo: p.ReplyTo, Expiration: p.Expiration, MessageId: p.MessageId, Timestamp: stamp(p.Timestamp),
		Type: p.Type, UserId: p.UserId, AppId: p.AppId,
		ConsumerTag: "lilytest", RoutingKey: queue, Body: bytes.Clone(p.Body),
	}
	for _, o := range opts {
		o.apply(d)
	}
	return d, nil
}

// cloneTable copies t deeply: the tables, arrays and byte slices in it too,
// as RawDelivery.Header copies a header's.
func cloneTable(t amqp.Table) amqp.Table {
	if t == nil {
		return nil
	}
	return guard.Detached(t).(amqp.Table)
}
