package decide

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime/internal/outcome"
)

func testPolicy() Policy {
	return Policy{Queue: "orders", DeadLetterQueue: "orders.dlq", RetryDelays: []time.Duration{time.Second, 5 * time.Second}, Buckets: []string{"orders.retry.1s", "orders.retry.5s"}, MaxAttempts: 4}
}

// TestDecideTable has one row per row of the user's decision table, then the
// poison, unsupported and large-body paths, then the budget and pacing edges.
func TestDecideTable(t *testing.T) {
	q := testPolicy()
	ok := outcome.HandlerResult{Ran: true}
	retryable := outcome.HandlerResult{Ran: true, Kind: outcome.KindRetryable, Cause: "db busy"}
	permanent := outcome.HandlerResult{Ran: true, Kind: outcome.KindPermanent, Cause: "bad order"}
	confirmedDLQ := outcome.HandoffEvidence{Destination: "orders.dlq", Status: outcome.HandoffConfirmed}
	rows := []struct {
		name      string
		o         outcome.Outcome
		attempt   int
		remaining time.Duration
		want      Plan
	}{
		{"1 success, commit done → ack", outcome.Outcome{Handler: ok, Commit: outcome.CommitCommitted}, 1, time.Minute,
			Plan{Action: ActAck, Reason: "handled"}},
		{"1 success, no commit required → ack", outcome.Outcome{Handler: ok}, 1, time.Minute,
			Plan{Action: ActAck, Reason: "handled"}},
		{"2 retryable, retries left → retry bucket of attempt 1", outcome.Outcome{Handler: retryable}, 1, time.Minute,
			Plan{Action: ActHandoff, Destination: "orders.retry.1s", NextAttempt: 2, Reason: "retryable failure on attempt 1 of 4"}},
		{"2 retryable, later attempts use the last bucket", outcome.Outcome{Handler: retryable}, 3, time.Minute,
			Plan{Action: ActHandoff, Destination: "orders.retry.5s", NextAttempt: 4, Reason: "retryable failure on attempt 3 of 4"}},
		{"2 retry handoff confirmed → ack", outcome.Outcome{Handler: retryable, Handoff: outcome.HandoffEvidence{Destination: "orders.retry.1s", Status: outcome.HandoffConfirmed}}, 1, time.Minute,
			Plan{Action: ActAck, Reason: "handoff confirmed"}},
		{"3 permanent → DLQ", outcome.Outcome{Handler: permanent}, 1, time.Minute,
			Plan{Action: ActHandoff, Destination: "orders.dlq", NextAttempt: 1, Reason: "permanent failure"}},
		{"3 retries exhausted → DLQ", outcome.Outcome{Handler: retryable}, 4, time.Minute,
			Plan{Action: ActHandoff, Destination: "orders.dlq", NextAttempt: 4, Reason: "retries exhausted after attempt 4 of 4"}},
		{"1 commit failed after success → retry", outcome.Outcome{Handler: ok, Claim: outcome.InboxClaimed, Commit: outcome.CommitFailed}, 1, time.Minute,
			Plan{Action: ActHandoff, Destination: "orders.retry.1s", NextAttempt: 2, Reason: "commit failed on attempt 1 of 4"}},
		{"1 cleanup failed after the commit → retry (the retry meets the inbox's duplicate)", outcome.Outcome{Handler: ok, Claim: outcome.InboxClaimed, Commit: outcome.CommitCommitted, Cleanup: "close file: EIO"}, 1, time.Minute,
			Plan{Action: ActHandoff, Destination: "orders.retry.1s", NextAttempt: 2, Reason: "cleanup failed on attempt 1 of 4"}},
		{"1 after_delivery failed → retry", outcome.Outcome{Handler: ok, AfterDelivery: "audit down"}, 1, time.Minute,
			Plan{Action: ActHandoff, Destination: "orders.retry.1s", NextAttempt: 2, Reason: "after_delivery failed on attempt 1 of 4"}},
		{"inbox duplicate → ack without the handler", outcome.Outcome{Claim: outcome.InboxDuplicate}, 2, time.Minute,
			Plan{Action: ActAck, Reason: "duplicate: the inbox holds this message's committed work"}},
		{"1 cleanup failed on a duplicate → retry, as after the commit", outcome.Outcome{Claim: outcome.InboxDuplicate, Reason: "lily: duplicate", Cleanup: "close file: EIO"}, 2, time.Minute,
			Plan{Action: ActHandoff, Destination: "orders.retry.5s", NextAttempt: 3, Reason: "cleanup failed on attempt 2 of 4"}},
		{"1 after_delivery failed on a duplicate → retry", outcome.Outcome{Claim: outcome.InboxDuplicate, Reason: "lily: duplicate", AfterDelivery: "audit down"}, 1, time.Minute,
			Plan{Action: ActHandoff, Destination: "orders.retry.1s", NextAttempt: 2, Reason: "after_delivery failed on attempt 1 of 4"}},
		{"3 cleanup failed on a duplicate, retries exhausted → DLQ", outcome.Outcome{Claim: outcome.InboxDuplicate, Reason: "lily: duplicate", Cleanup: "close file: EIO"}, 4, time.Minute,
			Plan{Action: ActHandoff, Destination: "orders.dlq", NextAttempt: 4, Reason: "retries exhausted after attempt 4 of 4"}},
		{"4 handoff returned → one paced requeue", outcome.Outcome{Handler: permanent, Handoff: outcome.HandoffEvidence{Destination: "orders.dlq", Status: outcome.HandoffReturned}}, 1, time.Minute,
			Plan{Action: ActRequeue, Delay: requeuePause, Reason: "handoff to orders.dlq returned"}},
		{"4 handoff returned → the requeue says why it was", outcome.Outcome{Handler: permanent, Handoff: outcome.HandoffEvidence{Destination: "orders.dlq", Status: outcome.HandoffReturned, Detail: "unroutable: no queue named orders.dlq"}}, 1, time.Minute,
			Plan{Action: ActRequeue, Delay: requeuePause, Reason: "handoff to orders.dlq returned (unroutable: no queue named orders.dlq)"}},
		{"4 handoff timed out, third time → longer pause", outcome.Outcome{Handler: retryable, PriorRequeues: 2, Handoff: outcome.HandoffEvidence{Destination: "orders.retry.1s", Status: outcome.HandoffTimedOut}}, 1, time.Minute,
			Plan{Action: ActRequeue, Delay: 4 * requeuePause, Reason: "handoff to orders.retry.1s timed out"}},
		{"4 pause never exceeds its cap", outcome.Outcome{Handler: retryable, PriorRequeues: 60, Handoff: outcome.HandoffEvidence{Destination: "orders.retry.1s", Status: outcome.HandoffFailed}}, 1, time.Hour,
			Plan{Action: ActRequeue, Delay: requeuePauseMax, Reason: "handoff to orders.retry.1s failed"}},
		{"4 pause fits the remaining budget", outcome.Outcome{Handler: permanent, Handoff: outcome.HandoffEvidence{Destination: "orders.dlq", Status: outcome.HandoffNacked}}, 1, 1100 * time.Millisecond,
			Plan{Action: ActRequeue, Delay: 100 * time.Millisecond, Reason: "handoff to orders.dlq nacked"}},
		{"5 handoff confirmed, ack ambiguous → unresolved, confirm kept", outcome.Outcome{Handler: permanent, Handoff: confirmedDLQ, Settlement: outcome.SettlementEvidence{Status: outcome.SettlementAmbiguous, Detail: "write failed"}}, 1, time.Minute,
			Plan{Action: ActLeave, Reason: "settlement ambiguous: write failed"}},
		{"6 inbox deferred → requeue, not an application retry", outcome.Outcome{Claim: outcome.InboxDeferred, Deferred: true, Reason: "lease held"}, 2, time.Minute,
			Plan{Action: ActRequeue, Delay: requeuePause, Reason: "deferred; no application retry used: lease held"}},
		{"6 commit ambiguous → deferred", outcome.Outcome{Handler: ok, Claim: outcome.InboxClaimed, Commit: outcome.CommitAmbiguous}, 1, time.Minute,
			Plan{Action: ActRequeue, Delay: requeuePause, Reason: "deferred; no application retry used"}},
		{"poison → DLQ before any handler", outcome.Outcome{Rejection: outcome.RejectPoison, Reason: "message id missing"}, 1, time.Minute,
			Plan{Action: ActHandoff, Destination: "orders.dlq", NextAttempt: 1, Reason: "poison envelope: message id missing"}},
		{"unsupported → DLQ at dispatch", outcome.Outcome{Rejection: outcome.RejectUnsupported, Reason: "OrderPlaced v9"}, 1, time.Minute,
			Plan{Action: ActHandoff, Destination: "orders.dlq", NextAttempt: 1, Reason: "unsupported: OrderPlaced v9"}},
		{"large body → broker-native dead-letter", outcome.Outcome{Rejection: outcome.RejectOversized, Reason: "body 2048 bytes"}, 1, time.Minute,
			Plan{Action: ActDeadLetter, Reason: "body 2048 bytes"}},
		{"undecodable by the client → broker-native dead-letter", outcome.Outcome{Rejection: outcome.RejectQuarantined, Reason: "a header value of type 'L'"}, 1, time.Minute,
			Plan{Action: ActDeadLetter, Reason: "quarantined: a header value of type 'L'"}},
		{"redelivery of completed work → ack without the handler", outcome.Outcome{CompletedEarlier: true}, 2, time.Minute,
			Plan{Action: ActAck, Reason: "settled from the record: the work completed on an earlier delivery whose ack was ambiguous or never sent"}},
		{"ack sent → done", outcome.Outcome{Handler: ok, Settlement: outcome.SettlementEvidence{Status: outcome.AckSent}}, 1, time.Minute,
			Plan{Action: ActDone, Reason: "ack sent"}},
		{"no authority → unresolved", outcome.Outcome{Handler: ok, Settlement: outcome.SettlementEvidence{Status: outcome.SettlementNotAttempted, Detail: "channel closed"}}, 1, time.Minute,
			Plan{Action: ActLeave, Reason: "settlement not attempted: channel closed"}},
		{"forced shutdown cancelled the handler → requeue, no retry used", outcome.Outcome{Handler: outcome.HandlerResult{Ran: true, Kind: outcome.KindRetryable, Cancelled: true}}, 3, time.Minute,
			Plan{Action: ActRequeue, Delay: requeuePause, Reason: "handler cancelled by the forced shutdown; no application retry used"}},
		{"budget too short for a handoff → paced requeue", outcome.Outcome{Handler: permanent}, 1, 1500 * time.Millisecond,
			Plan{Action: ActRequeue, Delay: requeuePause, Reason: "budget too short for a handoff (permanent failure)"}},
		{"budget spent → unresolved, never settled late", outcome.Outcome{Handler: ok}, 1, 0,
			Plan{Action: ActLeave, Reason: "settlement budget spent"}},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			if diff := cmp.Diff(r.want, Decide(r.o, r.attempt, q, r.remaining)); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecideSingleAttemptPolicyGoesStraightToDLQ(t *testing.T) {
	q := testPolicy()
	q.RetryDelays, q.MaxAttempts = nil, 1
	got := Decide(outcome.Outcome{Handler: outcome.HandlerResult{Ran: true, Kind: outcome.KindRetryable}}, 1, q, time.Minute)
	if got.Action != ActHandoff || got.Destination != "orders.dlq" {
		t.Fatalf("plan = %+v, want a handoff to the DLQ", got)
	}
}

// On a quorum queue whose limit the message's returns have reached, the next
// return would have the broker dead-letter it without Lily's facts: Lily
// hands it to the DLQ itself instead, unless a handoff to the DLQ is what
// just failed, or a handoff that failed after its write (its copy may exist:
// a second in the same attempt would be two). Below the limit, and on a queue without one, the requeue
// stands; its pause grows with the broker's count as with this process's.
func TestDecideDeliveryLimit(t *testing.T) {
	q := testPolicy()
	q.DeliveryLimit = 5
	none := testPolicy()
	deferred := outcome.Outcome{Claim: outcome.InboxDeferred, Deferred: true, Reason: "inbox: lease held"}
	at := func(o outcome.Outcome, count int) outcome.Outcome { o.DeliveryCount = count; return o }
	failedTo := func(dest string) outcome.Outcome {
		return outcome.Outcome{Handler: outcome.HandlerResult{Ran: true, Kind: outcome.KindRetryable}, Handoff: outcome.HandoffEvidence{Destination: dest, Status: outcome.HandoffReturned, Detail: "unroutable"}}
	}
	writtenTo := func(dest string, status outcome.HandoffStatus, detail string) outcome.Outcome {
		o := failedTo(dest)
		o.Handoff.Status, o.Handoff.Detail, o.Handoff.Published = status, detail, true
		return o
	}
	rows := []struct {
		name      string
		q         Policy
		o         outcome.Outcome
		remaining time.Duration
		want      Plan
	}{
		{"deferred below the limit → requeue, paced by the broker's count", q, at(deferred, 4), time.Minute,
			Plan{Action: ActRequeue, Delay: 16 * requeuePause, Reason: "deferred; no application retry used: inbox: lease held"}},
		{"deferred at the limit → DLQ with Lily's facts", q, at(deferred, 5), time.Minute,
			Plan{Action: ActHandoff, Destination: "orders.dlq", NextAttempt: 2, Reason: "delivery limit 5 reached (x-delivery-count 5): deferred; no application retry used: inbox: lease held"}},
		{"a retry handoff failed at the limit → DLQ", q, at(failedTo("orders.retry.1s"), 7), time.Minute,
			Plan{Action: ActHandoff, Destination: "orders.dlq", NextAttempt: 2, Reason: "delivery limit 5 reached (x-delivery-count 7): handoff to orders.retry.1s returned (unroutable)"}},
		{"a retry handoff written, unconfirmed, at the limit → requeue: its copy may exist", q, at(writtenTo("orders.retry.1s", outcome.HandoffTimedOut, "no confirm in time"), 7), time.Minute,
			Plan{Action: ActRequeue, Delay: requeuePauseMax, Reason: "handoff to orders.retry.1s timed out (no confirm in time)"}},
		{"a retry handoff nacked at the limit → requeue: a reject-publish-dlx bucket dead-lettered a copy", q, at(writtenTo("orders.retry.1s", outcome.HandoffNacked, "the broker refused the publish"), 7), time.Minute,
			Plan{Action: ActRequeue, Delay: requeuePauseMax, Reason: "handoff to orders.retry.1s nacked (the broker refused the publish)"}},
		{"the DLQ handoff failed at the limit → requeue: the broker dead-letters it", q, at(failedTo("orders.dlq"), 5), time.Minute,
			Plan{Action: ActRequeue, Delay: 32 * requeuePause, Reason: "handoff to orders.dlq returned (unroutable)"}},
		{"at the limit, no budget for a handoff → requeue", q, at(deferred, 5), time.Second,
			Plan{Action: ActRequeue, Reason: "budget too short for a handoff (delivery limit 5 reached (x-delivery-count 5): deferred; no application retry used: inbox: lease held)"}},
		{"no limit → requeue, whatever the count", none, at(deferred, 500), time.Minute,
			Plan{Action: ActRequeue, Delay: requeuePauseMax, Reason: "deferred; no application retry used: inbox: lease held"}},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			if diff := cmp.Diff(r.want, Decide(r.o, 2, r.q, r.remaining)); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

// An ordered queue retries in line while the budget carries the wait, the
// next call and a handoff; never beside a handler or a scope step still
// running, nor after
// a forced stop cancelled it; and not once its attempts are spent.
func TestDecidePark(t *testing.T) {
	q := testPolicy()
	q.Park, q.CallCost = true, 10*time.Second
	ended := outcome.Outcome{Handler: outcome.HandlerResult{Ran: true, Kind: outcome.KindRetryable, Cause: "db busy"}, ParkEnded: true}
	retryable := outcome.Outcome{Handler: outcome.HandlerResult{Ran: true, Kind: outcome.KindRetryable, Cause: "db busy"}}
	abandoned, cancelled := retryable, retryable
	cleanup := outcome.Outcome{Handler: outcome.HandlerResult{Ran: true}, Cleanup: "did not return", StepAbandoned: true}
	duplicate := outcome.Outcome{Claim: outcome.InboxDuplicate, Cleanup: "close file: EIO"}
	scope := outcome.Outcome{Handler: outcome.HandlerResult{Kind: outcome.KindRetryable, Cause: "scope: pool exhausted"}}
	abandoned.Handler.Abandoned, cancelled.Handler.Cancelled = true, true
	bucket := Plan{Action: ActHandoff, Destination: "orders.retry.5s", NextAttempt: 3, Reason: "retryable failure on attempt 2 of 4"}
	for _, tc := range []struct {
		name      string
		o         outcome.Outcome
		attempt   int
		remaining time.Duration
		want      Plan
	}{
		{"retryable with budget → park", retryable, 2, time.Minute,
			Plan{Action: ActPark, Delay: 5 * time.Second, NextAttempt: 3, Reason: "retryable failure on attempt 2 of 4, retried in line after 5s"}},
		{"budget just enough", retryable, 2, 5*time.Second + 10*time.Second + HandoffReserve,
			Plan{Action: ActPark, Delay: 5 * time.Second, NextAttempt: 3, Reason: "retryable failure on attempt 2 of 4, retried in line after 5s"}},
		{"budget short → the bucket", retryable, 2, 5*time.Second + 10*time.Second + HandoffReserve - 1, bucket},
		{"abandoned handler → the bucket", abandoned, 2, time.Minute, bucket},
		{"abandoned cleanup → the bucket", cleanup, 2, time.Minute,
			Plan{Action: ActHandoff, Destination: "orders.retry.5s", NextAttempt: 3, Reason: "cleanup failed on attempt 2 of 4"}},
		{"cleanup failed on a duplicate → park, as after the commit", duplicate, 2, time.Minute,
			Plan{Action: ActPark, Delay: 5 * time.Second, NextAttempt: 3, Reason: "cleanup failed on attempt 2 of 4, retried in line after 5s"}},
		{"scope did not open → park", scope, 2, time.Minute,
			Plan{Action: ActPark, Delay: 5 * time.Second, NextAttempt: 3, Reason: "retryable failure on attempt 2 of 4, retried in line after 5s"}},
		{"cancelled by the forced stop → requeue", cancelled, 2, time.Minute,
			Plan{Action: ActRequeue, Delay: requeuePause, Reason: "handler cancelled by the forced shutdown; no application retry used"}},
		{"the stop ended its wait → requeued in its place", ended, 2, time.Minute,
			Plan{Action: ActRequeue, Delay: requeuePause, Reason: "the stop came while its retry waited in line; requeued in its place"}},
		{"attempts spent → DLQ", retryable, 4, time.Minute,
			Plan{Action: ActHandoff, Destination: "orders.dlq", NextAttempt: 4, Reason: "retries exhausted after attempt 4 of 4"}},
	} {
		if got := Decide(tc.o, tc.attempt, q, tc.remaining); !cmp.Equal(got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// On an ordered queue an inbox deferral waits in line and claims again, on
// the same attempt, so that the key's next message cannot pass it; its waits
// lengthen as a requeue's pauses do. Without the budget for a wait and a
// call, once the stop ended its wait, when it made no claim (its work runs
// elsewhere in the consumer), or while a scope step or its handler still runs
// (a claim in line would open a scope and call a handler beside it), it is
// requeued.
func TestDecideParkDeferral(t *testing.T) {
	q := testPolicy()
	q.Park, q.CallCost = true, 10*time.Second
	deferred := outcome.Outcome{Claim: outcome.InboxDeferred, Deferred: true, Reason: "inbox: lease held"}
	again, ended := deferred, deferred
	again.InLine, ended.ParkEnded = 2, true
	ambiguous := outcome.Outcome{Handler: outcome.HandlerResult{Ran: true}, Claim: outcome.InboxClaimed, Commit: outcome.CommitAmbiguous, Reason: "commit: connection lost"}
	busy := outcome.Outcome{Deferred: true, Reason: "the same message and attempt is being handled by another delivery in this consumer"}
	stuck, stuckAmbiguous, stuckHandler := deferred, ambiguous, ambiguous
	stuck.Cleanup, stuck.StepAbandoned = "did not return", true
	stuckAmbiguous.Cleanup, stuckAmbiguous.StepAbandoned = "did not return", true
	stuckHandler.Handler.Abandoned = true
	const why = "deferred; no application retry used: "
	for _, tc := range []struct {
		name      string
		o         outcome.Outcome
		remaining time.Duration
		want      Plan
	}{
		{"a deferred claim waits in line", deferred, time.Minute,
			Plan{Action: ActPark, Delay: requeuePause, NextAttempt: 2, Reason: why + "inbox: lease held, claimed again in line after 250ms"}},
		{"its third wait is longer", again, time.Minute,
			Plan{Action: ActPark, Delay: 4 * requeuePause, NextAttempt: 2, Reason: why + "inbox: lease held, claimed again in line after 1s"}},
		{"an ambiguous commit waits in line", ambiguous, time.Minute,
			Plan{Action: ActPark, Delay: requeuePause, NextAttempt: 2, Reason: why + "commit: connection lost, claimed again in line after 250ms"}},
		{"budget short → requeue", deferred, requeuePause + 10*time.Second + HandoffReserve - 1,
			Plan{Action: ActRequeue, Delay: requeuePause, Reason: why + "inbox: lease held"}},
		{"the stop ended its wait → requeued in its place", ended, time.Minute,
			Plan{Action: ActRequeue, Delay: requeuePause, Reason: why + "inbox: lease held; the stop came while it waited in line, requeued in its place"}},
		{"no claim made → requeue", busy, time.Minute,
			Plan{Action: ActRequeue, Delay: requeuePause, Reason: why + busy.Reason}},
		{"deferred, its cleanup still running → requeue", stuck, time.Minute,
			Plan{Action: ActRequeue, Delay: requeuePause, Reason: why + "inbox: lease held"}},
		{"ambiguous commit, its cleanup still running → requeue", stuckAmbiguous, time.Minute,
			Plan{Action: ActRequeue, Delay: requeuePause, Reason: why + "commit: connection lost"}},
		{"ambiguous commit, its handler still running → requeue", stuckHandler, time.Minute,
			Plan{Action: ActRequeue, Delay: requeuePause, Reason: why + "commit: connection lost"}},
	} {
		if got := Decide(tc.o, 2, q, tc.remaining); !cmp.Equal(got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestDecideRetryPathAllocations pins what Decide costs a retried delivery:
// its handoff's reason alone (the bucket is named once, in the Policy), and
// nothing for the ACK after the confirm.
func TestDecideRetryPathAllocations(t *testing.T) {
	q := testPolicy()
	failed := outcome.Outcome{Handler: outcome.HandlerResult{Ran: true, Kind: outcome.KindRetryable, Cause: "db busy"}}
	confirmed := failed
	confirmed.Handoff = outcome.HandoffEvidence{Destination: "orders.retry.1s", Status: outcome.HandoffConfirmed, Published: true}
	for _, tc := range []struct {
		name string
		o    outcome.Outcome
		want float64
	}{
		{"the handoff", failed, 1},
		{"the ACK after its confirm", confirmed, 0},
	} {
		if n := testing.AllocsPerRun(100, func() { Decide(tc.o, 1, q, time.Minute) }); n != tc.want {
			t.Errorf("%s: %v allocations, want %v", tc.name, n, tc.want)
		}
	}
}

// A delivery starts while any of its budget is left, the moment Decide
// would still settle what its handler did; with none left it goes back
// not started.
func TestStarts(t *testing.T) {
	for _, row := range []struct {
		remaining time.Duration
		want      bool
	}{
		{time.Minute, true},
		{time.Nanosecond, true},
		{0, false},
		{-time.Second, false},
	} {
		if got := Starts(row.remaining); got != row.want {
			t.Errorf("Starts(%s) = %v, want %v", row.remaining, got, row.want)
		}
		spent := Decide(outcome.Outcome{Handler: outcome.HandlerResult{Ran: true}}, 1, testPolicy(), row.remaining).Reason == "settlement budget spent"
		if spent == row.want {
			t.Errorf("remaining %s: Starts %v, but Decide says budget spent %v", row.remaining, row.want, spent)
		}
	}
}

// A handoff that failed is followed by its requeue; the record's reason
// (FailureReason of that requeue's plan) keeps what the broker or the
// publisher said of the handoff as well as the handler's cause, so the
// failure is kept beyond the diagnostics event that a stage filter may
// drop. The handoff's detail is sanitized and bounded so that it never
// crowds the handler's cause out of MaxCause.
func TestFailureReasonKeepsTheHandoffsCause(t *testing.T) {
	q := testPolicy()
	failed := func(status outcome.HandoffStatus, detail string) outcome.Outcome {
		return outcome.Outcome{
			Handler: outcome.HandlerResult{Ran: true, Kind: outcome.KindRetryable, Cause: "db busy"},
			Handoff: outcome.HandoffEvidence{Destination: "orders.retry.1s", Status: status, Detail: detail},
		}
	}
	hostile := "open channel: \x1b[31m" + strings.Repeat("x", 500)
	for _, tc := range []struct {
		name string
		o    outcome.Outcome
		want string
	}{
		{"returned", failed(outcome.HandoffReturned, "unroutable: no queue named orders.retry.1s"),
			"handoff to orders.retry.1s returned (unroutable: no queue named orders.retry.1s): db busy"},
		{"timed out", failed(outcome.HandoffTimedOut, "no confirm in time"),
			"handoff to orders.retry.1s timed out (no confirm in time): db busy"},
		{"failed, without a detail", failed(outcome.HandoffFailed, ""),
			"handoff to orders.retry.1s failed: db busy"},
	} {
		plan := Decide(tc.o, 1, q, time.Minute)
		if plan.Action != ActRequeue {
			t.Fatalf("%s: plan %+v, want the bounded requeue", tc.name, plan)
		}
		if got := FailureReason(plan, tc.o); got != tc.want {
			t.Errorf("%s: reason\n%q, want\n%q", tc.name, got, tc.want)
		}
	}
	o := failed(outcome.HandoffFailed, hostile)
	got := FailureReason(Decide(o, 1, q, time.Minute), o)
	if !strings.HasPrefix(got, `handoff to orders.retry.1s failed (open channel: \x1b[31mxxx`) || !strings.HasSuffix(got, "...): db busy") ||
		len(got) > MaxCause || sanitize.Text(got, MaxCause) != got {
		t.Errorf("a long hostile detail: reason %q (%d bytes), want it escaped and cut before the handler's cause", got, len(got))
	}
}
