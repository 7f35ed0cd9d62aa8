package ledger

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/lostline"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/lilytest"
	"github.com/lily-mq/lily/topology"
)

// The accounting is the no-loss oracle. These tests hand it made-up evidence
// of one message, m1, and check that it reports what is broken and accepts
// what is explained, so that a green ledger means something.

const dlq = "q.dlq"

// oneMessage is the evidence of a run of one message of behaviour b, whose
// handler returned success on each attempt recs show handled, and ended as
// each of recs says (a cancelled run with a retryable failure).
func oneMessage(b Behaviour, recs ...runtime.Record) evidence {
	succeeded, ended := map[workKey]bool{}, map[ending]bool{}
	for _, rec := range recs {
		k := workKey{rec.MessageID, rec.Attempt}
		if handled(rec) {
			succeeded[k] = true
		}
		switch rec.Handler {
		case "", "abandoned", "not started", "completed earlier":
		case "cancelled":
			ended[ending{k, "retryable"}] = true
		default:
			ended[ending{k, rec.Handler}] = true
		}
	}
	return evidence{
		queue: "q", dlq: dlq, ids: []string{"m1"}, behaviours: map[string]Behaviour{"m1": b},
		maxAttempts: 3, records: recs, runs: map[workKey]int{}, ambiguous: map[workKey]int{}, succeeded: succeeded, ended: ended,
		queued: map[string][]found{}, rows: map[string]int{},
	}
}

// Records as the runtime writes them, for m1.
func acked(attempt int) runtime.Record {
	return runtime.Record{MessageID: "m1", Attempt: attempt, Path: runtime.PathAcked, Handler: "ok", Reason: "handled"}
}

// committed is attempt's ACK of a handled success whose inbox claim
// committed with its work.
func committed(attempt int) runtime.Record {
	rec := acked(attempt)
	rec.Commit = "committed"
	return rec
}

func requeued(attempt int, why string) runtime.Record {
	return runtime.Record{MessageID: "m1", Attempt: attempt, Path: runtime.PathRequeued, Handler: "ok", Commit: "ambiguous", Reason: why}
}

func handedOffUnacked(attempt int, to string) runtime.Record {
	return runtime.Record{MessageID: "m1", Attempt: attempt, Path: runtime.PathUnresolved, Handler: "retryable",
		Handoff: "confirmed", Destination: to, Reason: "settlement not attempted: authority revoked"}
}

func wantProblem(t *testing.T, res *Result, about string) {
	t.Helper()
	for _, p := range res.Problems {
		if strings.Contains(p, about) {
			return
		}
	}
	t.Errorf("no problem about %q; problems: %q", about, res.Problems)
}

func wantNoProblem(t *testing.T, res *Result) {
	t.Helper()
	if len(res.Problems) != 0 {
		t.Errorf("problems: %q", res.Problems)
	}
}

func TestAccountReportsALostMessage(t *testing.T) {
	// Nothing acked its work and no queue holds it.
	res := account(oneMessage(Success, runtime.Record{MessageID: "m1", Attempt: 1, Path: runtime.PathUnresolved, Reason: "settlement budget spent"}))
	wantProblem(t, res, "m1 (success) is lost")
	if res.Fates[Lost] != 1 {
		t.Errorf("fates %v", res.Fates)
	}

	// The control: the same message acked after its handler ran.
	ok := account(oneMessage(Success, acked(1)))
	wantNoProblem(t, ok)
	if ok.Fates[Acked] != 1 {
		t.Errorf("fates %v", ok.Fates)
	}
}

func TestAccountReportsAnUnexplainedSecondRun(t *testing.T) {
	// The handler ran twice for attempt 1, but both journeys ended acked:
	// nothing sent the message back for the second run.
	e := oneMessage(Success, acked(1), acked(1))
	e.runs[workKey{"m1", 1}] = 2
	wantProblem(t, account(e), "m1 attempt 1: the handler ran 2 times; only 0 earlier journeys ended without proof")

	// The controls: the first journey was requeued (its commit's outcome
	// unknown), or its ACK was never proven.
	e = oneMessage(Success, requeued(1, "deferred; no application retry used"), acked(1))
	e.runs[workKey{"m1", 1}] = 2
	res := account(e)
	wantNoProblem(t, res)
	if res.SecondDeliveries["requeued: commit ambiguous"] != 1 {
		t.Errorf("second runs %v", res.SecondDeliveries)
	}

	// A journey that found the work done (settled from the record) is a
	// delivery to explain too: its own end explains one more, not two.
	fromRecord := runtime.Record{MessageID: "m1", Attempt: 1, Path: runtime.PathUnresolved, Handler: "completed earlier", Reason: "settlement budget spent"}
	e = oneMessage(Success, acked(1), fromRecord, acked(1))
	e.runs[workKey{"m1", 1}] = 2
	wantProblem(t, account(e), "m1 attempt 1: the handler ran 2 times and 1 more deliveries found its work done; only 1 earlier journeys ended without proof")

	e = oneMessage(Success, acked(1), acked(1))
	e.runs[workKey{"m1", 1}] = 2
	e.ambiguous[workKey{"m1", 1}] = 1
	res = account(e)
	wantNoProblem(t, res)
	if res.SecondDeliveries["ACK sent, never proven (ambiguous)"] != 1 {
		t.Errorf("second runs %v", res.SecondDeliveries)
	}
}

// A journey that ended without proof sent its message back once: for one
// more run of its attempt, or for one copy of it left in a queue, not both.
// A handoff's copy is another matter: an ACK lost after it brings the
// original back to run again beside the copy.
func TestAccountExplainsOneRedeliveryOnce(t *testing.T) {
	e := oneMessage(Success, acked(1), acked(1))
	e.runs[workKey{"m1", 1}] = 2
	e.ambiguous[workKey{"m1", 1}] = 1
	e.queued["m1"] = []found{{InMain, 1, false}}
	wantProblem(t, account(e), "m1 attempt 1: the handler ran 2 times, with 1 copies of it left in a queue; only 1 earlier journeys ended without proof")
	e.ambiguous[workKey{"m1", 1}] = 2
	res := account(e)
	wantNoProblem(t, res)
	if res.SecondDeliveries["ACK sent, never proven (ambiguous)"] != 1 {
		t.Errorf("second runs %v", res.SecondDeliveries)
	}

	// The ACK of a handoff to the DLQ was lost: the original ran again, and
	// its copy is there twice.
	dead := runtime.Record{MessageID: "m1", Attempt: 1, Path: runtime.PathDeadLettered, Handler: "permanent", Handoff: "confirmed", Destination: dlq}
	e = oneMessage(Refused, dead, dead)
	e.runs[workKey{"m1", 1}] = 2
	e.ambiguous[workKey{"m1", 1}] = 1
	e.queued["m1"] = []found{{InDLQ, 1, false}, {InDLQ, 1, false}}
	wantNoProblem(t, account(e))

	// A delivery in flight at the final abort while its handoff waited for
	// its confirm: its copy of attempt 2 may exist beside the one handed off
	// when it ran again.
	inFlight := runtime.Record{MessageID: "m1", Attempt: 1, Path: runtime.PathUnresolved,
		Reason: "still in flight when the consumer closed (final abort); the broker redelivers it; its handoff had no confirm yet"}
	e = oneMessage(Flaky, handedOff(1, "q.retry"), acked(2))
	e.runs[workKey{"m1", 1}] = 2
	e.runs[workKey{"m1", 2}] = 1
	e.queued["m1"] = []found{{InBucket, 2, false}}
	e.reports = []*runtime.Report{{Unresolved: []runtime.Record{inFlight}}}
	wantProblem(t, account(e), "m1 attempt 2: the handler ran 1 times, with 1 copies of it left in a queue; only 0 earlier journeys ended without proof")
	inFlight.Handoff, inFlight.Destination = "timed out", "q.retry"
	e.reports = []*runtime.Report{{Unresolved: []runtime.Record{inFlight}}}
	wantNoProblem(t, account(e))
}

// A delivery in flight when a consumer closed explains one more run of its
// own attempt, of no other, and only one.
func TestAccountExplainsARunInFlightAtCloseOnce(t *testing.T) {
	e := oneMessage(Flaky, handedOff(1, "q.retry"), acked(2), acked(2))
	e.runs[workKey{"m1", 1}] = 2
	e.runs[workKey{"m1", 2}] = 2
	wantProblem(t, account(e), "m1 attempt 2: the handler ran 2 times; only 0 earlier journeys ended without proof")

	e.reports = []*runtime.Report{{Unresolved: []runtime.Record{{MessageID: "m1", Attempt: 2, Path: runtime.PathUnresolved,
		Reason: "still in flight when the consumer closed (final abort); the broker redelivers it"}}}}
	res := account(e)
	wantProblem(t, res, "m1 attempt 1: the handler ran 2 times; only 0 earlier journeys ended without proof")
	if len(res.Problems) != 1 {
		t.Errorf("problems %q, want attempt 1's alone", res.Problems)
	}
	if res.SecondDeliveries["in flight when a consumer closed (unresolved)"] != 1 {
		t.Errorf("second runs %v", res.SecondDeliveries)
	}

	e.runs[workKey{"m1", 2}] = 3
	wantProblem(t, account(e), "m1 attempt 2: the handler ran 3 times; only 1 earlier journeys ended without proof")
}

// A run that ended with messages still in their queue, as a consumer that
// stalled leaves them, or one that held a delivery and never settled it
// (returned when its channel closed), proves nothing: the accounting says
// so, though nothing is lost, at the deadline or before it (the processes'
// quiet end).
func TestAccountReportsARunStoppedWithMessagesUnhandled(t *testing.T) {
	e := oneMessage(Refused)
	e.queued["m1"] = []found{{InMain, 1, true}}
	wantProblem(t, account(e), "the run ended with 1 messages neither acked nor dead-lettered")
	e.queued["m1"] = []found{{InBucket, 2, false}}
	wantProblem(t, account(e), "the run ended with 1 messages neither acked nor dead-lettered")
	e.pastDeadline = true
	wantProblem(t, account(e), "stopped at its deadline with 1 messages neither acked nor dead-lettered")

	// Past the deadline, a message acked and one in the DLQ are done.
	e = oneMessage(Success, acked(1))
	e.pastDeadline = true
	wantNoProblem(t, account(e))
}

// A run whose context ended before it was over proves nothing, though what
// it found so far is in order.
// A kind of fault the run could strike and never did was not tested: the
// ledger says so, and the soak fails on it, as TestLedger does.
func TestAccountReportsAFaultThatNeverStruck(t *testing.T) {
	e := oneMessage(Success, acked(1))
	e.runs[workKey{"m1", 1}] = 1
	e.faults = map[string]int{"stall": 2, faultForcedUnderBurst: 0}
	res := account(e)
	wantProblem(t, res, fmt.Sprintf("no fault %q struck: the run did not test it", faultForcedUnderBurst))
	if len(res.Problems) != 1 {
		t.Errorf("problems %q, want the fault's alone", res.Problems)
	}
}

func TestAccountReportsAnInterruptedRun(t *testing.T) {
	e := oneMessage(Success, acked(1))
	wantNoProblem(t, account(e))
	e.interrupted = true
	wantProblem(t, account(e), "the run was interrupted (its context ended) before it was over")

	// The wait for the journeys notes it.
	r := newRun(Config{}, spec("q", topology.Classic))
	r.ids, r.deadline = []string{"m1"}, time.Now().Add(time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := r.await(ctx, nil, nil); err != nil || !r.interrupted.Load() {
		t.Errorf("await returned %v, interrupted %v", err, r.interrupted.Load())
	}
}

// The inbox stops a delivery of work that committed, so the handler does
// not run twice; the delivery itself must still be explained, or an ACK
// that was lost, proven, would pass unseen.
func TestAccountReportsAnUnexplainedDuplicate(t *testing.T) {
	dup := runtime.Record{MessageID: "m1", Attempt: 1, Path: runtime.PathAcked, Commit: "duplicate", Reason: "duplicate"}
	e := oneMessage(InboxWork, committed(1), dup)
	e.runs[workKey{"m1", 1}] = 1
	e.rows["m1"] = 1
	wantProblem(t, account(e), "m1 attempt 1: the handler ran 1 times and 1 more deliveries found its work done; only 0 earlier journeys ended without proof")

	// The controls: the ACK of the run was never proven; the message was
	// published again.
	e.ambiguous[workKey{"m1", 1}] = 1
	res := account(e)
	wantNoProblem(t, res)
	if res.SecondDeliveries["ACK sent, never proven (ambiguous)"] != 1 {
		t.Errorf("second deliveries %v", res.SecondDeliveries)
	}
	e = oneMessage(InboxWork, committed(1), dup)
	e.runs[workKey{"m1", 1}] = 1
	e.rows["m1"] = 1
	e.resent = map[string]int{"m1": 1}
	e.arrivals = map[workKey][]arrival{{"m1", 1}: {{"p1", false}, {"p2", false}}}
	wantNoProblem(t, account(e))

	// A duplicate whose own ACK was lost explains the next one.
	lostDup := dup
	lostDup.Path = runtime.PathUnresolved
	e = oneMessage(InboxWork, committed(1), lostDup, dup)
	e.runs[workKey{"m1", 1}] = 1
	e.rows["m1"] = 1
	e.ambiguous[workKey{"m1", 1}] = 1
	wantNoProblem(t, account(e))

	// Two deliveries settled from the record after one ACK never proven:
	// the redelivery, and a send made again, whose arrival no handler or
	// after_delivery noted. Only the send made again explains the second.
	fromRecord := runtime.Record{MessageID: "m1", Attempt: 1, Path: runtime.PathAcked, Handler: "completed earlier"}
	e = oneMessage(InboxWork, committed(1), fromRecord, fromRecord)
	e.runs[workKey{"m1", 1}] = 1
	e.rows["m1"] = 1
	e.ambiguous[workKey{"m1", 1}] = 1
	wantProblem(t, account(e), "m1 attempt 1: the handler ran 1 times and 2 more deliveries found its work done; only 1 earlier journeys ended without proof")
	e.resent = map[string]int{"m1": 1}
	wantNoProblem(t, account(e))

	// A first delivery of a later attempt that finds the work done (its
	// attempt before committed, then its after_delivery ran out of time)
	// needs nothing.
	retried := runtime.Record{MessageID: "m1", Attempt: 1, Path: runtime.PathRetried, Handler: "ok", Commit: "committed", Handoff: "confirmed", Destination: "q.retry",
		Reason: "after_delivery failed on attempt 1 of 3: after_delivery: did not return within Config.StepTimeout"}
	e = oneMessage(InboxWork, retried, runtime.Record{MessageID: "m1", Attempt: 2, Path: runtime.PathAcked, Commit: "duplicate"})
	e.ended[ending{workKey{"m1", 1}, afterLate}] = true
	e.runs[workKey{"m1", 1}] = 1
	e.succeeded[workKey{"m1", 1}] = true
	e.rows["m1"] = 1
	wantNoProblem(t, account(e))
}

func TestAccountReportsAnUnexplainedExtraCopy(t *testing.T) {
	// The work was acked, and the message is still in the main queue too.
	e := oneMessage(Success, acked(1))
	e.queued["m1"] = []found{{InMain, 1, false}}
	wantProblem(t, account(e), "m1 (success) is present 2 times at the end")

	// The control: a retryable failure was handed off to the bucket (copy
	// confirmed), the original's ACK was never sent, and the original came
	// back and succeeded: the bucket's copy is the handoff's, explained.
	e = oneMessage(Flaky, handedOffUnacked(1, "q.retry.1s"), acked(1))
	e.runs[workKey{"m1", 1}] = 2
	e.queued["m1"] = []found{{InBucket, 2, false}}
	res := account(e)
	wantNoProblem(t, res)
	if res.ExtraCopies["handoff confirmed, the original's ACK not sent (unresolved)"] != 1 {
		t.Errorf("extra copies %v", res.ExtraCopies)
	}
}

// An explanation of an extra copy is one more delivery of its attempt: the
// original brought back, or published again. It explains a copy only when
// that delivery shows: a record of it, or the original left in a queue. A
// copy in the DLQ needs a delivery of its attempt sent there, and a later
// attempt a handoff of the one before.
func TestAccountExplainsACopyOnlyByItsAttempt(t *testing.T) {
	// An ACK never proven on attempt 1, which came back neither as a
	// delivery nor as a copy left: it explains no second DLQ copy.
	dead := runtime.Record{MessageID: "m1", Attempt: 1, Path: runtime.PathDeadLettered, Handler: "permanent", Handoff: "confirmed", Destination: dlq}
	e := oneMessage(Refused, dead)
	e.runs[workKey{"m1", 1}] = 1
	e.ambiguous[workKey{"m1", 1}] = 1
	e.queued["m1"] = []found{{InDLQ, 1, false}, {InDLQ, 1, false}}
	res := account(e)
	wantProblem(t, res, "m1 (permanent) is present 2 times at the end")
	wantProblem(t, res, "m1 (permanent) is in the DLQ 2 times from attempt 1, and only 1 deliveries of that attempt were sent there")
	// The control: the original ran again, and was sent there again.
	e.records = append(e.records, dead)
	e.runs[workKey{"m1", 1}] = 2
	wantNoProblem(t, account(e))

	// A success acked on attempt 1, its ACK never proven, and a copy of
	// attempt 3 in the DLQ, of which no delivery of attempts 2 or 3 shows.
	e = oneMessage(Success, acked(1))
	e.runs[workKey{"m1", 1}] = 1
	e.ambiguous[workKey{"m1", 1}] = 1
	e.queued["m1"] = []found{{InDLQ, 3, false}}
	res = account(e)
	wantProblem(t, res, "m1 (success) is present 2 times at the end")
	wantProblem(t, res, "m1 (success) is in the DLQ 1 times from attempt 3, and only 0 deliveries of that attempt were sent there")
	wantProblem(t, res, "m1 (success) attempt 3 was delivered or left in a queue, and no delivery of attempt 2 was handed off to a retry bucket")
	// The control: the ACK's original is left in the main queue.
	e.queued["m1"] = []found{{InMain, 1, false}}
	wantNoProblem(t, account(e))

	// A panic whose attempt 2 left no trace: attempt 3 came from nowhere.
	panicked := func(attempt int, to string) runtime.Record {
		rec := handedOff(attempt, to)
		rec.Handler = "panicked"
		if to == dlq {
			rec.Path = runtime.PathDeadLettered
		}
		return rec
	}
	e = oneMessage(Panics, panicked(1, "q.retry"), panicked(3, dlq))
	e.runs[workKey{"m1", 1}] = 1
	e.runs[workKey{"m1", 3}] = 1
	e.queued["m1"] = []found{{InDLQ, 3, false}}
	wantProblem(t, account(e), "m1 (panic) attempt 3 was delivered or left in a queue, and no delivery of attempt 2 was handed off to a retry bucket")
	// The controls: a killed process ran attempt 2 and left no record; or
	// the final abort found it waiting for its handoff's confirm.
	e.runs[workKey{"m1", 2}] = 1
	e.killed = map[workKey]int{{"m1", 2}: 1}
	wantNoProblem(t, account(e))
	e.killed = nil
	e.reports = []*runtime.Report{{Unresolved: []runtime.Record{{MessageID: "m1", Attempt: 2, Path: runtime.PathUnresolved, Handoff: "timed out", Destination: "q.retry",
		Reason: "still in flight when the consumer closed (final abort); the broker redelivers it; its handoff had no confirm yet"}}}}
	wantNoProblem(t, account(e))
}

// The run's queues are its own: a copy of a message that is not one of its
// ids is a stray, which no publish of the run made.
func TestAccountReportsAStrayCopy(t *testing.T) {
	e := oneMessage(Success, acked(1))
	wantNoProblem(t, account(e))
	e.queued["m9"] = []found{{InDLQ, 2, false}}
	wantProblem(t, account(e), `1 messages not of the run were found in its queues (strays); the first: "m9" [{in the DLQ 2 false}]`)
}

func TestAccountReportsADeadMessageAcked(t *testing.T) {
	// A permanent failure must end in the DLQ, not acked as handled.
	wantProblem(t, account(oneMessage(Refused, acked(1))), "m1 (permanent) was acked as handled")

	e := oneMessage(Refused, runtime.Record{MessageID: "m1", Attempt: 1, Path: runtime.PathDeadLettered, Handler: "permanent",
		Handoff: "confirmed", Destination: dlq, Reason: "permanent failure: refused"})
	e.queued["m1"] = []found{{InDLQ, 1, false}}
	wantNoProblem(t, account(e))
}

func TestAccountReportsWorkAckedWhoseHandlerNeverSucceeded(t *testing.T) {
	// The runtime's record says the handler returned ok; the ledger's own
	// handler never did: the runtime acked work that was not done.
	e := oneMessage(Success, acked(1))
	clear(e.succeeded)
	wantProblem(t, account(e), "m1 (success) was acked as handled on attempt 1, and its handler never returned success on it")
}

// An inbox duplicate is acked on the inbox's word that the message's work
// committed, and the inbox commits a claim only after a handler that
// returned success in time (an abandoned handler's late return is rolled
// back): the duplicate is held to the ledger's own note of such a success,
// and to the evidence that its commit went through, or may have.
func TestAccountHoldsADuplicateToCommittedWork(t *testing.T) {
	dup := func(attempt int) runtime.Record {
		return runtime.Record{MessageID: "m1", Attempt: attempt, Path: runtime.PathAcked, Commit: "duplicate", Reason: "duplicate"}
	}
	failed := func(attempt int, handler, commit string) runtime.Record {
		return runtime.Record{MessageID: "m1", Attempt: attempt, Path: runtime.PathRetried, Handler: handler, Commit: commit,
			Handoff: "confirmed", Destination: "q.retry"}
	}
	// A panic on attempt 1, handed off; attempt 2 acked as a duplicate.
	e := oneMessage(Panics, failed(1, "panicked", "rolled back"), dup(2))
	e.runs[workKey{"m1", 1}] = 1
	wantProblem(t, account(e), "m1 (panic) was acked as an inbox duplicate on attempt 2; it should be in the DLQ")

	// A success whose only record is a duplicate's.
	wantProblem(t, account(oneMessage(Success, dup(1))), "m1 (success) was acked as an inbox duplicate on attempt 1, and no run of its handler returned success and committed")

	// A hang whose attempt 1 timed out (its late return is rolled back),
	// and attempt 2 a duplicate.
	e = oneMessage(Hangs, failed(1, "timed out", "rollback pending"), dup(2))
	e.runs[workKey{"m1", 1}] = 1
	wantProblem(t, account(e), "m1 (hang) was acked as an inbox duplicate on attempt 2, and no run of its handler returned success and committed")

	// A success whose commit failed committed nothing.
	e = oneMessage(Success, failed(1, "ok", "failed"), dup(2))
	e.runs[workKey{"m1", 1}] = 1
	e.succeeded[workKey{"m1", 1}] = true
	wantProblem(t, account(e), "m1 (success) was acked as an inbox duplicate on attempt 2, and no run of its handler returned success and committed")

	// The controls. Attempt 2 committed; the original of attempt 1, its
	// ACK never proven, came back and met the claim.
	e = oneMessage(Flaky, handedOff(1, "q.retry"), committed(2), dup(1))
	e.runs[workKey{"m1", 1}] = 1
	e.runs[workKey{"m1", 2}] = 1
	e.ambiguous[workKey{"m1", 1}] = 1
	wantNoProblem(t, account(e))
	// A commit whose outcome was unknown, requeued.
	e = oneMessage(Success, requeued(1, "commit ambiguous"), dup(1))
	e.runs[workKey{"m1", 1}] = 1
	e.succeeded[workKey{"m1", 1}] = true
	wantNoProblem(t, account(e))
	// A run that left no record: its process was killed, or it was still
	// under way at the final abort, which sealed the report before it.
	e = oneMessage(Success, dup(1))
	e.runs[workKey{"m1", 1}] = 1
	e.succeeded[workKey{"m1", 1}] = true
	e.killed = map[workKey]int{{"m1", 1}: 1}
	wantNoProblem(t, account(e))
	e.killed = nil
	e.reports = []*runtime.Report{{Unresolved: []runtime.Record{{MessageID: "m1", Attempt: 1, Path: runtime.PathUnresolved,
		Reason: "still in flight when the consumer closed (final abort); the broker redelivers it"}}}}
	wantNoProblem(t, account(e))
	// A report lists others unresolved whose records it has (an ACK never
	// proven, a commit that failed and then the authority revoked): they
	// vouch for nothing.
	e.reports[0].Unresolved[0].Reason = "ack sent, never proven: the channel ended before the proof"
	wantProblem(t, account(e), "m1 (success) was acked as an inbox duplicate on attempt 1, and no run of its handler returned success and committed")
	clear(e.succeeded)
	wantProblem(t, account(e), "m1 (success) was acked as an inbox duplicate on attempt 1, and no run of its handler returned success and committed")
}

// A report that cut its list short may have left out a journey in flight
// at the final abort, whose run left no record: it vouches for such a run
// of its own consumer's alone, not for a run whose record shows its commit
// failed.
func TestAccountHoldsADuplicateToCommittedWorkBesideAListCutShort(t *testing.T) {
	failedCommit := runtime.Record{MessageID: "m1", Attempt: 1, Path: runtime.PathRetried, Handler: "ok", Commit: "failed",
		Handoff: "confirmed", Destination: "q.retry"}
	dup := runtime.Record{MessageID: "m1", Attempt: 2, Path: runtime.PathAcked, Commit: "duplicate", Reason: "duplicate"}
	const noCommit = "m1 (success) was acked as an inbox duplicate on attempt 2, and no run of its handler returned success and committed"
	e := oneMessage(Success, failedCommit, dup)
	e.runs[workKey{"m1", 1}] = 1
	e.succeeded[workKey{"m1", 1}] = true
	e.reports = []*runtime.Report{{Omitted: 1}}
	wantProblem(t, account(e), noCommit)
	// The consumer's own report, cut short: its run has its record.
	e.reported = []reported{{records: e.records, reports: e.reports, runs: e.runs}}
	wantProblem(t, account(e), noCommit)
	// Another consumer's report, cut short, with a run it wrote no record of.
	e.reported = append(e.reported, reported{name: "c2", reports: []*runtime.Report{{Omitted: 1}}, runs: map[workKey]int{{"m1", 3}: 1}})
	wantProblem(t, account(e), noCommit)
	// The control: a run of the consumer's own, with no record, and its
	// report cut short.
	e.reported[0].runs = map[workKey]int{{"m1", 1}: 2}
	res := account(e)
	for _, p := range res.Problems {
		if strings.Contains(p, "inbox duplicate") {
			t.Errorf("problem %q", p)
		}
	}
}

// Every ACK is checked on its own: a copy of the message left in a queue,
// or a success on another attempt, does not vouch for it.
func TestAccountChecksEveryACKOnItsOwn(t *testing.T) {
	// A run that timed out, acked, while the copy its handoff may have left
	// carried on and succeeded.
	timedOut := runtime.Record{MessageID: "m1", Attempt: 1, Path: runtime.PathRequeued, Handler: "timed out", Handoff: "timed out", Destination: "q.retry"}
	ackedTimedOut := runtime.Record{MessageID: "m1", Attempt: 1, Path: runtime.PathAcked, Handler: "timed out"}
	e := oneMessage(Hangs, timedOut, ackedTimedOut, acked(2))
	e.runs[workKey{"m1", 1}] = 2
	e.runs[workKey{"m1", 2}] = 1
	wantProblem(t, account(e), `m1 (hang) attempt 1 was acked, and its record shows no handled success (handler "timed out"`)

	// A run acked as handled, though the ledger's handler failed it; a copy
	// of the message is left in the bucket, or succeeded later.
	retryable := runtime.Record{MessageID: "m1", Attempt: 1, Path: runtime.PathRequeued, Handler: "retryable", Handoff: "timed out", Destination: "q.retry"}
	e = oneMessage(Flaky, retryable, acked(1))
	e.runs[workKey{"m1", 1}] = 2
	delete(e.succeeded, workKey{"m1", 1})
	e.queued["m1"] = []found{{InBucket, 2, false}}
	wantProblem(t, account(e), "m1 (retryable-then-success) was acked as handled on attempt 1, and its handler never returned success on it")
	e.queued["m1"] = nil
	e.succeeded[workKey{"m1", 2}] = true
	wantProblem(t, account(e), "m1 (retryable-then-success) was acked as handled on attempt 1, and its handler never returned success on it")
	e.succeeded[workKey{"m1", 1}] = true
	wantNoProblem(t, account(e))
}

func TestAccountExplainsAMessagePublishedAgain(t *testing.T) {
	// Two copies of a first attempt ran and one is still queued: a problem,
	// unless the publisher sent it again after a send without a confirm.
	e := oneMessage(Success, acked(1), acked(1))
	e.runs[workKey{"m1", 1}] = 2
	e.queued["m1"] = []found{{InMain, 1, false}}
	res := account(e)
	wantProblem(t, res, "m1 attempt 1: the handler ran 2 times")
	wantProblem(t, res, "m1 (success) is present 2 times at the end")

	// Sends made again explain nothing unless the runs came from two
	// publishes.
	e.resent = map[string]int{"m1": 2}
	e.arrivals = map[workKey][]arrival{{"m1", 1}: {{"p1", false}, {"p1", true}}}
	wantProblem(t, account(e), "m1 attempt 1: the handler ran 2 times")

	e.arrivals = map[workKey][]arrival{{"m1", 1}: {{"p1", false}, {"p2", false}}}
	res = account(e)
	wantNoProblem(t, res)
	if res.SecondDeliveries[publishedAgain] != 1 || res.ExtraCopies[publishedAgain] != 1 || res.Resent != 2 {
		t.Errorf("second runs %v, extra copies %v, resent %d", res.SecondDeliveries, res.ExtraCopies, res.Resent)
	}
}

func TestAccountExplainsABucketThatMovedItsCopyTwice(t *testing.T) {
	// Attempt 3 ran twice and two DLQ copies are left, after one confirmed
	// handoff to the bucket: unexplained on one node, where a classic
	// bucket dead-letters once.
	dead := runtime.Record{MessageID: "m1", Attempt: 3, Path: runtime.PathDeadLettered, Handler: "panicked", Handoff: "confirmed", Destination: dlq}
	e := oneMessage(Panics, handedOff(1, "q.retry.1s"), handedOff(2, "q.retry.1s"), dead, dead)
	e.runs[workKey{"m1", 1}] = 1
	e.runs[workKey{"m1", 2}] = 1
	e.runs[workKey{"m1", 3}] = 2
	e.queued["m1"] = []found{{InDLQ, 3, false}, {InDLQ, 3, false}}
	res := account(e)
	wantProblem(t, res, "m1 attempt 3: the handler ran 2 times")
	wantProblem(t, res, "m1 (panic) is present 2 times at the end")

	// On a cluster, the quorum bucket may have moved it back twice: the two
	// runs came as new deliveries of one publish.
	e.atLeastOnce = true
	e.arrivals = map[workKey][]arrival{{"m1", 3}: {{"p1", false}, {"p1", true}}}
	wantProblem(t, account(e), "m1 attempt 3: the handler ran 2 times")
	e.arrivals = map[workKey][]arrival{{"m1", 3}: {{"p1", false}, {"p1", false}}}
	res = account(e)
	wantNoProblem(t, res)
	if res.SecondDeliveries[bucketTwice] != 1 || res.ExtraCopies[bucketTwice] != 1 {
		t.Errorf("second runs %v, extra copies %v", res.SecondDeliveries, res.ExtraCopies)
	}
}

// handedOff is attempt's confirmed handoff to the bucket to, then its ACK.
func handedOff(attempt int, to string) runtime.Record {
	return runtime.Record{MessageID: "m1", Attempt: attempt, Path: runtime.PathRetried, Handler: "retryable", Handoff: "confirmed", Destination: to}
}

// The DLQ takes what the decision table sends there, and nothing else: a
// permanent failure at once, a retryable one (a failed commit among them)
// once its retries are exhausted, and, on a quorum queue, what its delivery
// limit stops. A copy's attempt says when it went there.
func TestAccountHoldsTheDLQToTheDecisionTable(t *testing.T) {
	commitFailed := func(attempt int, to string) runtime.Record {
		path := runtime.PathRetried
		if to == dlq {
			path = runtime.PathDeadLettered
		}
		return runtime.Record{MessageID: "m1", Attempt: attempt, Path: path, Handler: "ok", Commit: "failed", Handoff: "confirmed", Destination: to}
	}
	inDLQ := func(b Behaviour, attempt int, recs ...runtime.Record) evidence {
		e := oneMessage(b, recs...)
		for _, rec := range recs {
			e.runs[workKey{"m1", rec.Attempt}] = 1
		}
		e.queued["m1"] = []found{{InDLQ, attempt, false}}
		return e
	}

	// A failed commit with retries left goes to the bucket, an ambiguous
	// one back to the queue.
	res := account(inDLQ(InboxWork, 1, commitFailed(1, dlq)))
	wantProblem(t, res, `m1 (inbox-backed) attempt 1 of 3 was dead-lettered with retries left (handler "ok", commit "failed")`)
	wantProblem(t, res, "m1 (inbox-backed) is in the DLQ from attempt 1 of 3, with retries left")
	ambiguous := runtime.Record{MessageID: "m1", Attempt: 1, Path: runtime.PathDeadLettered, Handler: "ok", Commit: "ambiguous", Handoff: "confirmed", Destination: dlq}
	wantProblem(t, account(inDLQ(Success, 1, ambiguous)), `m1 (success) attempt 1 was handed off to q.dlq, though the table gives it back (handler "ok", commit "ambiguous")`)
	wantNoProblem(t, account(inDLQ(InboxWork, 3, commitFailed(1, "q.retry"), commitFailed(2, "q.retry"), commitFailed(3, dlq))))

	// Every attempt of a panic fails, and is retried until the last.
	panicked := func(attempt int, to string) runtime.Record {
		rec := handedOff(attempt, to)
		rec.Handler = "panicked"
		if to == dlq {
			rec.Path = runtime.PathDeadLettered
		}
		return rec
	}
	wantProblem(t, account(inDLQ(Panics, 1, panicked(1, dlq))), "m1 (panic) attempt 1 of 3 was dead-lettered with retries left")
	wantNoProblem(t, account(inDLQ(Panics, 3, panicked(1, "q.retry"), panicked(2, "q.retry"), panicked(3, dlq))))
	// A copy's attempt tells, whatever record is left.
	wantProblem(t, account(inDLQ(Panics, 2)), "m1 (panic) is in the DLQ from attempt 2 of 3, with retries left")

	// A permanent failure is not retried.
	refused := func(attempt int, to string) runtime.Record {
		rec := panicked(attempt, to)
		rec.Handler = "permanent"
		return rec
	}
	res = account(inDLQ(Refused, 3, refused(1, "q.retry"), refused(2, "q.retry"), refused(3, dlq)))
	wantProblem(t, res, "m1 (permanent) attempt 1, a permanent failure, was handed off to q.retry, not to the DLQ")
	wantProblem(t, res, "m1 (permanent) attempt 2, a permanent failure, was handed off to q.retry, not to the DLQ")
	wantProblem(t, account(inDLQ(Refused, 2)), "m1 (permanent) reached attempt 2, and its handler failed permanently on attempt 1")
	// Nor retried on the runtime's word: the ledger's handler failed
	// permanently, whatever the records call it.
	retried := func(attempt int, to string) runtime.Record {
		rec := panicked(attempt, to)
		rec.Handler = "retryable"
		return rec
	}
	e := inDLQ(Refused, 3, retried(1, "q.retry"), retried(2, "q.retry"), retried(3, dlq))
	clear(e.ended)
	for attempt := 1; attempt <= 3; attempt++ {
		e.ended[ending{workKey{"m1", attempt}, "permanent"}] = true
	}
	res = account(e)
	wantProblem(t, res, `m1 (permanent) attempt 1's record says its handler ended "retryable", and the ledger's runs of it ended "permanent"`)
	wantProblem(t, res, `m1 (permanent) attempt 1, a permanent failure by the ledger's handler, was handed off to q.retry (handler "retryable")`)
	// The control: a run the ledger saw end late may be timed out, and
	// retried; the next attempt fails permanently, to the DLQ.
	timedOut := panicked(1, "q.retry")
	timedOut.Handler = "timed out"
	wantNoProblem(t, account(inDLQ(Refused, 2, timedOut, refused(2, dlq))))
	// A panic is not what the records call it either.
	e = inDLQ(Panics, 3, retried(1, "q.retry"), retried(2, "q.retry"), retried(3, dlq))
	clear(e.ended)
	for attempt := 1; attempt <= 3; attempt++ {
		e.ended[ending{workKey{"m1", attempt}, "panicked"}] = true
	}
	wantProblem(t, account(e), `m1 (panic) attempt 2's record says its handler ended "retryable", and the ledger's runs of it ended "panicked"`)

	// Nor is the last attempt.
	wantProblem(t, account(inDLQ(Panics, 3, panicked(1, "q.retry"), panicked(2, "q.retry"), panicked(3, "q.retry"))), "m1 (panic) attempt 3 of 3 was handed off to q.retry, its retries exhausted")

	// A success is handed off only after a failed commit, or an
	// after_delivery the ledger saw run out of time (its own never fails,
	// and it opens no scope to clean up); what the final abort abandoned is
	// given back. The record's reason alone excuses nothing.
	succeeded := commitFailed(1, "q.retry")
	succeeded.Commit = "committed"
	wantProblem(t, account(inDLQ(InboxWork, 3, succeeded, commitFailed(2, "q.retry"), commitFailed(3, dlq))),
		`m1 (inbox-backed) attempt 1 was handed off to q.retry, though its handler, commit, cleanup and after_delivery succeeded (commit "committed")`)
	for _, reason := range []string{
		"cleanup failed on attempt 1 of 3: cleanup: close file: EIO",
		"after_delivery failed on attempt 1 of 3: after_delivery: audit down",
	} {
		said := succeeded
		said.Reason = reason
		wantProblem(t, account(inDLQ(InboxWork, 3, said, commitFailed(2, "q.retry"), commitFailed(3, dlq))),
			`m1 (inbox-backed) attempt 1 was handed off to q.retry, though its handler, commit, cleanup and after_delivery succeeded (commit "committed")`)
	}
	late := succeeded
	late.Reason = "after_delivery failed on attempt 1 of 3: after_delivery: did not return within Config.StepTimeout"
	e = inDLQ(InboxWork, 3, late, commitFailed(2, "q.retry"), commitFailed(3, dlq))
	e.ended[ending{workKey{"m1", 1}, afterLate}] = true
	wantNoProblem(t, account(e))
	abandoned := panicked(1, "q.retry")
	abandoned.Handler = "abandoned"
	wantProblem(t, account(inDLQ(Panics, 3, abandoned, panicked(2, "q.retry"), panicked(3, dlq))),
		`m1 (panic) attempt 1 was handed off to q.retry, though the table gives it back (handler "abandoned", commit "")`)

	// A quorum queue's delivery limit sends what the table gives back to the
	// DLQ, on any attempt.
	limited := ambiguous
	limited.Reason = "delivery limit 20 reached (x-delivery-count 20): deferred; no application retry used"
	wantNoProblem(t, account(inDLQ(Success, 1, limited)))
}

func TestAccountCountsOnlyTheBrokers406(t *testing.T) {
	e := oneMessage(Success, acked(1))
	e.lost = []string{`lily: connect (consume): amqp://guest@127.0.0.1:40683/%2F: Exception (501) Reason: "EOF"`}
	if res := account(e); res.Channel406 != 0 {
		t.Errorf("a port with 406 in it counted as %d 406s", res.Channel406)
	}
	e.lost = []string{`lily: declare: Exception (406) Reason: "PRECONDITION_FAILED - inequivalent arg 'x-queue-type'"`}
	wantProblem(t, account(e), "1 channels, connections or declares were refused with 406")
}

// A 406 of the topology declared again while consuming is told in the
// consumer's diagnostics alone, never in Report.Lost (intake was not lost):
// it counts all the same, in a run's consumer and in a consumer process. A
// refusal at a reconnect, told in both, counts once.
func TestAccountCountsA406OfTheTopologyDeclaredAgain(t *testing.T) {
	drifted := `lily: declare: Exception (406) Reason: "PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue 'q'"`
	refused := `lily: connect (consume): declare: Exception (406) Reason: "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'q'"`
	logged := func(stage, detail string) slog.Record {
		rec := slog.NewRecord(time.Now(), slog.LevelError, "lily", 0)
		rec.AddAttrs(slog.String("stage", stage), slog.String("detail", detail))
		return rec
	}
	newRunOf := func() *run {
		r := newRun(Config{}, spec("q", topology.Classic))
		r.ids, r.beh = []string{"m1"}, map[string]Behaviour{"m1": Success}
		r.records, r.succeeded[workKey{"m1", 1}] = []runtime.Record{acked(1)}, true
		return r
	}

	r := newRunOf()
	if !r.Enabled(context.Background(), slog.LevelError) {
		t.Fatal("the run does not take the consumers' errors")
	}
	_ = r.Handle(context.Background(), logged("topology-drifted", drifted))
	res := account(r.evidence(nil, nil, nil))
	wantProblem(t, res, "1 channels, connections or declares were refused with 406")
	_ = r.Handle(context.Background(), logged("topology-refused", refused))
	if res := account(r.evidence([]*runtime.Report{{Lost: []string{refused}}}, nil, nil)); res.Channel406 != 2 {
		t.Errorf("406s %d, want 2: the drift, and the refusal at a reconnect once; problems %q", res.Channel406, res.Problems)
	}
	// Refused at three attempts in a row: three lines logged, one line in
	// the report that counts them, written as the runtime writes it.
	_ = r.Handle(context.Background(), logged("topology-refused", refused))
	_ = r.Handle(context.Background(), logged("topology-refused", refused))
	if res := account(r.evidence([]*runtime.Report{{Lost: []string{lostline.Format(refused, 3)}}}, nil, nil)); res.Channel406 != 4 {
		t.Errorf("406s %d, want 4: the drift, and the refusal at three reconnects; problems %q", res.Channel406, res.Problems)
	}

	// A consumer process passes the line on to the parent.
	var out bytes.Buffer
	_ = diagnostics{&events{enc: json.NewEncoder(&out)}}.Handle(context.Background(), logged("topology-drifted", drifted))
	var ev event
	if err := json.Unmarshal(out.Bytes(), &ev); err != nil {
		t.Fatalf("the child told %q: %v", out.String(), err)
	}
	pr := &processRun{run: newRunOf()}
	(&children{pr: pr}).apply(&proc{}, ev)
	wantProblem(t, account(pr.evidence(nil, nil, nil)), "1 channels, connections or declares were refused with 406")
}

func TestAccountExplainsAnACKLostWithTheQuorumLeader(t *testing.T) {
	// Attempt 1 was handed off and acked, the ACK proven, and it ran again,
	// redelivered: unexplained on one node, and on a cluster where no node
	// went down.
	e := oneMessage(Flaky, handedOff(1, "q.retry.1s"), handedOff(1, "q.retry.1s"), acked(2))
	e.runs[workKey{"m1", 1}] = 2
	e.runs[workKey{"m1", 2}] = 1
	e.arrivals = map[workKey][]arrival{{"m1", 1}: {{"p1", false}, {"p1", true}}}
	wantProblem(t, account(e), "m1 attempt 1: the handler ran 2 times")
	e.atLeastOnce = true
	e.faults = map[string]int{"a PostgreSQL backend killed": 1}
	wantProblem(t, account(e), "m1 attempt 1: the handler ran 2 times")

	// A node went down: the quorum leader may have lost the ACK.
	e.faults[faultLeaderKilled] = 1
	res := account(e)
	wantNoProblem(t, res)
	if res.SecondDeliveries[settleLost] != 1 {
		t.Errorf("second runs %v", res.SecondDeliveries)
	}

	// Only a redelivery comes back that way, and only for an ACK proven.
	e.arrivals = map[workKey][]arrival{{"m1", 1}: {{"p1", false}, {"p1", false}}}
	wantProblem(t, account(e), "m1 attempt 1: the handler ran 2 times")
	e.arrivals = map[workKey][]arrival{{"m1", 1}: {{"p1", false}, {"p1", true}}}
	e.ambiguous[workKey{"m1", 1}] = 2
	res = account(e)
	wantNoProblem(t, res) // explained as ambiguous instead
	if res.SecondDeliveries[settleLost] != 0 {
		t.Errorf("second runs %v", res.SecondDeliveries)
	}

	// A redelivery another journey explains (one left unresolved) is not
	// explained twice: three runs from two deliveries stay a problem.
	e = oneMessage(Success, runtime.Record{MessageID: "m1", Attempt: 1, Path: runtime.PathUnresolved, Handler: "ok", Reason: "settlement not attempted: authority revoked"}, acked(1))
	e.atLeastOnce = true
	e.faults = map[string]int{faultLeaderKilled: 1}
	e.runs[workKey{"m1", 1}] = 3
	e.arrivals = map[workKey][]arrival{{"m1", 1}: {{"p1", false}, {"p1", true}}}
	wantProblem(t, account(e), "m1 attempt 1: the handler ran 3 times")

	// The ACK lost at the end: the original is left in the main queue,
	// redelivered, once its consumer closed.
	e = oneMessage(Success, acked(1))
	e.atLeastOnce = true
	e.faults = map[string]int{faultNodeStopped: 1}
	e.queued["m1"] = []found{{InMain, 1, false}}
	wantProblem(t, account(e), "m1 (success) is present 2 times at the end")
	e.queued["m1"] = []found{{InMain, 1, true}}
	res = account(e)
	wantNoProblem(t, res)
	if res.ExtraCopies[settleLost] != 1 {
		t.Errorf("extra copies %v", res.ExtraCopies)
	}
}

func TestReportsMustAgreeWithTheRecords(t *testing.T) {
	unresolved := runtime.Record{MessageID: "m1", Attempt: 1, Path: runtime.PathUnresolved, Handler: "ok", Reason: "settlement budget spent"}
	inFlight := runtime.Record{MessageID: "m2", Attempt: 1, Path: runtime.PathUnresolved,
		Reason: "still in flight when the consumer closed (final abort); the broker redelivers it"}
	report := func(counts map[runtime.Path]int, listed ...runtime.Record) *runtime.Report {
		return &runtime.Report{Counts: counts, Unresolved: listed}
	}
	cutShort := func(rep *runtime.Report, omitted int) *runtime.Report {
		rep.Omitted = omitted
		return rep
	}
	withCopies := func(rep *runtime.Report, copies ...runtime.Record) *runtime.Report {
		rep.PossibleCopies = copies
		return rep
	}
	proven := func(rep *runtime.Report, n int) *runtime.Report {
		rep.AcksProven = n
		return rep
	}
	handedOff := handedOffUnacked(1, "q.retry")
	nacked := runtime.Record{MessageID: "m1", Attempt: 1, Path: runtime.PathRequeued, Handler: "permanent", Handoff: "nacked", Destination: dlq}
	for _, c := range []struct {
		name    string
		records []runtime.Record
		reports []*runtime.Report
		want    []string
	}{
		{"agreeing, with one in flight at the final abort", []runtime.Record{acked(1), unresolved},
			[]*runtime.Report{proven(report(map[runtime.Path]int{runtime.PathAcked: 1, runtime.PathUnresolved: 2}, unresolved, inFlight), 1)}, nil},
		{"a settled delivery listed as unresolved", []runtime.Record{acked(1)},
			[]*runtime.Report{proven(report(map[runtime.Path]int{runtime.PathUnresolved: 1}, unresolved), 1)},
			[]string{"the reports count 0 deliveries acked, the records 1", "the reports count 1 deliveries unresolved, the records 0"}},
		{"an unresolved delivery counted as acked and not listed", []runtime.Record{unresolved},
			[]*runtime.Report{report(map[runtime.Path]int{runtime.PathAcked: 1})},
			[]string{"m1 attempt 1 ended unresolved, and no report lists it", "the reports count 1 deliveries acked, the records 0", "the reports count 0 deliveries unresolved, the records 1"}},
		// A list cut short is not checked; the counts always are.
		{"a miscount beside a report that left some out", []runtime.Record{acked(1), unresolved},
			[]*runtime.Report{proven(report(map[runtime.Path]int{runtime.PathAcked: 3, runtime.PathUnresolved: 1}), 1), cutShort(report(nil), 1)},
			[]string{"the reports count 3 deliveries acked, the records 1"}},
		{"one in flight at the final abort, left out", []runtime.Record{acked(1)},
			[]*runtime.Report{proven(cutShort(report(map[runtime.Path]int{runtime.PathAcked: 1, runtime.PathUnresolved: 1}), 1), 1)}, nil},
		// A report that left out one may have left out one alone, of its own.
		{"two unresolved, not listed, by a report that left out one", []runtime.Record{unresolved, unresolved},
			[]*runtime.Report{cutShort(report(map[runtime.Path]int{runtime.PathUnresolved: 2}, unresolved), 1)}, nil},
		{"three unresolved, two not listed, by a report that left out one", []runtime.Record{unresolved, unresolved, unresolved},
			[]*runtime.Report{cutShort(report(map[runtime.Path]int{runtime.PathUnresolved: 3}, unresolved), 1)},
			[]string{"m1 attempt 1 ended unresolved, and no report lists it", "m1 attempt 1 ended unresolved, and no report lists it"}},
		{"one unresolved not listed, and the one left out in flight at the final abort", []runtime.Record{unresolved},
			[]*runtime.Report{cutShort(report(map[runtime.Path]int{runtime.PathUnresolved: 2}), 1)},
			[]string{"m1 attempt 1 ended unresolved, and no report lists it"}},
		{"more in flight at the final abort than left out", []runtime.Record{acked(1)},
			[]*runtime.Report{proven(cutShort(report(map[runtime.Path]int{runtime.PathAcked: 1, runtime.PathUnresolved: 2}), 1), 1)},
			[]string{"the reports count 2 deliveries unresolved, the records 0"}},
		// A handoff copy that may repeat is listed among the possible copies.
		{"a confirmed handoff left unresolved, among the possible copies", []runtime.Record{handedOff},
			[]*runtime.Report{withCopies(report(map[runtime.Path]int{runtime.PathUnresolved: 1}, handedOff), handedOff)}, nil},
		{"a confirmed handoff left unresolved, not among the possible copies", []runtime.Record{handedOff},
			[]*runtime.Report{report(map[runtime.Path]int{runtime.PathUnresolved: 1}, handedOff)},
			[]string{"m1 attempt 1's handoff to q.retry may have left a copy while its original comes back (handoff confirmed, unresolved), and no report lists it"}},
		{"a nacked handoff, not among the possible copies", []runtime.Record{nacked},
			[]*runtime.Report{report(map[runtime.Path]int{runtime.PathRequeued: 1})},
			[]string{"m1 attempt 1's handoff to q.dlq may have left a copy"}},
		{"a nacked handoff, among the possible copies", []runtime.Record{nacked},
			[]*runtime.Report{withCopies(report(map[runtime.Path]int{runtime.PathRequeued: 1}), nacked)}, nil},
	} {
		wantProblems(t, c.name, reportsDisagree(reported{records: c.records, reports: c.reports}), c.want)
	}
}

// wantProblems checks that got holds a problem for each of want, in order,
// each starting as want's does, and no other.
func wantProblems(t *testing.T, name string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: problems %q, want %d", name, got, len(want))
		return
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("%s: problem %q, want %q", name, got[i], w)
		}
	}
}

// Every ACK sent was proven or logged never proven, and the reports list
// each ACK never proven unresolved, and among the possible copies after a
// confirmed handoff, as the runtime does (acksAmbiguous).
func TestReportsAccountForEveryACKNeverProven(t *testing.T) {
	unproven := func(rec runtime.Record) runtime.Record {
		return runtime.Record{MessageID: rec.MessageID, Attempt: rec.Attempt, Path: runtime.PathUnresolved,
			Handoff: rec.Handoff, Destination: rec.Destination, Reason: "ack sent, never proven: the channel ended before the proof"}
	}
	retried := runtime.Record{MessageID: "m1", Attempt: 1, Path: runtime.PathRetried, Handler: "retryable", Handoff: "confirmed", Destination: "q.retry"}
	inFlight := runtime.Record{MessageID: "m2", Attempt: 1, Path: runtime.PathUnresolved,
		Reason: "still in flight when the consumer closed (final abort); the broker redelivers it"}
	report := func(path runtime.Path, proven int, listed, copies []runtime.Record, omitted int) *runtime.Report {
		return &runtime.Report{Counts: map[runtime.Path]int{path: 1}, AcksProven: proven, Unresolved: listed, PossibleCopies: copies, Omitted: omitted}
	}
	once := map[workKey]int{{"m1", 1}: 1}
	for _, c := range []struct {
		name      string
		records   []runtime.Record
		report    *runtime.Report
		ambiguous map[workKey]int
		want      []string
	}{
		{"an ACK never proven, listed", []runtime.Record{acked(1)},
			report(runtime.PathAcked, 0, []runtime.Record{unproven(acked(1))}, nil, 0), once, nil},
		{"an ACK never proven, listed nowhere and counted proven", []runtime.Record{acked(1)},
			report(runtime.PathAcked, 1, nil, nil, 0), once,
			[]string{"m1 attempt 1: 1 ACKs sent were never proven, and the reports list 0 unresolved so",
				"the reports count 1 ACKs proven and 1 were logged never proven, of 1 ACKs the records show sent"}},
		{"an ACK neither proven nor logged never proven", []runtime.Record{acked(1)},
			report(runtime.PathAcked, 0, nil, nil, 0), nil,
			[]string{"the reports count 0 ACKs proven and 0 were logged never proven, of 1 ACKs the records show sent"}},
		{"an ACK after a confirmed handoff never proven, among the possible copies", []runtime.Record{retried},
			report(runtime.PathRetried, 0, []runtime.Record{unproven(retried)}, []runtime.Record{unproven(retried)}, 0), once, nil},
		{"an ACK after a confirmed handoff never proven, not among the possible copies", []runtime.Record{retried},
			report(runtime.PathRetried, 0, []runtime.Record{unproven(retried)}, nil, 0), once,
			[]string{"m1 attempt 1: 1 ACKs after a confirmed handoff were never proven, and the reports list 0 among the possible copies"}},
		// A journey the seal counted, without its record, may have sent its ACK.
		{"an ACK proven of a journey in flight at the final abort", nil,
			report(runtime.PathUnresolved, 1, []runtime.Record{inFlight}, nil, 0), nil, nil},
		{"an ACK never proven, left out of a list cut short", []runtime.Record{acked(1)},
			report(runtime.PathAcked, 0, nil, nil, 1), once, nil},
	} {
		wantProblems(t, c.name, reportsDisagree(reported{records: c.records, reports: []*runtime.Report{c.report}, ambiguous: c.ambiguous}), c.want)
	}
}

// A handler still running at the final abort that returns success after
// the seal committed nothing (the inbox rolls back an abandoned handler's
// late nil): the ledger does not note it, so an inbox duplicate of its
// message that rests on it alone is a problem.
func TestALateSuccessVouchesForNothing(t *testing.T) {
	r := newRun(Config{N: 1}, spec("late-test", topology.Classic))
	r.assign()
	id := r.ids[0]
	r.beh[id] = Success
	var sealed atomic.Bool
	handle, d := deliveryFor(t, r, r.handler(&sealed, r.noteSuccess, r.noteEnded), id)
	if err := handle(t.Context(), d); err != nil || !r.succeeded[workKey{id, 1}] {
		t.Fatalf("a success before the seal: error %v, noted %v", err, r.succeeded)
	}
	clear(r.succeeded)
	sealed.Store(true)
	if err := handle(t.Context(), d); err != nil || r.succeeded[workKey{id, 1}] {
		t.Errorf("a success after the seal: error %v, noted %v", err, r.succeeded)
	}
}

// A hang's first run returns nil after its handler timeout. The runtime
// takes that success when it comes before its wait for the run ended,
// which a loaded machine may delay past the 200 ms the hang outlives the
// timeout by: the ledger notes it as the success it is, so that an ACK of
// it is no problem (and a give-up still retries the message).
func TestAHangsLateNilIsASuccess(t *testing.T) {
	r := newRun(Config{N: 1}, spec("hang-test", topology.Classic))
	r.assign()
	r.spec.HandlerTimeout = 10 * time.Millisecond
	id := r.ids[0]
	r.beh[id] = Hangs
	var sealed atomic.Bool
	handle, d := deliveryFor(t, r, r.handler(&sealed, r.noteSuccess, r.noteEnded), id)
	if err := handle(t.Context(), d); err != nil || !r.succeeded[workKey{id, 1}] {
		t.Errorf("the hang's late nil: error %v, noted %v", err, r.succeeded)
	}
}

// The handler notes how each run ended from what it did, not from the
// runtime's reading of it: a permanent failure, a panic, and a run that
// returned at its deadline, which the runtime may call timed out.
func TestTheHandlerNotesHowEachRunEnded(t *testing.T) {
	r := newRun(Config{N: 3}, spec("ended-test", topology.Classic))
	r.assign()
	var sealed atomic.Bool
	handle := r.handler(&sealed, r.noteSuccess, r.noteEnded)
	routes := runtime.Routes{{Type: messageTyp, Version: 1, ContentType: "application/json"}: handle}
	run := func(ctx context.Context, id string, b Behaviour) {
		t.Helper()
		r.beh[id] = b
		d, err := lilytest.RawDelivery(r.spec, routes, runtime.NewPublishing(envelope.Message{Type: messageTyp}, 1, id, []byte(`{}`)))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = recover() }()
		_ = handle(ctx, d)
	}
	run(t.Context(), r.ids[0], Refused)
	run(t.Context(), r.ids[1], Panics)
	late, cancel := context.WithDeadline(t.Context(), time.Now())
	defer cancel()
	run(late, r.ids[2], Success)
	want := map[ending]bool{
		{workKey{r.ids[0], 1}, "permanent"}: true,
		{workKey{r.ids[1], 1}, "panicked"}:  true,
		{workKey{r.ids[2], 1}, "ok"}:        true,
		{workKey{r.ids[2], 1}, "timed out"}: true,
	}
	if fmt.Sprint(r.ended) != fmt.Sprint(want) {
		t.Errorf("noted %v, want %v", r.ended, want)
	}
}

// The runtime sees a run's return only once its notes are sent, and a
// child's send waits for every other event's: a run whose notes stall
// past its deadline may be timed out, and is noted so.
func TestTheHandlerNotesATimeoutAfterItsNotesStall(t *testing.T) {
	r := newRun(Config{N: 1}, spec("stall-test", topology.Classic))
	r.assign()
	r.beh[r.ids[0]] = Success
	var sealed atomic.Bool
	var words []string
	handle := r.handler(&sealed, r.noteSuccess, func(_ runtime.RawDelivery, word string) {
		if word != "timed out" {
			time.Sleep(300 * time.Millisecond) // a stalled write
		}
		words = append(words, word)
	})
	routes := runtime.Routes{{Type: messageTyp, Version: 1, ContentType: "application/json"}: handle}
	d, err := lilytest.RawDelivery(r.spec, routes, runtime.NewPublishing(envelope.Message{Type: messageTyp}, 1, r.ids[0], []byte(`{}`)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if err := handle(ctx, d); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(words, "timed out") || !slices.Contains(words, "ok") {
		t.Errorf("noted %q, want \"ok\" and \"timed out\"", words)
	}
}

// deliveryFor is handle, the ledger's handler, and a delivery of id for it,
// as the runtime hands it over.
func deliveryFor(t *testing.T, r *run, handle func(context.Context, runtime.RawDelivery) error, id string) (func(context.Context, runtime.RawDelivery) error, runtime.RawDelivery) {
	t.Helper()
	routes := runtime.Routes{{Type: messageTyp, Version: 1, ContentType: "application/json"}: handle}
	d, err := lilytest.RawDelivery(r.spec, routes, runtime.NewPublishing(envelope.Message{Type: messageTyp}, 1, id, []byte(`{}`)))
	if err != nil {
		t.Fatal(err)
	}
	return handle, d
}
