package runtime

import "context"

// Telemetry is told of each delivery's journey as it happens, with a context
// that lasts from receipt to settlement, and of every publish the runtime
// makes: what a tracer or a meter needs (the telemetry/lilyotel module is
// one). Its methods run on the delivery's goroutine and must be quick; a
// Telemetry left nil costs nothing.
type Telemetry interface {
	// Received opens a delivery's journey, once the guard has read it, and
	// returns the context the journey's later calls get and the handler's
	// context derives from. For a delivery the guard rejected (poison, over
	// the body limit, quarantined), d reads no header and no body: nothing
	// of what made it poison reaches the hook.
	Received(ctx context.Context, queue string, d RawDelivery) context.Context
	// Publish is called before each publish: a retry or DLQ copy (through the
	// default exchange, its routing key the destination queue) with the
	// journey's context, or a Publisher's Send with its caller's. It may add
	// headers to p (trace context, for one). done gets the broker's answer:
	// "confirmed", or what the handoff evidence calls its failure.
	Publish(ctx context.Context, exchange, routingKey string, p *Publishing) (done func(evidence string))
	// Settle is called before the original delivery's ACK ("ack") or NACK
	// ("nack", "requeue"); done gets the settlement evidence ("ack sent",
	// "nack sent", "ambiguous", "not attempted").
	Settle(ctx context.Context, op string) (done func(evidence string))
	// Settled closes the journey with its record. A delivery requeued at
	// the shutdown before it started has a record and no journey: Settled
	// comes alone, with the consumer's context. An ACK found unproven after
	// Settled (its channel lost before the proof) is listed in the Report
	// only.
	Settled(ctx context.Context, r Record)
	// Lost is told each line of Report.Lost as it is written: why a session
	// ended under the consumer, or why a connection attempt after it failed.
	Lost(queue, why string)
}

// ignore is the done of a call no Telemetry is told of.
func ignore(string) {}

// publishing tells t (when set) of p, a publish about to be made, and
// returns p as t left it. Only a copy inside the branch is shared with t, so
// that without a Telemetry p stays on the stack.
func publishing(ctx context.Context, t Telemetry, exchange, routingKey string, p Publishing) (Publishing, func(string)) {
	if t == nil {
		return p, ignore
	}
	seen := p
	done := t.Publish(ctx, exchange, routingKey, &seen)
	return seen, done
}

// settling tells the consumer's Telemetry (when set) of a settlement about to
// be made.
func (c *Consumer) settling(ctx context.Context, op string) func(string) {
	if c.cfg.Telemetry == nil {
		return ignore
	}
	return c.cfg.Telemetry.Settle(ctx, op)
}
