package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/frame"
	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime/internal/decide"
	"github.com/lily-mq/lily/runtime/internal/guard"
)

// Telemetry is told of each delivery's journey as it happens, with a context
// that lasts from receipt to settlement, and of every publish the runtime
// makes: what a tracer or a meter needs (the telemetry/lilyotel module is
// one). Its methods run on the delivery's goroutine and must be quick; a
// Telemetry left nil costs nothing. The runtime does not depend on it: a
// panic in a method is recovered and logged, and a nil it returns stands for
// nothing.
type Telemetry interface {
	// Received opens a delivery's journey, once the guard has read it, and
	// returns the context the journey's later calls get and the handler's
	// context derives from. Only the returned context's values are kept:
	// its cancellation and deadline stay the runtime's, which the shutdown
	// needs. For a delivery the guard rejected (poison, over the body limit,
	// quarantined), d reads no header and no body: nothing of what made it
	// poison reaches the hook. A delivery the client had prefetched and that
	// is requeued before it started (at a stop, a recycle) is not told of
	// at all, as the messaging conventions give it no span; the Report has
	// its record. One whose requeue could not be sent (its session lost
	// while it waited, or the consumer aborted first) is unresolved, and
	// told of by Settled alone.
	Received(ctx context.Context, queue string, d RawDelivery) context.Context
	// Publish is called before each publish: a retry or DLQ copy (through the
	// default exchange, its routing key the destination queue, its failure
	// facts in x-lily-failure-* headers) with the journey's context, or a Publisher's
	// Send with its caller's. Only a copy shows failure facts: p leaves out
	// those of a Send (a handler may forward a copy it received), which its
	// message still carries. It may add headers to p (trace context, for
	// one), and must not write into p.Body, the message's own bytes (a retry
	// or DLQ copy's are its delivery's); the runtime keeps only its headers, and those named x-lily-* as
	// they were, and on a retry or DLQ copy also those the queue's envelope
	// profiles read the message's envelope from. One that panics changes
	// nothing: the message goes as it was. Where the headers it left
	// are ones AMQP cannot carry, or ones a consumer's guard would refuse
	// while the message's own are within its limits (one more beside a
	// producer's 64; a copy's at its next attempt, a Send's at the default
	// limits, which no Config changes), the message goes without its
	// changes, and that is logged. done gets the broker's
	// answer: "confirmed", or what the handoff evidence calls its failure,
	// and at, the instant the publisher knew it (the confirm, return or nack
	// arrived, the wait for it timed out, the write failed). For a retry or
	// DLQ copy done is called once the original delivery is settled and its
	// record is in the Report, so that a slow done can neither spend the
	// budget its ACK needs nor keep the delivery in flight for a shutdown to
	// report unsettled: the time between at and the call (the settlement, a
	// requeue's pause, Config.Observe, the other ends) is not the publish's.
	// For a Send, done runs on a goroutine of its own once the answer came;
	// the Send waits for it for one StepTimeout at most, or until its
	// context ends, then returns the answer and leaves done running (logged
	// when the step passed), so that a slow done cannot hold an answer its
	// caller acts on (an outbox relay deletes the confirmed row). As many
	// as the Publisher's window may be left running; past that, a Send
	// waits within its context for one to return before it publishes.
	Publish(ctx context.Context, exchange, routingKey string, p *Publishing) (done func(evidence string, at time.Time))
	// Settle is called before the original delivery's ACK ("ack") or NACK
	// ("nack", "requeue"); done gets the settlement evidence ("ack sent",
	// "nack sent", "ambiguous", "not attempted") and at, the instant the
	// settlement was written or found not attempted, once the record is in
	// the Report, after the publish's done and before Settled.
	//
	// Each start (Received, Publish, Settle) runs on the delivery's
	// goroutine before what it tells of, and its time is the delivery's:
	// a start slower than the budget left leaves the delivery unresolved.
	Settle(ctx context.Context, op string) (done func(evidence string, at time.Time))
	// Settled closes the journey with its record; for an unresolved
	// delivery that never started, which Received was not told of, ctx
	// holds no journey: every unresolved record the Report has but those
	// below reaches Settled. An ACK found unproven after Settled (its
	// channel lost before the proof) is listed in the Report only.
	//
	// The ends (each done, then Settled) run once the delivery has left its
	// concurrency slot, and its order key's lane, so that the deliveries
	// waiting for them do not wait behind a slow end. As many journeys as the
	// queue's prefetch may be ending so at once; past that, a settled
	// delivery keeps its slot until one of them returns: ends steadily
	// slower than the deliveries come slow the consumer to their pace, and
	// the deliveries waiting for a slot may outlive their budgets (requeued
	// not started, the channel recycled). A shutdown waits for the ends as
	// for any journey in flight, until its close step ends.
	Settled(ctx context.Context, r Record)
	// Lost is told each loss as it comes, with its plain reason: why a
	// session ended under the consumer, or why a connection attempt after
	// it failed. Report.Lost tells the same reason, but one that comes again
	// at once only once, in a line that counts it, "<why> (N times in a
	// row)": Lost is told it each time, without the count.
	Lost(queue, why string)
}

// hook is a Config's Telemetry as the runtime calls it: guarded, so that a
// faulty hook cannot keep a delivery from its settlement. Its zero value (no
// Telemetry) does nothing.
type hook struct {
	t     Telemetry
	log   *slog.Logger
	queue string // the consumer's; "" for a Publisher
}

// ownHeaders begins the name of each header of Lily's wire contract
// (envelope/headers.go): a hook may not change them.
const ownHeaders = "x-lily-"

// ignore is the done of a call no Telemetry is told of.
func ignore(string, time.Time) {}

// call calls f, a call of the hook's method, and logs its panic, which the
// runtime goes on without; it reports whether f panicked.
func (h hook) call(method string, f func()) (panicked bool) {
	p := recovered(f)
	if p != nil {
		h.logError(slog.String("method", method), slog.String("detail", "panicked: "+sanitize.Text(fmt.Sprint(p), decide.MaxCause)))
	}
	return p != nil
}

// logError logs what went wrong with the hook, as a diagnostics record of
// stage "telemetry".
func (h hook) logError(attrs ...slog.Attr) {
	head := []slog.Attr{slog.String("stage", "telemetry")}
	if h.queue != "" {
		head = []slog.Attr{slog.String("queue", h.queue), head[0]}
	}
	h.log.LogAttrs(context.Background(), slog.LevelError, "lily", append(head, attrs...)...)
}

// guarded wraps a done the hook returned the same way; nil stands for none.
func (h hook) guarded(method string, done func(string, time.Time)) func(string, time.Time) {
	if done == nil {
		return ignore
	}
	return func(evidence string, at time.Time) {
		h.call(method, func() { done(evidence, at) })
	}
}

// now is the instant a broker's answer is known at, for a done to be told
// of; the zero time, and no clock read, without a hook.
func (h hook) now() time.Time {
	if h.t == nil {
		return time.Time{}
	}
	return time.Now()
}

// received opens a journey. The context the hook returns lends only its
// values: the journey must end when the runtime's own context says, or a
// forced shutdown would not reach the handler.
func (h hook) received(ctx context.Context, queue string, d RawDelivery) context.Context {
	if h.t == nil {
		return ctx
	}
	got := ctx
	h.call("Received", func() { got = h.t.Received(ctx, queue, d) })
	if got == nil || got == ctx {
		return ctx
	}
	if !readable(got) {
		h.logError(slog.String("method", "Received"), slog.String("detail", "returned a context whose values cannot be read; it is ignored"))
		return ctx
	}
	return valuesOf{Context: ctx, values: got}
}

// readable reports whether ctx answers a value lookup without panicking: a
// context that embeds a nil one does not, and the handler's context, built
// on it, would panic where nothing recovers.
func readable(ctx context.Context) bool {
	return recovered(func() { ctx.Value(readableProbe{}) }) == nil
}

type readableProbe struct{}

// valuesOf is a context with the cancellation of its Context and the values
// of values. A lookup that panics in values (for some keys only: readable
// found the others sound) answers nil: the context package looks values up
// on goroutines that recover nothing.
type valuesOf struct {
	context.Context
	values context.Context
}

func (v valuesOf) Value(key any) (value any) {
	recovered(func() { value = v.values.Value(key) })
	return value
}

// publishing tells the hook of p, a publish about to be made, and returns p
// with the headers the hook left, Lily's own (x-lily-*), CC and BCC, the
// broker's records and those named in keep as they were (none where p had
// none). The hook gets copies made
// inside the branch, so that without one p stays on the stack. A
// Publisher's hook (no queue) is shown no failure facts: by them a hook
// tells a handoff's copy, whose destination Lily picked, from a Send, whose
// routing key may take any value. next, for a handoff's copy, holds the
// guard's limits the copy meets at its next attempt; nil for a Send, whose
// message meets those of a consumer it does not know: the default ones,
// which every consumer's guard has (no Config changes them).
func (h hook) publishing(ctx context.Context, exchange, routingKey string, p Publishing, keep []string, next *guard.Limits) (Publishing, func(string, time.Time)) {
	if h.t == nil {
		return p, ignore
	}
	seen := p
	seen.Headers = maps.Clone(p.Headers)
	if h.queue == "" {
		maps.DeleteFunc(seen.Headers, func(k string, _ any) bool { return strings.HasPrefix(k, envelope.HeaderFailurePrefix) })
	}
	done := ignore
	if h.call("Publish", func() { done = h.guarded("Publish", h.t.Publish(ctx, exchange, routingKey, &seen)) }) {
		// A panic stands for nothing: what the hook wrote before it (a
		// header deleted, a trace context half written) is not the
		// message's.
		return p, ignore
	}
	// Nor may it route the publish elsewhere (CC, BCC: a handoff's copy
	// would reach the queues they name), or write the broker's records of
	// a message's life (x-death: the broker would drop a retry copy where
	// its bucket's TTL sends it back).
	kept := func(k string) bool {
		return strings.HasPrefix(k, ownHeaders) || envelope.Routing(k) || envelope.BrokerRecord(k) || slices.Contains(keep, k)
	}
	for k := range seen.Headers {
		if _, had := p.Headers[k]; !had && kept(k) {
			delete(seen.Headers, k)
		}
	}
	if seen.Headers == nil && p.Headers != nil {
		// The hook dropped the table: the publish id and Lily's own still
		// need one.
		seen.Headers = make(amqp.Table, len(p.Headers))
	}
	for k, v := range p.Headers {
		if kept(k) {
			seen.Headers[k] = v
		}
	}
	// A header AMQP or the broker refuses, or headers too large for a frame
	// with the publish id the publisher adds, would fail the publish, and
	// every handoff with it; headers beyond the guard's limits would make
	// a copy poison at its next attempt, and a Send's message at the Lily
	// consumer it reaches (a header of the hook's beside the message's 64,
	// a tracestate past the size the guard counts apart): the hook's
	// headers are dropped instead.
	probe := p
	probe.Headers = seen.Headers
	if err := sendable(probe); err != nil {
		// A Send whose caller wrote a header AMQP cannot carry fails on
		// its own: the hook is not to blame for it. (The hook wrote into
		// a copy: p is as the caller gave it.)
		if sendable(p) == nil {
			h.logError(slog.String("method", "Publish"),
				slog.String("detail", "wrote a header AMQP cannot carry; its headers are ignored: "+sanitize.Text(err.Error(), decide.MaxCause)))
		}
		return p, done
	}
	lim := guard.DefaultLimits
	if next != nil {
		lim = *next
	}
	// A message whose own headers break the limits already is poison to a
	// guard that has them whatever the hook writes (a Send's may be for
	// another consumer): the hook is not to blame for it.
	if reason := guard.CheckHeaders(seen.Headers, lim); reason != "" && guard.CheckHeaders(p.Headers, lim) == "" {
		h.logError(slog.String("method", "Publish"),
			slog.String("detail", "left headers a consumer's guard refuses; its headers are ignored: "+sanitize.Text(reason, decide.MaxCause)))
		return p, done
	}
	p.Headers = seen.Headers
	return p, done
}

// sendable says why p's headers cannot be published, with the publish id
// the publisher adds, or returns nil.
func sendable(p Publishing) error {
	if err := frame.CheckHeaders(p.Headers); err != nil {
		return err
	}
	return frame.CheckSent(p, frame.Size)
}

// settle tells the hook of a settlement about to be made.
func (h hook) settle(ctx context.Context, op string) (done func(string, time.Time)) {
	done = ignore
	if h.t == nil {
		return done
	}
	h.call("Settle", func() { done = h.guarded("Settle", h.t.Settle(ctx, op)) })
	return done
}

// settled closes a journey.
func (h hook) settled(ctx context.Context, r Record) {
	if h.t == nil {
		return
	}
	h.call("Settled", func() { h.t.Settled(ctx, r) })
}

// lost tells the hook of a loss that Report.Lost lists or counts.
func (h hook) lost(queue, why string) {
	if h.t == nil {
		return
	}
	h.call("Lost", func() { h.t.Lost(queue, why) })
}
