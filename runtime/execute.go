package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime/internal/confirm"
	"github.com/lily-mq/lily/runtime/internal/decide"
	"github.com/lily-mq/lily/runtime/internal/guard"
	"github.com/lily-mq/lily/runtime/internal/handoff"
	"github.com/lily-mq/lily/runtime/internal/memory"
	"github.com/lily-mq/lily/runtime/internal/outcome"
	"github.com/lily-mq/lily/runtime/internal/settle"
	"github.com/lily-mq/lily/runtime/internal/step"
)

// execute carries out decide's plans until the delivery is settled or left
// unresolved, adding each step's evidence to o. It returns the plan that chose
// the delivery's path: the handoff rather than the ACK that follows its
// confirm, the settlement rather than "done".
// Every broker step is bounded by the step timeout and the delivery's deadline.
// release (when not nil) frees the work for a redelivery: before a requeue's
// pause, or once remember has kept how the work ended, never earlier, or a
// redelivery could run the handler again in between. A park returns at once,
// with nothing settled and the work still held: the caller waits and runs
// the handler again.
// The telemetry hook's ends of the settlement and of each handoff's publish
// are returned, for the caller to call once the journey's record is in the
// report.
func (c *Consumer) execute(ctx context.Context, r *run, s *session, gen *settle.Generation, token uint64, d *amqp.Delivery, env *guard.Envelope, o *outcome.Outcome, auth *settle.Authority, attempt int, deadline time.Time, release *shares) (_ decide.Plan, hooks ends) {
	free := func() {
		if release != nil {
			release.drop()
			release = nil
		}
	}
	parked := false
	defer func() {
		if !parked {
			free()
		}
	}()
	key := requeueKey(d, env)
	o.PriorRequeues = r.requeues.Count(key)
	var chosen decide.Plan
	for {
		plan := decide.Decide(*o, attempt, c.policy, time.Until(deadline))
		if plan.Action == decide.ActPark {
			parked = true
			return plan, hooks
		}
		if plan.Action != decide.ActDone && (plan.Action != decide.ActAck || chosen.Action != decide.ActHandoff) {
			chosen = plan
		}
		// Each settlement step gets its own bound, taken when the step starts
		// (after a requeue's pause, which may outlast one step timeout).
		stepEnd := func() time.Time { return step.Deadline(c.cfg.StepTimeout, deadline) }
		switch plan.Action {
		case decide.ActDone, decide.ActLeave:
			c.remember(r, gen, token, d, env, *o, attempt)
			return chosen, hooks
		case decide.ActAck:
			c.hooks.beforeAck()
			hooks.settled = c.telemetry.settle(ctx, "ack")
			o.Settlement = auth.Ack(stepEnd())
			hooks.settledAt = c.telemetry.now()
			hooks.settlement = o.Settlement.Status.String()
			c.hooks.afterAck()
			if o.Settlement.Status == outcome.AckSent {
				r.requeues.Forget(key)
			}
		case decide.ActDeadLetter:
			hooks.settled = c.telemetry.settle(ctx, "nack")
			o.Settlement = auth.Nack(stepEnd(), false)
			hooks.settledAt = c.telemetry.now()
			hooks.settlement = o.Settlement.Status.String()
		case decide.ActRequeue:
			// The work did not complete: a redelivery of it (its channel was
			// lost) may run during the pause.
			free()
			r.pause(c.hooks.requeuePause(plan.Delay), gen.Ended())
			// A handler the force cancelled, a retry that waited in line.
			s.awaitCancelAtStop(r)
			// Counted before the NACK: the redelivery may start before it returns.
			r.requeues.Add(key)
			hooks.settled = c.telemetry.settle(ctx, "requeue")
			o.Settlement = auth.Nack(stepEnd(), true)
			hooks.settledAt = c.telemetry.now()
			hooks.settlement = o.Settlement.Status.String()
		case decide.ActHandoff:
			// A copy written once the authority is revoked could never be
			// followed by the ACK: the original would come back and the work
			// would exist twice. So the copy is not written then (the check
			// is made again just before the write, after the waits for a
			// slot or a connection), and nothing more is tried.
			if !gen.Revoked() {
				var done func(string, time.Time)
				o.Handoff, done = c.handoff(ctx, r, gen, token, d, runEnvelope(env, attempt), *o, plan, deadline)
				if c.telemetry.t != nil {
					hooks.published = append(hooks.published, publishEnd{done, o.Handoff.Status.String(), time.Now()})
				}
				if c.logs(stageHandoff) {
					detail := o.Handoff.Destination
					if o.Handoff.Detail != "" {
						detail += " " + o.Handoff.Detail
					}
					c.emit(event{stage: stageHandoff, messageID: idText(d, env), attempt: attempt, generation: gen.ID,
						handoff: o.Handoff.Status, detail: detail})
				}
				// A handoff that failed as the authority was revoked (the
				// consumer's channel lost) tells nothing of its destination.
				if o.Handoff.Status == outcome.HandoffConfirmed || !gen.Revoked() {
					r.failing.note(o.Handoff)
				}
			}
			if !o.Handoff.Published && gen.Revoked() {
				why := "authority revoked before the handoff"
				if o.Handoff.Status != outcome.HandoffNone {
					why = "authority revoked; the copy was not written"
				}
				o.Settlement = outcome.SettlementEvidence{Status: outcome.SettlementNotAttempted, Detail: why}
			}
		}
	}
}

// ends are the telemetry hook's ends of a journey's settlement and of its
// handoffs' publishes, with what each ended in and when. They are called
// once the journey's record is in the report: a hook slow to end its span
// (an exporter that waits for its collector) must neither spend the budget
// the ACK needs nor leave a settled delivery in flight for the final abort
// to report as unsettled. So each is told the instant its answer came: what
// comes between (the settlement after a handoff, a requeue's pause, the
// observer, a place among the ending journeys, the ends before it) is not
// the operation's time.
type ends struct {
	settled    func(string, time.Time)
	settlement string
	settledAt  time.Time
	// published holds a publish for each handoff, in order: a retry
	// handoff that failed is followed by one to the DLQ when a quorum
	// queue's delivery limit is reached (decide's giveBack), and each
	// publish started must end.
	published []publishEnd
	// untold: the hook is told nothing of the delivery, not even Settled:
	// a delivery requeued before it started.
	untold bool
}

// publishEnd is the hook's end of one handoff's publish, the broker's
// answer it ends with, and when the answer came.
type publishEnd struct {
	done     func(string, time.Time)
	evidence string
	at       time.Time
}

// call ends the publishes first, in the order they were made, then the
// settlement: each as its operation ended.
func (e ends) call() {
	for _, p := range e.published {
		p.done(p.evidence, p.at)
	}
	if e.settled != nil {
		e.settled(e.settlement, e.settledAt)
	}
}

// runEnvelope is env as attempt ran it: a retry in line runs a later attempt
// than its envelope says, and its copy's failure facts must say which.
func runEnvelope(env *guard.Envelope, attempt int) *guard.Envelope {
	if env == nil || env.Attempt == attempt {
		return env
	}
	return env.Again(attempt)
}

// remember keeps the evidence a later step needs once the journey ends: an
// ACK that was sent waits for its proof; work that completed without a sent
// ACK is remembered, so its redelivery is settled without the handler.
func (c *Consumer) remember(r *run, gen *settle.Generation, token uint64, d *amqp.Delivery, env *guard.Envelope, o outcome.Outcome, attempt int) {
	// A delivery rejected before any user code (by the guard, or as
	// unsupported) did no work: its ACK, never proven, must not settle a
	// later message that carries its id, a corrected one, from the record.
	var work memory.Work
	if env != nil && o.Rejection == outcome.NotRejected {
		// The work is the delivery's, as a redelivery of it will carry its
		// attempt header, though a retry in line ran it as a later attempt.
		work = workOf(env)
	}
	deadLetter := o.Settlement.Status == outcome.NackSent && !o.Settlement.Requeue
	if o.Settlement.Status == outcome.AckSent || deadLetter {
		ack := settle.SentAck{Token: token, Work: work, MessageID: idText(d, env), Attempt: attempt, Handoff: o.Handoff, DeadLetter: deadLetter}
		if !gen.Acks.Add(ack) {
			c.acksAmbiguous(r, gen, []settle.SentAck{ack}, "the channel ended before the proof")
		}
		return
	}
	if work.Keyless() {
		return
	}
	// Completed is what decide would have ACKed: a confirmed handoff, or the
	// handler, the commit, the cleanup and after_delivery all done.
	completed := o.CompletedEarlier || o.Handoff.Status == outcome.HandoffConfirmed ||
		(o.Handler.Ran && o.Handler.Kind == 0 && o.Commit != outcome.CommitFailed && o.Commit != outcome.CommitAmbiguous &&
			o.Cleanup == "" && o.AfterDelivery == "")
	if completed {
		r.completed.Add(work)
	}
}

// handoff publishes the failed message's copy to the plan's destination,
// unless gen's authority is revoked or the report sealed by the time it is to
// be written; the report learns of the write before it starts, in case it is
// sealed before the journey ends. A panic on the way is a handoff failure
// like any other, but one after the write was cleared may have left the
// copy: it is Published, so the attempt writes no second copy and the
// report lists it as a possible one. It returns the telemetry hook's end of
// the publish, for the caller to call once the original is settled.
func (c *Consumer) handoff(ctx context.Context, r *run, gen *settle.Generation, token uint64, d *amqp.Delivery, env *guard.Envelope, o outcome.Outcome, plan decide.Plan, deadline time.Time) (ev outcome.HandoffEvidence, done func(string, time.Time)) {
	done = ignore
	cleared := false
	defer func() {
		if p := recover(); p != nil {
			ev = outcome.HandoffEvidence{Destination: plan.Destination, Status: outcome.HandoffFailed, Detail: sanitize.Text(fmt.Sprint("panic: ", p), decide.MaxCause), Published: cleared}
		}
		if !ev.Published {
			r.report.writingCopy(token, "")
		}
	}()
	writing := func() error {
		switch {
		case gen.Revoked():
			return errRevokedBeforeCopy
		case !r.report.writingCopy(token, plan.Destination):
			return errSealedBeforeCopy
		}
		cleared = true
		return nil
	}
	p := handoff.Copy(d, env, c.reader.Identity, o, plan, c.spec.Name, time.Now())
	// The copy's envelope is read again at its next attempt, within the
	// guard's limits: the hook may not change the headers it is read by,
	// nor add headers beyond those limits.
	p, done = c.telemetry.publishing(ctx, "", plan.Destination, p, c.reader.Marks, &c.tuning.limits)
	return r.handoff.Publish(handoffBounds(deadline), "", plan.Destination, p, writing), done
}

// handoffBounds bounds the publish of a handoff's copy for a delivery whose
// budget ends at deadline, within decide.HandoffReserve, which it starts
// with at least: the waits before the write (a slot, a connection, a
// blocked broker) end when half of the reserve is left, the wait for the
// confirm when a quarter is. So a copy written at the last moment still has
// a quarter of the reserve for its confirm, and the settlement of the
// original after it, the ACK after a confirm or the requeue after a wait
// given up, always has the last quarter: a confirm that comes at the end of
// its wait must not leave the original unsettled, held until its channel is
// recycled and run again should the process die meanwhile.
func handoffBounds(deadline time.Time) confirm.Bounds {
	return confirm.Bounds{Deadline: deadline.Add(-decide.HandoffReserve / 4), WriteBy: deadline.Add(-decide.HandoffReserve / 2)}
}

// Why a handoff's copy was not written after all.
var (
	errRevokedBeforeCopy = errors.New("not written: the delivery's authority was revoked before the write")
	errSealedBeforeCopy  = errors.New("not written: the consumer closed before the publish")
)
