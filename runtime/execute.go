package runtime

import (
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// execute carries out decide's plans until the delivery is settled or left
// unresolved, adding each step's evidence to o. It returns the plan that chose
// the delivery's path: the handoff rather than the ACK that follows its
// confirm, the settlement rather than "done".
// Every broker step is bounded by the step timeout and the delivery's deadline.
// release (when not nil) frees the work for a redelivery: before a requeue's
// pause, or once remember has kept how the work ended, never earlier, or a
// redelivery could run the handler again in between.
func (c *Consumer) execute(r *run, gen *generation, token uint64, d *amqp.Delivery, env *Envelope, o *Outcome, auth *authority, attempt int, deadline time.Time, release func()) Plan {
	free := func() {
		if release != nil {
			release()
			release = nil
		}
	}
	defer free()
	o.PriorRequeues = r.requeues.count(d.MessageId)
	var chosen Plan
	for {
		plan := decide(*o, attempt, c.spec, time.Until(deadline))
		if plan.Action != ActDone && (plan.Action != ActAck || chosen.Action != ActHandoff) {
			chosen = plan
		}
		// Each settlement step gets its own bound, taken when the step starts
		// (after a requeue's pause, which may outlast one step timeout).
		step := func() time.Time { return stepDeadline(c.cfg.StepTimeout, deadline) }
		switch plan.Action {
		case ActDone, ActLeave:
			c.remember(r, gen, token, d, env, *o, attempt)
			return chosen
		case ActAck:
			c.hooks.beforeAck()
			o.Settlement = auth.ack(step())
			c.hooks.afterAck()
			if o.Settlement.Status == AckSent {
				r.requeues.forget(d.MessageId)
			}
		case ActDeadLetter:
			o.Settlement = auth.nack(step(), false)
		case ActRequeue:
			// The work did not complete: a redelivery of it (its channel was
			// lost) may run during the pause.
			free()
			r.pause(plan.Delay)
			// Counted before the NACK: the redelivery may start before it returns.
			r.requeues.add(d.MessageId)
			o.Settlement = auth.nack(step(), true)
		case ActHandoff:
			if gen.revoked.Load() {
				// A copy published now could never be followed by the ACK: the
				// original would come back and the work would exist twice.
				o.Settlement = SettlementEvidence{Status: SettlementNotAttempted, Detail: "authority revoked before the handoff"}
				break
			}
			o.Handoff = c.handoff(r, token, d, env, *o, plan, deadline)
			c.emit(Event{Stage: StageHandoff, MessageID: sanitize(d.MessageId, 128), Attempt: attempt, Generation: gen.id,
				Handoff: o.Handoff.Status, Detail: o.Handoff.Destination + " " + o.Handoff.Detail})
		}
	}
}

// remember keeps the evidence a later step needs once the journey ends: an
// ACK that was sent waits for its proof; work that completed without a sent
// ACK is remembered, so its redelivery is settled without the handler.
func (c *Consumer) remember(r *run, gen *generation, token uint64, d *amqp.Delivery, env *Envelope, o Outcome, attempt int) {
	work := workKey{d.MessageId, attempt}
	deadLetter := o.Settlement.Status == NackSent && !o.Settlement.Requeue
	if o.Settlement.Status == AckSent || deadLetter {
		ack := sentAck{token: token, work: work, messageID: sanitize(d.MessageId, 128), attempt: attempt, handoff: o.Handoff, deadLetter: deadLetter}
		if !gen.acks.add(ack) {
			c.acksAmbiguous(r, gen, []sentAck{ack}, "the channel ended before the proof")
		}
		return
	}
	if env == nil {
		return // a rejected delivery did no work
	}
	// Completed is what decide would have ACKed: a confirmed handoff, or the
	// handler, the commit, the cleanup and after_delivery all done.
	completed := o.CompletedEarlier || o.Handoff.Status == HandoffConfirmed ||
		(o.Handler.Ran && o.Handler.Kind == 0 && o.Commit != CommitFailed && o.Commit != CommitAmbiguous &&
			o.Cleanup == "" && o.AfterDelivery == "")
	if completed {
		r.completed.add(work)
	}
}

// handoff publishes the failed message's copy to the plan's destination; the
// report learns of the write before it starts, in case it is sealed before
// the journey ends. A panic on the way is a handoff failure like any other.
func (c *Consumer) handoff(r *run, token uint64, d *amqp.Delivery, env *Envelope, o Outcome, plan Plan, deadline time.Time) (ev HandoffEvidence) {
	defer func() {
		if p := recover(); p != nil {
			ev = HandoffEvidence{Destination: plan.Destination, Status: HandoffFailed, Detail: sanitize(fmt.Sprint("panic: ", p), maxCause)}
		}
	}()
	writing := func() bool { return r.report.writingCopy(token, plan.Destination) }
	ev = r.handoff.publish(deadline, plan.Destination, handoffCopy(d, env, o, plan, c.spec.Name, time.Now()), writing)
	if !ev.Published {
		r.report.writingCopy(token, "")
	}
	return ev
}
