package lilytest

import (
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/guard"
)

// Result is what became of one delivery, each kind of evidence apart.
type Result struct {
	// Record is the runtime's record of the delivery, as Config.Observe
	// gets it: its Path, Reason, Rejection, Handler, Commit, Handoff,
	// Destination and Attempt.
	runtime.Record
	// Err is what the route returned, as it returned it: the handler's
	// error, or the extractor's failure wrapped in runtime.Permanent; so
	// errors.Is and errors.As find what the handler wrapped. It is nil when
	// the handler succeeded, did not run or panicked, and when the record
	// says it "timed out": the runtime stopped waiting for it, so what it
	// returned late, even before Deliver returned, decided nothing. After a
	// retry in line (QueueSpec.OrderKey), it is what the last attempt
	// returned.
	Err error
	// Copy is the retry or DLQ copy the consumer handed to its publisher,
	// whatever the broker answered: the original's body and headers, the
	// attempt it is to run as (x-lily-attempt) and the failure facts
	// (x-lily-failure-*). Deliver it again to run the retry. Nil when
	// the consumer handed none, or when its publisher refused the copy
	// unwritten, as the runtime's does: once less than half of the 2 s
	// handoff reserve is left of the delivery's budget (user code before
	// the write, a slow Telemetry say, took the time), the copy is not
	// written and the handoff "timed out". With AnswerHandoffs("failed") it was not written, and is on no
	// queue.
	//
	// A retry copy its bucket may hold (the broker answered "confirmed",
	// or "timed out": it was written) is as the bucket hands it back to
	// the queue once its delay is over: it also carries what RabbitMQ's dead-lettering adds
	// there (3.10.8), an x-death of one entry (count 1, reason "expired",
	// queue and routing-keys the bucket, exchange "", time the publish plus
	// the delay, in whole seconds) and x-first-death-reason, -queue and
	// -exchange. The copy handed to the publisher carries none: the runtime
	// leaves the broker's records behind, so each attempt's x-death is a
	// fresh one. RabbitMQ 3.13 and later add x-last-death-* too, which Copy
	// lacks. A DLQ copy carries none of them, nor does a retry copy the
	// broker "returned" or "nacked" (no queue holds it) or that "failed".
	//
	// On the broker the copy also carries x-lily-handoff-id, which the
	// runtime's publisher adds to tell the broker's Return of the copy
	// from another's; the fake broker needs none, so Copy lacks it. A copy
	// delivered again does not pass it on: the runtime leaves it out of
	// the next copy, as it does the failure facts it replaces.
	Copy *runtime.Publishing
	// Settlement is what the consumer wrote on its channel for the
	// delivery: "ack", "nack" (without requeue: the broker dead-letters
	// it), "requeue", or "" when it wrote nothing (the delivery is
	// unresolved, and the broker would redeliver it).
	Settlement string
}

// NextAttempt is the attempt the copy carries (x-lily-attempt): a retry's
// next attempt, or for a DLQ copy the attempt that failed; 0 without a copy
// or, for a poison message's copy, which carries none.
func (r Result) NextAttempt() int {
	if r.Copy == nil {
		return 0
	}
	n, _ := r.Copy.Headers[guard.HeaderAttempt].(int64)
	return int(n)
}
