// Package decide holds the user's decision table: from the evidence gathered
// about a delivery, its attempt, its queue's retry policy and the budget it has
// left, the next step the executor takes. It is pure: it reads no clock and
// touches no broker, so the table is tested row by row.
package decide

import (
	"strconv"
	"time"

	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime/internal/outcome"
)

// Action is the next thing the executor does with a delivery.
type Action int

// The actions of a plan.
const (
	// ActAck acknowledges the original delivery.
	ActAck Action = iota + 1
	// ActHandoff publishes a copy (mandatory, confirmed) to Plan.Destination;
	// the executor then decides again with the handoff evidence.
	ActHandoff
	// ActRequeue waits Plan.Delay, then NACKs the original with requeue.
	ActRequeue
	// ActDeadLetter NACKs the original without requeue: the broker dead-letters it.
	ActDeadLetter
	// ActLeave stops without settling: the delivery stays unresolved and the
	// broker redelivers it when the channel closes.
	ActLeave
	// ActDone: the delivery is settled; nothing is left to do.
	ActDone
	// ActPark holds the delivery in line for Plan.Delay, then runs its
	// handler again as attempt Plan.NextAttempt: an ordered queue's retry,
	// which keeps the deliveries of its key behind it.
	ActPark
)

var actionNames = [...]string{"", "ack", "handoff", "requeue", "dead-letter", "leave unresolved", "done", "park"}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "unknown action"
}

// Policy is what Decide needs of a queue's spec.
type Policy struct {
	Queue, DeadLetterQueue string
	RetryDelays            []time.Duration
	// Buckets names the retry bucket of each of RetryDelays, in their
	// order (queue.RetryBucket): named once, as Decide runs on every
	// delivery.
	Buckets     []string
	MaxAttempts int
	// DeliveryLimit is the quorum queue's delivery limit; zero when there is
	// none (a classic queue, a quorum queue declared without one).
	DeliveryLimit int
	// Park: the queue is ordered, and a retry waits in line rather than in
	// a retry bucket, while the budget can carry the wait, another run of
	// the pipeline (CallCost: the handler and the steps around it) and a
	// handoff after it.
	Park     bool
	CallCost time.Duration
}

// Plan is Decide's answer.
type Plan struct {
	Action      Action
	Destination string // the queue of a handoff
	// NextAttempt is the attempt header the handoff copy carries.
	NextAttempt int
	Delay       time.Duration // the pause before a requeue
	Reason      string
}

// Requeue pacing: the guard against a hot redelivery loop. A failed handoff or
// a deferral holds its delivery (and its concurrency slot) for a pause before the
// requeue, doubling per earlier requeue of the same message id in this process.
const (
	requeuePause    = 250 * time.Millisecond
	requeuePauseMax = 10 * time.Second
	// settleReserve is the budget kept back for the NACK itself after a pause.
	settleReserve = time.Second
	// HandoffReserve is the least budget a handoff starts with: its publish,
	// its confirm and the ACK after it. The runtime ends the waits before
	// the write when half of it is left and the wait for the confirm when a
	// quarter is: the last quarter is the ACK's, or the requeue's after a
	// confirm that did not come.
	HandoffReserve = 2 * time.Second
)

// SpentWaiting is why a delivery that Starts turned away went back to the
// queue.
const SpentWaiting = "not started: its settlement budget was spent while it waited for a slot"

// Starts says whether a delivery whose turn to run has come, with remaining
// of its budget left, goes on into user code (a scope, a claim, its
// handler). One whose budget is spent would be left unresolved whatever the
// handler did, as Decide leaves it, its work done and nothing settled: it
// goes back to the queue instead, not started, and comes back with a budget
// of its own.
func Starts(remaining time.Duration) bool { return remaining > 0 }

// Decide maps the evidence gathered so far, the delivery's attempt, the queue's
// policy and the remaining budget to the next step. It is pure: it reads no
// clock and touches no broker.
func Decide(o outcome.Outcome, attempt int, q Policy, remaining time.Duration) Plan {
	switch o.Settlement.Status {
	case outcome.AckSent, outcome.NackSent:
		return Plan{Action: ActDone, Reason: o.Settlement.Status.String()}
	case outcome.SettlementAmbiguous:
		return Plan{Action: ActLeave, Reason: "settlement ambiguous: " + o.Settlement.Detail}
	case outcome.SettlementNotAttempted:
		return Plan{Action: ActLeave, Reason: "settlement not attempted: " + o.Settlement.Detail}
	}
	if remaining <= 0 {
		return Plan{Action: ActLeave, Reason: "settlement budget spent"}
	}
	switch o.Rejection {
	case outcome.RejectOversized:
		return Plan{Action: ActDeadLetter, Reason: o.Reason}
	case outcome.RejectQuarantined:
		return Plan{Action: ActDeadLetter, Reason: "quarantined: " + o.Reason}
	}
	if o.CompletedEarlier {
		return Plan{Action: ActAck, Reason: "settled from the record: the work completed on an earlier delivery whose ack was ambiguous or never sent"}
	}
	switch o.Handoff.Status {
	case outcome.HandoffConfirmed:
		// The record names the destination: the handoff, not this ACK,
		// is the delivery's path.
		return Plan{Action: ActAck, Reason: "handoff confirmed"}
	case outcome.HandoffReturned, outcome.HandoffNacked, outcome.HandoffTimedOut, outcome.HandoffFailed:
		return giveBack(o, attempt, q, remaining, handoffFailure(o.Handoff))
	}
	if o.Deferred || o.Commit == outcome.CommitAmbiguous {
		why := "deferred; no application retry used"
		if o.Reason != "" {
			why += ": " + o.Reason
		}
		// On an ordered queue a requeue would let the key's next message
		// pass: the claim is asked again in line, as a retry waits there.
		// (A delivery deferred because its work runs elsewhere in this
		// consumer made no claim, and goes back; so does one whose handler
		// or scope step still runs: a claim in line would open a scope and
		// call a handler beside it.)
		if q.Park && !o.ParkEnded && !o.StepAbandoned && !o.Handler.Abandoned &&
			(o.Claim == outcome.InboxDeferred || o.Commit == outcome.CommitAmbiguous) {
			if pause := pauseAfter(max(o.PriorRequeues, o.DeliveryCount, o.InLine)); remaining >= pause+q.CallCost+HandoffReserve {
				return Plan{Action: ActPark, Delay: pause, NextAttempt: attempt, Reason: why + ", claimed again in line after " + pause.String()}
			}
		}
		if o.ParkEnded {
			why += "; the stop came while it waited in line, requeued in its place"
		}
		return giveBack(o, attempt, q, remaining, why)
	}
	if o.Handler.Cancelled {
		return giveBack(o, attempt, q, remaining, "handler cancelled by the forced shutdown; no application retry used")
	}
	// A duplicate's cleanup and after_delivery still ran: their failure
	// takes it on as after a committed handler, below, to a retry that
	// meets the duplicate again.
	if o.Claim == outcome.InboxDuplicate && o.Cleanup == "" && o.AfterDelivery == "" {
		return Plan{Action: ActAck, Reason: "duplicate: the inbox holds this message's committed work"}
	}
	switch o.Rejection {
	case outcome.RejectPoison:
		return handoffOrRequeue(o, toDLQ(q, attempt, "poison envelope: "+o.Reason), remaining)
	case outcome.RejectUnsupported:
		return handoffOrRequeue(o, toDLQ(q, attempt, "unsupported: "+o.Reason), remaining)
	}
	kind, why := o.Handler.Kind, "retryable failure"
	if kind == 0 {
		// Success is the pipeline, the cleanup and the required commit together.
		switch {
		case o.Commit == outcome.CommitFailed:
			kind, why = outcome.KindRetryable, "commit failed"
		case o.Cleanup != "":
			kind, why = outcome.KindRetryable, "cleanup failed"
		case o.AfterDelivery != "":
			kind, why = outcome.KindRetryable, "after_delivery failed"
		}
	}
	switch kind {
	case 0:
		return Plan{Action: ActAck, Reason: "handled"}
	case outcome.KindPermanent:
		return handoffOrRequeue(o, toDLQ(q, attempt, "permanent failure"), remaining)
	}
	if attempt >= q.MaxAttempts {
		return handoffOrRequeue(o, toDLQ(q, attempt, "retries exhausted after "+attemptOf(attempt, q)), remaining)
	}
	bucket := min(attempt-1, len(q.RetryDelays)-1)
	delay := q.RetryDelays[bucket]
	if o.ParkEnded {
		// Requeued, the delivery goes back to its place, ahead of its key's
		// later messages; a bucket would put it behind them.
		return giveBack(o, attempt, q, remaining, "the stop came while its retry waited in line; requeued in its place")
	}
	// A handler still running (abandoned at its timeout), or a scope still
	// opening or closing, must not get a second call beside it; a forced
	// stop leaves no time for one. A
	// duplicate, or a delivery whose scope did not open, ran none, and is
	// retried in line as its handler's would be: a bucket would put it
	// behind its key's later messages.
	if q.Park && !o.Handler.Abandoned && !o.StepAbandoned && !o.Handler.Cancelled && remaining >= delay+q.CallCost+HandoffReserve {
		return Plan{Action: ActPark, Delay: delay, NextAttempt: attempt + 1, Reason: onAttempt(why, attempt, q) + ", retried in line after " + delay.String()}
	}
	return handoffOrRequeue(o, Plan{
		Action:      ActHandoff,
		Destination: q.Buckets[bucket],
		NextAttempt: attempt + 1,
		Reason:      onAttempt(why, attempt, q),
	}, remaining)
}

// handoffFailure says which handoff failed and what the broker or the
// publisher said of it: the record keeps the cause, not only the word. The
// detail is bounded on its own so that the handler's cause, which
// FailureReason adds after it, still finds room within MaxCause.
func handoffFailure(h outcome.HandoffEvidence) string {
	why := "handoff to " + h.Destination + " " + h.Status.String()
	if h.Detail == "" {
		return why
	}
	return why + " (" + sanitize.Text(h.Detail, maxHandoffDetail) + ")"
}

// maxHandoffDetail bounds a failed handoff's detail in its reason: room for
// "unroutable: no queue named " and a long retry bucket's name.
const maxHandoffDetail = 100

// attemptOf says "attempt n of max"; decide runs on every delivery, so no fmt.
func attemptOf(attempt int, q Policy) string {
	return "attempt " + strconv.Itoa(attempt) + " of " + strconv.Itoa(q.MaxAttempts)
}

// onAttempt says "why on attempt n of max" in one concatenation: every
// retried delivery's plan says it.
func onAttempt(why string, attempt int, q Policy) string {
	return why + " on attempt " + strconv.Itoa(attempt) + " of " + strconv.Itoa(q.MaxAttempts)
}

func toDLQ(q Policy, attempt int, reason string) Plan {
	return Plan{Action: ActHandoff, Destination: q.DeadLetterQueue, NextAttempt: attempt, Reason: reason}
}

// handoffOrRequeue keeps a handoff only while the budget can still carry it
// and the ACK after it; otherwise the delivery is requeued now, while a NACK
// still fits, rather than left holding its slot until the channel closes.
func handoffOrRequeue(o outcome.Outcome, p Plan, remaining time.Duration) Plan {
	if remaining >= HandoffReserve {
		return p
	}
	return requeue(o, remaining, "budget too short for a handoff ("+p.Reason+")")
}

// giveBack requeues the delivery, unless the broker would dead-letter it at
// this return: a quorum queue's count of earlier returns (x-delivery-count)
// has reached its limit. Then Lily hands it to the DLQ itself, with its
// failure facts. Only a handoff to the DLQ that failed already, or one that
// failed after its write (its copy may exist, and one attempt makes at most
// one), is followed by the requeue, and the broker's own dead-lettering.
func giveBack(o outcome.Outcome, attempt int, q Policy, remaining time.Duration, reason string) Plan {
	if q.DeliveryLimit > 0 && o.DeliveryCount >= q.DeliveryLimit && o.Handoff.Destination != q.DeadLetterQueue && !o.Handoff.Published {
		limit := "delivery limit " + strconv.Itoa(q.DeliveryLimit) + " reached (x-delivery-count " + strconv.Itoa(o.DeliveryCount) + "): "
		return handoffOrRequeue(o, toDLQ(q, attempt, limit+reason), remaining)
	}
	return requeue(o, remaining, reason)
}

// requeue holds the delivery for a pause, then NACKs it with requeue. The
// pause doubles with the returns already made: those this process made, or
// those the quorum queue counted (from other processes too), whichever is more.
func requeue(o outcome.Outcome, remaining time.Duration, reason string) Plan {
	pause := min(pauseAfter(max(o.PriorRequeues, o.DeliveryCount)), max(remaining-settleReserve, 0))
	return Plan{Action: ActRequeue, Delay: pause, Reason: reason}
}

// pauseAfter is the pause before a delivery goes back, to the queue or to
// its claim in line, after n returns already: it doubles with each.
func pauseAfter(n int) time.Duration {
	return min(requeuePause<<min(n, 6), requeuePauseMax)
}

// FailureReason is why a delivery took its path, with the failing step's
// detail when there is one; sanitized and bounded.
func FailureReason(plan Plan, o outcome.Outcome) string {
	detail := FailureDetail(o)
	if detail == "" {
		return sanitize.Text(plan.Reason, MaxCause)
	}
	return sanitize.Text(plan.Reason+": "+detail, MaxCause)
}

// FailureDetail is what the failing step of the pipeline said: the handler,
// the commit, the cleanup or after_delivery; empty when none failed.
func FailureDetail(o outcome.Outcome) string {
	switch {
	case o.Handler.Kind != 0:
		return o.Handler.Cause
	case o.Commit == outcome.CommitFailed:
		return o.Reason
	case o.Cleanup != "":
		return "cleanup: " + o.Cleanup
	case o.AfterDelivery != "":
		return "after_delivery: " + o.AfterDelivery
	}
	return ""
}

// MaxCause bounds a failure's text in records, logs and failure headers.
const MaxCause = 200
