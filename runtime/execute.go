package runtime

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// execute carries out decide's plans until the delivery is settled or left
// unresolved, adding each step's evidence to o. It returns the plan that chose
// the delivery's path: the handoff rather than the ACK that follows its
// confirm, the settlement rather than "done".
// Every broker step is bounded by the delivery's deadline.
func (c *Consumer) execute(r *run, d *amqp.Delivery, env *Envelope, o *Outcome, auth *authority, attempt int, deadline time.Time) Plan {
	o.PriorRequeues = r.requeues.count(d.MessageId)
	var chosen Plan
	for {
		plan := decide(*o, attempt, c.spec, time.Until(deadline))
		if plan.Action != ActDone && (plan.Action != ActAck || chosen.Action != ActHandoff) {
			chosen = plan
		}
		switch plan.Action {
		case ActDone, ActLeave:
			return chosen
		case ActAck:
			o.Settlement = auth.ack()
			r.requeues.forget(d.MessageId)
		case ActDeadLetter:
			o.Settlement = auth.nack(false)
		case ActRequeue:
			r.pause(plan.Delay)
			// Counted before the NACK: the redelivery may start before it returns.
			r.requeues.add(d.MessageId)
			o.Settlement = auth.nack(true)
		case ActHandoff:
			o.Handoff = c.handoff(r, d, env, *o, plan, deadline)
		}
	}
}

// handoff publishes the failed message's copy to the plan's destination. A
// panic on the way is a handoff failure like any other.
func (c *Consumer) handoff(r *run, d *amqp.Delivery, env *Envelope, o Outcome, plan Plan, deadline time.Time) (ev HandoffEvidence) {
	defer func() {
		if p := recover(); p != nil {
			ev = HandoffEvidence{Destination: plan.Destination, Status: HandoffFailed, Detail: sanitize(fmt.Sprint("panic: ", p), maxCause)}
		}
	}()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	return r.handoff.publish(ctx, plan.Destination, handoffCopy(d, env, o, plan, c.spec.Name, time.Now()))
}
