package runtime

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func testSpec() QueueSpec {
	return QueueSpec{
		Name: "orders", Type: Classic, Prefetch: 4, Concurrency: 2,
		Retry:           RetryPolicy{Delays: []time.Duration{time.Second, 5 * time.Second}, MaxAttempts: 4},
		DeadLetterQueue: "orders.dlq", MaxBodyBytes: 1024, HandlerTimeout: time.Second,
	}
}

// TestDecideTable has one row per row of the user's decision table, then the
// poison, unsupported and large-body paths, then the budget and pacing edges.
func TestDecideTable(t *testing.T) {
	q := testSpec()
	ok := HandlerResult{Ran: true}
	retryable := HandlerResult{Ran: true, Kind: KindRetryable, Cause: "db busy"}
	permanent := HandlerResult{Ran: true, Kind: KindPermanent, Cause: "bad order"}
	confirmedDLQ := HandoffEvidence{Destination: "orders.dlq", Status: HandoffConfirmed}
	rows := []struct {
		name      string
		o         Outcome
		attempt   int
		remaining time.Duration
		want      Plan
	}{
		{"1 success, commit done → ack", Outcome{Handler: ok, Commit: CommitCommitted}, 1, time.Minute,
			Plan{Action: ActAck, Reason: "handled"}},
		{"1 success, no commit required → ack", Outcome{Handler: ok}, 1, time.Minute,
			Plan{Action: ActAck, Reason: "handled"}},
		{"2 retryable, retries left → retry bucket of attempt 1", Outcome{Handler: retryable}, 1, time.Minute,
			Plan{Action: ActHandoff, Destination: "orders.retry.1s", NextAttempt: 2, Reason: "retryable failure on attempt 1 of 4"}},
		{"2 retryable, later attempts use the last bucket", Outcome{Handler: retryable}, 3, time.Minute,
			Plan{Action: ActHandoff, Destination: "orders.retry.5s", NextAttempt: 4, Reason: "retryable failure on attempt 3 of 4"}},
		{"2 retry handoff confirmed → ack", Outcome{Handler: retryable, Handoff: HandoffEvidence{Destination: "orders.retry.1s", Status: HandoffConfirmed}}, 1, time.Minute,
			Plan{Action: ActAck, Reason: "handoff to orders.retry.1s confirmed"}},
		{"3 permanent → DLQ", Outcome{Handler: permanent}, 1, time.Minute,
			Plan{Action: ActHandoff, Destination: "orders.dlq", NextAttempt: 1, Reason: "permanent failure"}},
		{"3 retries exhausted → DLQ", Outcome{Handler: retryable}, 4, time.Minute,
			Plan{Action: ActHandoff, Destination: "orders.dlq", NextAttempt: 4, Reason: "retries exhausted after attempt 4 of 4"}},
		{"1 commit failed after success → retry", Outcome{Handler: ok, Claim: InboxClaimed, Commit: CommitFailed}, 1, time.Minute,
			Plan{Action: ActHandoff, Destination: "orders.retry.1s", NextAttempt: 2, Reason: "commit failed on attempt 1 of 4"}},
		{"1 cleanup failed after the commit → retry (the retry meets the inbox's duplicate)", Outcome{Handler: ok, Claim: InboxClaimed, Commit: CommitCommitted, Cleanup: "close file: EIO"}, 1, time.Minute,
			Plan{Action: ActHandoff, Destination: "orders.retry.1s", NextAttempt: 2, Reason: "cleanup failed on attempt 1 of 4"}},
		{"1 after_delivery failed → retry", Outcome{Handler: ok, AfterDelivery: "audit down"}, 1, time.Minute,
			Plan{Action: ActHandoff, Destination: "orders.retry.1s", NextAttempt: 2, Reason: "after_delivery failed on attempt 1 of 4"}},
		{"inbox duplicate → ack without the handler", Outcome{Claim: InboxDuplicate}, 2, time.Minute,
			Plan{Action: ActAck, Reason: "duplicate: the inbox holds this message's committed work"}},
		{"4 handoff returned → one paced requeue", Outcome{Handler: permanent, Handoff: HandoffEvidence{Destination: "orders.dlq", Status: HandoffReturned}}, 1, time.Minute,
			Plan{Action: ActRequeue, Delay: requeuePause, Reason: "handoff to orders.dlq returned"}},
		{"4 handoff timed out, third time → longer pause", Outcome{Handler: retryable, PriorRequeues: 2, Handoff: HandoffEvidence{Destination: "orders.retry.1s", Status: HandoffTimedOut}}, 1, time.Minute,
			Plan{Action: ActRequeue, Delay: 4 * requeuePause, Reason: "handoff to orders.retry.1s timed out"}},
		{"4 pause never exceeds its cap", Outcome{Handler: retryable, PriorRequeues: 60, Handoff: HandoffEvidence{Destination: "orders.retry.1s", Status: HandoffFailed}}, 1, time.Hour,
			Plan{Action: ActRequeue, Delay: requeuePauseMax, Reason: "handoff to orders.retry.1s failed"}},
		{"4 pause fits the remaining budget", Outcome{Handler: permanent, Handoff: HandoffEvidence{Destination: "orders.dlq", Status: HandoffNacked}}, 1, 1100 * time.Millisecond,
			Plan{Action: ActRequeue, Delay: 100 * time.Millisecond, Reason: "handoff to orders.dlq nacked"}},
		{"5 handoff confirmed, ack ambiguous → unresolved, confirm kept", Outcome{Handler: permanent, Handoff: confirmedDLQ, Settlement: SettlementEvidence{Status: SettlementAmbiguous, Detail: "write failed"}}, 1, time.Minute,
			Plan{Action: ActLeave, Reason: "settlement ambiguous: write failed"}},
		{"6 inbox deferred → requeue, not an application retry", Outcome{Claim: InboxDeferred, Deferred: true, Reason: "lease held"}, 2, time.Minute,
			Plan{Action: ActRequeue, Delay: requeuePause, Reason: "deferred; no application retry used: lease held"}},
		{"6 commit ambiguous → deferred", Outcome{Handler: ok, Claim: InboxClaimed, Commit: CommitAmbiguous}, 1, time.Minute,
			Plan{Action: ActRequeue, Delay: requeuePause, Reason: "deferred; no application retry used"}},
		{"poison → DLQ before any handler", Outcome{Rejection: RejectPoison, Reason: "message id missing"}, 1, time.Minute,
			Plan{Action: ActHandoff, Destination: "orders.dlq", NextAttempt: 1, Reason: "poison envelope: message id missing"}},
		{"unsupported → DLQ at dispatch", Outcome{Rejection: RejectUnsupported, Reason: "OrderPlaced v9"}, 1, time.Minute,
			Plan{Action: ActHandoff, Destination: "orders.dlq", NextAttempt: 1, Reason: "unsupported: OrderPlaced v9"}},
		{"large body → broker-native dead-letter", Outcome{Rejection: RejectOversized, Reason: "body 2048 bytes"}, 1, time.Minute,
			Plan{Action: ActDeadLetter, Reason: "body 2048 bytes"}},
		{"redelivery of completed work → ack without the handler", Outcome{CompletedEarlier: true}, 2, time.Minute,
			Plan{Action: ActAck, Reason: "settled from the record: the work completed on an earlier delivery whose ack was ambiguous"}},
		{"ack sent → done", Outcome{Handler: ok, Settlement: SettlementEvidence{Status: AckSent}}, 1, time.Minute,
			Plan{Action: ActDone, Reason: "ack sent"}},
		{"no authority → unresolved", Outcome{Handler: ok, Settlement: SettlementEvidence{Status: SettlementNotAttempted, Detail: "channel closed"}}, 1, time.Minute,
			Plan{Action: ActLeave, Reason: "settlement not attempted: channel closed"}},
		{"forced shutdown cancelled the handler → requeue, no retry used", Outcome{Handler: HandlerResult{Ran: true, Kind: KindRetryable, Cancelled: true}}, 3, time.Minute,
			Plan{Action: ActRequeue, Delay: requeuePause, Reason: "handler cancelled by the forced shutdown; no application retry used"}},
		{"budget too short for a handoff → paced requeue", Outcome{Handler: permanent}, 1, 1500 * time.Millisecond,
			Plan{Action: ActRequeue, Delay: requeuePause, Reason: "budget too short for a handoff (permanent failure)"}},
		{"budget spent → unresolved, never settled late", Outcome{Handler: ok}, 1, 0,
			Plan{Action: ActLeave, Reason: "settlement budget spent"}},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			if diff := cmp.Diff(r.want, decide(r.o, r.attempt, q, r.remaining)); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecideSingleAttemptPolicyGoesStraightToDLQ(t *testing.T) {
	q := testSpec()
	q.Retry = RetryPolicy{MaxAttempts: 1}
	got := decide(Outcome{Handler: HandlerResult{Ran: true, Kind: KindRetryable}}, 1, q, time.Minute)
	if got.Action != ActHandoff || got.Destination != "orders.dlq" {
		t.Fatalf("plan = %+v, want a handoff to the DLQ", got)
	}
}
