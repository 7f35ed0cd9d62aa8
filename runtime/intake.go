package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/quarantine"
	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/runtime/internal/decide"
	"github.com/lily-mq/lily/runtime/internal/guard"
	"github.com/lily-mq/lily/runtime/internal/outcome"
	"github.com/lily-mq/lily/runtime/internal/settle"
	"github.com/lily-mq/lily/runtime/internal/step"
)

// consume reads deliveries until ctx is done (then it stops intake and returns
// nil) or the session's intake ends: the broker cancelled the consumer or
// closed the channel, or a delivery outlived its budget and the channel is to
// be recycled; then it says why. Deliveries are read as v, ok := <-ch; each
// runs on a worker once a slot is free. An ordered queue's are read on a
// goroutine of their own (consumeInOrder).
func (c *Consumer) consume(ctx context.Context, r *run, s *session) error {
	if c.spec.OrderKey != nil {
		return c.consumeInOrder(ctx, r, s)
	}
	for {
		select {
		case <-ctx.Done():
			c.stopIntake(r, s, nil)
			return nil
		case <-s.outlived:
			return c.recycle(r, s, nil)
		case received, ok := <-s.deliveries:
			if !ok {
				return c.whyLost(s)
			}
			// The delivery and its slot, in one allocation for the journey.
			in := &intake{d: received, sl: slot{slots: r.slots}}
			d := &in.d
			quarantined := s.quarantined(d)
			receivedAt := time.Now()
			s.gen.Settler.Received(d.DeliveryTag, receivedAt)
			if ok, err := c.awaitSlot(ctx, r, s, d); !ok {
				return err
			}
			if c.spentWaiting(r, s.gen, d, nil, receivedAt) {
				continue
			}
			r.deliveries.Add(1)
			s.inflight.Add(1)
			in.sl.hold()
			r.workers.Run(func() {
				defer r.deliveries.Done()
				defer s.inflight.Done()
				defer in.sl.leave()
				c.process(r, s, s.gen, &in.d, receivedAt, quarantined, nil, &in.sl)
			})
		}
	}
}

// spentWaiting gives back the slot d took and requeues d not started when
// the slot freed only after its budget (handlers past their timeout held
// them all), before the recycle: its handler's result could only be left
// unresolved. received is when its budget began; env is d's envelope when
// intake has read it (an ordered queue's), which its record names it by,
// or nil.
func (c *Consumer) spentWaiting(r *run, gen *settle.Generation, d *amqp.Delivery, env *guard.Envelope, received time.Time) bool {
	if decide.Starts(time.Until(received.Add(c.spec.budget()))) {
		return false
	}
	<-r.slots
	c.notStarted(r, gen, d, env, decide.SpentWaiting)
	return true
}

// awaitSlot takes a concurrency slot for d, received on s, and reports true;
// or false, with what consume returns, when intake ends first: ctx is done
// (the stop), a delivery outlived its budget (the recycle), or the channel
// was lost, which ends the wait at once, not once a long handler returns. A
// consumer cancel leaves the channel healthy: d waits on, as do the
// deliveries the client buffered behind it, until a slot frees or the
// channel is lost after all. The generation's end tells that loss, as it
// does to an ordered queue's waits (laneSlot): the watcher revokes the
// session at its channel's loss, cancel or none before it, and nothing
// else revokes a consuming session before consume returns.
func (c *Consumer) awaitSlot(ctx context.Context, r *run, s *session, d *amqp.Delivery) (bool, error) {
	select {
	case r.slots <- struct{}{}:
		if !s.gen.Revoked() {
			return true, nil
		}
		// Lost as the slot freed: its handler would run for nothing.
		<-r.slots
	case <-ctx.Done():
		c.stopIntake(r, s, d)
		return false, nil
	case <-s.outlived:
		// No slot freed within a delivery's budget (handlers past their
		// timeout hold them): what waits goes back to the broker.
		return false, c.recycle(r, s, d)
	case <-s.gen.Ended():
	}
	c.notStarted(r, s.gen, d, nil, lostWaiting)
	return false, c.whyLost(s)
}

// lostWaiting is why a delivery that waited for a slot did not start.
const lostWaiting = "received but not started: its session was lost while it waited for a slot"

// errRecycled ends a session whose channel holds a delivery past its budget
// and a step: left unresolved, it would stay unacknowledged until the channel
// closes, and from RabbitMQ 4.3 no consumer timeout closes a classic queue's.
var errRecycled = errors.New("lily: a delivery outlived its settlement budget; its channel is recycled")

// recycle stops the session's intake so that its channel can close once the
// deliveries in flight on it have settled (retire): the consumer is cancelled,
// and what was received but not started (held, and what the client had
// buffered) is requeued, or, when the cancel failed, listed unresolved.
//
// A cancel that fails (slow on a quorum queue just after a leader change)
// still retires the session: its channel is healthy, the deliveries in
// flight on it settle there, and the channel's close ends the consumer.
func (c *Consumer) recycle(r *run, s *session, held *amqp.Delivery) error {
	if err := c.cancelIntake(r, s, held, "received but not started before its channel was recycled"); err != nil {
		return fmt.Errorf("%w; its cancel failed, and the channel's close ends the consumer: %w", s.recycled, err)
	}
	return s.recycled
}

// consumeArgs are the consumer's arguments: on a quorum queue, a consumer
// timeout (RabbitMQ 3.12+; a quorum queue's own from 4.3) well past the
// moment Lily recycles the channel itself, so that the broker's acts only if
// Lily's did not (older brokers ignore it).
func (c *Consumer) consumeArgs() amqp.Table {
	if c.spec.Topology.Type != queue.Quorum {
		return nil
	}
	return amqp.Table{"x-consumer-timeout": c.consumerTimeout().Milliseconds()}
}

// consumerTimeout is twice the moment a channel is recycled, and at least a
// minute: the broker looks at its timeouts only now and then. On an ordered
// queue a delivery may first wait behind every other one the prefetch holds
// of its key, each with its own budget, so the broker waits for all of them.
func (c *Consumer) consumerTimeout() time.Duration {
	deliveries := 2
	if c.spec.OrderKey != nil {
		deliveries = c.spec.Prefetch + 1
	}
	return max(time.Duration(deliveries)*c.recycleAfter(), time.Minute)
}

// recycleAfter is how long a delivery may stay unsettled on its channel: its
// budget, and one step for the settlement that ends it.
func (c *Consumer) recycleAfter() time.Duration { return c.spec.budget() + c.cfg.StepTimeout }

// quarantined says why the filter replaced d's content header; its Why is
// "" when it did not. The marker alone proves nothing (a producer can send
// it); the connection's seal beside it does.
func (s *session) quarantined(d *amqp.Delivery) quarantine.Verdict {
	v, _ := s.link.filter.Quarantined(d.Headers)
	return v
}

// stopIntake cancels the consumer, then requeues what was received but not
// started: held, and whatever the client had buffered. After the cancel, so
// the broker does not hand them straight back.
//
// A Force meanwhile starts the force window at once: the cancel may wait a
// step for a broker that answers nothing, and the requeues a step more, which
// a platform's deadline cannot spare. The shutdown then has no cooperative
// window, and the force window counts from the Force.
func (c *Consumer) stopIntake(r *run, s *session, held *amqp.Delivery) {
	r.stopAt = time.Now()
	end := c.phase(r, "stop intake")
	r.stopOnce.Do(func() { close(r.stopping) })
	stopped, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-c.forceNow:
			r.forced = c.startForce(r)
		case <-stopped:
		}
	}()
	_ = c.cancelIntake(r, s, held, "received but not started before shutdown")
	r.cancelledAtStop()
	close(stopped)
	<-watched
	end()
}

// cancelIntake cancels the session's consumer and requeues, as not started
// for why, held and what the client had buffered. Once the cancel is done the
// client closes deliveries after handing over its buffer. A cancel that
// failed leaves held and the buffer unacknowledged until the channel's end:
// the report lists held and what the client has buffered now (takeBuffered),
// and the buffer again before the close.
func (c *Consumer) cancelIntake(r *run, s *session, held *amqp.Delivery, why string) error {
	c.hooks.beforeCancel()
	ctx, cancel := step.Context(c.cfg.StepTimeout, time.Time{})
	defer cancel()
	err := s.call(ctx, func() error { return s.ch.Cancel(s.tag, false) })
	// After the cancel, so that the broker does not hand them straight back.
	s.endWaiting()
	if err != nil {
		// Not requeued: the consumer may still be registered, and a NACK
		// would count toward a quorum queue's delivery limit for nothing.
		s.unrequeued = why + cancelFailed
		if held != nil {
			c.unrequeued(r, s.gen, held, s.unrequeued)
		}
		c.takeBuffered(r, s)
		return err
	}
	// The requeues share one step: behind a write that does not return,
	// each would wait out a step of its own, up to the prefetch's worth.
	// Once it is spent, the rest are listed unresolved at once.
	by := step.Deadline(c.cfg.StepTimeout, time.Time{})
	requeue := func(d *amqp.Delivery) {
		if time.Now().Before(by) {
			c.notStartedBy(r, s.gen, d, nil, why, by, nil)
			return
		}
		c.unrequeued(r, s.gen, d, why+requeuesSpent)
	}
	if held != nil {
		requeue(held)
	}
	if c.spec.OrderKey != nil {
		// What the client buffered came after the deliveries in the lanes:
		// it goes back behind them, read as the intake reads.
		<-c.readInOrder(r, s, nil).done
		return nil
	}
	for d := range s.deliveries {
		s.gen.Settler.Received(d.DeliveryTag, time.Now())
		requeue(&d)
	}
	return nil
}

// requeuesSpent says why a delivery not started was not requeued after a
// cancel that succeeded.
const requeuesSpent = "; not requeued: the requeues before it spent their step; it returns to the queue when the channel closes"

// cancelFailed says why a delivery not started was not requeued: the
// consumer may still be registered, and could be handed it straight back.
const cancelFailed = "; not requeued: the consumer's cancel failed; it returns to the queue when the channel closes"

// handOver is how long takeBuffered waits for the client's goroutine to hand
// over the next delivery it holds: a moment, not a wait for the broker.
const handOver = 10 * time.Millisecond

// takeBuffered lists unresolved what the client has buffered on s's
// deliveries after a cancel that failed, s.unrequeued saying why, without a
// NACK; it waits for nothing the broker has yet to send. Their channel
// returns them to the queue as it closes.
func (c *Consumer) takeBuffered(r *run, s *session) {
	t := time.NewTimer(handOver)
	defer t.Stop()
	for {
		select {
		case d, ok := <-s.deliveries:
			if !ok {
				return
			}
			c.held(r, s, &d)
			t.Reset(handOver)
		case <-t.C:
			return
		}
	}
}

// listWhileClosing lists unresolved, as takeBuffered does, what the client
// holds and what the broker sends s's consumer while its channel closes,
// when the stop's cancel failed: a cancel lost for good waits for its
// answer holding the channel's methods, so the close waits its whole step
// behind it (release then closes the channel beside it, or its
// connection), the consumer still registered and the broker delivering as
// room is made. The func returned ends the listing once the channel is
// released, and takes what the client still holds.
func (c *Consumer) listWhileClosing(r *run, s *session) (stop func()) {
	if s.unrequeued == "" {
		return func() {}
	}
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case d, ok := <-s.deliveries:
				if !ok {
					return
				}
				c.held(r, s, &d)
			case <-done:
				return
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		c.takeBuffered(r, s)
	}
}

// held lists d, taken from s's deliveries after its cancel failed, as
// unrequeued: it stays on the channel, unacknowledged.
func (c *Consumer) held(r *run, s *session, d *amqp.Delivery) {
	s.gen.Settler.Received(d.DeliveryTag, time.Now())
	c.unrequeued(r, s.gen, d, s.unrequeued)
}

// unrequeued lists d, received but not started, unresolved for why, without
// a NACK: it stays unacknowledged on its channel. The hook is told of it as
// of one whose NACK was not sent (notStarted).
func (c *Consumer) unrequeued(r *run, gen *settle.Generation, d *amqp.Delivery, why string) {
	o := outcome.Outcome{Settlement: outcome.SettlementEvidence{Status: outcome.SettlementNotAttempted, Detail: why}}
	rec := newRecord(c.spec, d, idText(d, nil), nil, 0, o, decide.Plan{Reason: why}, 0)
	c.record(r.work, r, gen.ID, 0, rec, o, ends{}, nil, nil)
}

// notStarted requeues a delivery that was received but never started; why
// says what came first. env is the guard's reading of it, which an ordered
// queue makes at intake (its record then names it by its key, as a started
// one's does); nil when the guard has not read it or refused it: on a queue
// without an OrderKey the guard reads a delivery only once it has a slot,
// and its record names it by its message_id as it came (idText). The
// Telemetry hook is told nothing of it once
// requeued: the messaging conventions give a message prefetched and never
// handed to the application no span, and a slow hook would hold each
// requeue of a shutdown's stop in turn. One whose NACK was not sent (its
// session lost, or the consumer aborted first) is unresolved: Settled
// alone tells the hook of it, so that a meter counts every unresolved
// record the report has. The report has its record.
func (c *Consumer) notStarted(r *run, gen *settle.Generation, d *amqp.Delivery, env *guard.Envelope, why string) {
	c.notStartedBy(r, gen, d, env, why, step.Deadline(c.cfg.StepTimeout, time.Time{}), nil)
}

// notStartedBy is notStarted with its NACK's write bounded by by. lane, when
// not nil, leaves the delivery's order key's lane once its record is in the
// report, before Settled, which may be slow, or hang.
func (c *Consumer) notStartedBy(r *run, gen *settle.Generation, d *amqp.Delivery, env *guard.Envelope, why string, by time.Time, lane func()) {
	o := outcome.Outcome{Settlement: settle.NewAuthority(d.DeliveryTag, gen).Nack(by, true)}
	rec := newRecord(c.spec, d, idText(d, env), nil, 0, o, decide.Plan{Reason: why}, 0)
	if o.Settlement.Status == outcome.NackSent {
		rec.Path = PathNotStarted
	}
	c.record(r.work, r, gen.ID, 0, rec, o, ends{untold: rec.Path != PathUnresolved}, nil, lane)
}

// whyLost explains why the broker stopped delivering, as the watcher saw it.
func (c *Consumer) whyLost(s *session) error {
	select {
	case <-s.lost:
		return s.why
	case <-time.After(time.Second):
		return errors.New("lily: the broker stopped delivering")
	}
}
