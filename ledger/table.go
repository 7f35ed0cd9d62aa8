package ledger

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/lily-mq/lily/runtime"
)

// settlesLost bounds, on a cluster where a node went down, the ACKs proven
// and then lost before a quorum queue committed them (settleLost). A run
// of an attempt is explained so only by a redelivery no journey without
// proof explains, and only by an ACK proven before it, not the attempt's
// last journey's: at most the fewer of the two. The last journey's ACK,
// lost so, leaves its message in a queue, redelivered: a delivery still to
// come. It counts both by attempt.
func settlesLost(e evidence) map[workKey]int {
	runs := map[workKey]int{}
	if !e.atLeastOnce || !slices.ContainsFunc(slices.Collect(maps.Keys(e.faults)), func(k string) bool { return nodeFault(k) && e.faults[k] > 0 }) {
		return runs
	}
	journeys := map[workKey][]runtime.Record{}
	for _, rec := range e.records {
		k := workKey{rec.MessageID, rec.Attempt}
		journeys[k] = append(journeys[k], rec)
	}
	left := map[workKey]int{}
	for id, copies := range e.queued {
		for _, f := range copies {
			if f.redelivered {
				left[workKey{id, f.attempt}]++
			}
		}
	}
	for k, recs := range journeys {
		sent, unproven := 0, e.ambiguous[k]
		for _, rec := range recs {
			if ackSent(rec) {
				sent++
			}
			if (ran(rec) || doneBefore(rec)) && (rec.Path == runtime.PathRequeued || rec.Path == runtime.PathUnresolved) {
				unproven++
			}
		}
		back := 0
		for _, a := range e.arrivals[k] {
			if a.redelivered {
				back++
			}
		}
		last := 0
		if ackSent(recs[len(recs)-1]) {
			last = 1
		}
		runs[k] = min(max(sent-last-e.ambiguous[k], 0), max(back-unproven, 0))
		if last == 1 && e.ambiguous[k] < sent {
			runs[k] += min(left[k], 1)
		}
	}
	return runs
}

// killedAfterAck says whether a process killed before its record may have
// acked the work of id, whose attempts run to last: the handler's run of an
// attempt, which returned success (so that the claim committed with it),
// or a delivery of an attempt it settled as an inbox duplicate, when
// committed says a success committed. Another attempt's success does not
// vouch for a killed run: a run killed before it succeeded acked nothing.
func killedAfterAck(id string, last int, e evidence, committed bool) bool {
	for attempt := 1; attempt <= last; attempt++ {
		k := workKey{id, attempt}
		if e.killed[k] > 0 && e.succeeded[k] || e.killedDuplicates[k] > 0 && committed {
			return true
		}
	}
	return false
}

// ackSent says whether rec's journey ended with an ACK, or a dead-lettering
// NACK, sent.
func ackSent(rec runtime.Record) bool {
	switch rec.Path {
	case runtime.PathAcked, runtime.PathRetried, runtime.PathDeadLettered, runtime.PathBrokerDeadLettered:
		return true
	}
	return false
}

// doneBefore says whether rec's journey found its attempt's work done: an
// inbox duplicate, or one settled from the consumer's record.
func doneBefore(rec runtime.Record) bool {
	return rec.Commit == "duplicate" || rec.Handler == "completed earlier"
}

// ran says whether rec's journey ran the handler: not one settled from the
// record of earlier work, nor one the consumer aborted before it started.
func ran(rec runtime.Record) bool {
	switch rec.Handler {
	case "", "completed earlier", "not started":
		return false
	}
	return true
}

// wrongAck says what is wrong with rec, a delivery of a message of
// behaviour b, if it is an ACK the decision table does not give: an ACK
// settles a handled success, on an attempt the ledger's own handler saw
// succeed, or a delivery whose work was done before: an inbox duplicate,
// when committed says a success of the message's handler committed (or
// may have), or one settled from the record. It says "" when nothing is.
func wrongAck(rec runtime.Record, b Behaviour, succeeded map[workKey]bool, committed bool) string {
	switch {
	case rec.Path != runtime.PathAcked:
		return ""
	case rec.Commit == "duplicate" && b.dead():
		return fmt.Sprintf("was acked as an inbox duplicate on attempt %d; it should be in the DLQ", rec.Attempt)
	case rec.Commit == "duplicate" && !committed:
		return fmt.Sprintf("was acked as an inbox duplicate on attempt %d, and no run of its handler returned success and committed", rec.Attempt)
	case doneBefore(rec):
		return ""
	case !handled(rec):
		return fmt.Sprintf("attempt %d was acked, and its record shows no handled success (handler %q, commit %q, handoff %q)", rec.Attempt, rec.Handler, rec.Commit, rec.Handoff)
	case b.dead():
		return "was acked as handled; it should be in the DLQ"
	case !succeeded[workKey{rec.MessageID, rec.Attempt}]:
		return fmt.Sprintf("was acked as handled on attempt %d, and its handler never returned success on it", rec.Attempt)
	}
	return ""
}

func fateOf(copies []found, acked bool) Fate {
	for _, want := range []Fate{InDLQ, InBucket, InMain} {
		if slices.ContainsFunc(copies, func(f found) bool { return f.fate == want }) {
			return want
		}
	}
	if acked {
		return Acked
	}
	return Lost
}

// wrongHandoff says what is wrong with rec's handoff by the decision table,
// or "" when nothing is. A permanent failure goes to the DLQ at once; a
// retryable one (a failed commit among them) to the retry bucket while
// retries are left, to the DLQ once they are exhausted; a rejected delivery
// to the DLQ. What the table gives back (a deferral, an ambiguous commit, a
// handler the forced stop cancelled or the final abort abandoned) goes
// nowhere, unless a quorum queue's delivery limit is reached: then to the
// DLQ, as the reason says. A handler that succeeded is handed off only
// after a failed commit, or an after_delivery the ledger saw run out of
// time (ended's afterLate): its own returns nil, and it opens no scope, so
// no cleanup fails. The record's reason, the runtime's word, excuses
// nothing on its own.
func wrongHandoff(rec runtime.Record, dlq string, maxAttempts int, ended map[ending]bool) string {
	toDLQ := rec.Destination == dlq
	switch {
	case rec.Handoff == "", toDLQ && deliveryLimit(rec):
		return ""
	case rec.Commit == "ambiguous" || rec.Commit == "deferred" || rec.Handler == "cancelled" || rec.Handler == "abandoned" || rec.Handler == "not started":
		return fmt.Sprintf("attempt %d was handed off to %s, though the table gives it back (handler %q, commit %q)", rec.Attempt, rec.Destination, rec.Handler, rec.Commit)
	case rec.Handler == "ok" && rec.Commit != "failed" && !ended[ending{workKey{rec.MessageID, rec.Attempt}, afterLate}]:
		return fmt.Sprintf("attempt %d was handed off to %s, though its handler, commit, cleanup and after_delivery succeeded (commit %q)", rec.Attempt, rec.Destination, rec.Commit)
	case rec.Rejection != "" && !toDLQ:
		return fmt.Sprintf("attempt %d was handed off to %s, though rejected (%s)", rec.Attempt, rec.Destination, rec.Rejection)
	case rec.Rejection != "":
		return ""
	case rec.Handler == "permanent" && !toDLQ:
		return fmt.Sprintf("attempt %d, a permanent failure, was handed off to %s, not to the DLQ", rec.Attempt, rec.Destination)
	case !toDLQ && rec.Attempt >= maxAttempts:
		return fmt.Sprintf("attempt %d of %d was handed off to %s, its retries exhausted", rec.Attempt, maxAttempts, rec.Destination)
	case toDLQ && rec.Handler != "permanent" && rec.Attempt < maxAttempts:
		return fmt.Sprintf("attempt %d of %d was dead-lettered with retries left (handler %q, commit %q)", rec.Attempt, maxAttempts, rec.Handler, rec.Commit)
	}
	return ""
}

// wrongResult says what is wrong with the handler's result rec gives, or ""
// when nothing is: a run's word must be how a run of its attempt ended, as
// the ledger's handler noted it (endedAs), and "cancelled" (a failure the
// forced stop cancelled) how one ended with an error. The words of runs
// the handler never finished ("abandoned", "not started") or that never
// ran it ("completed earlier", none) say nothing of its result. The
// runtime records "timed out" at the deadline, before the handler returns:
// a run in a process killed before it told its end (unheard) may be so.
func wrongResult(rec runtime.Record, ended map[ending]bool, unheard map[workKey]int) string {
	k := workKey{rec.MessageID, rec.Attempt}
	switch rec.Handler {
	case "", "abandoned", "not started", "completed earlier":
		return ""
	case "cancelled":
		if ended[ending{k, "retryable"}] || ended[ending{k, "permanent"}] {
			return ""
		}
	default:
		if ended[ending{k, rec.Handler}] || rec.Handler == "timed out" && unheard[k] > 0 {
			return ""
		}
	}
	return fmt.Sprintf("attempt %d's record says its handler ended %q, and the ledger's runs of it ended %s", rec.Attempt, rec.Handler, endings(k, ended))
}

// endings lists how the ledger's runs of k ended.
func endings(k workKey, ended map[ending]bool) string {
	var of []string
	for _, word := range []string{"ok", "retryable", "permanent", "panicked", "timed out"} {
		if ended[ending{k, word}] {
			of = append(of, fmt.Sprintf("%q", word))
		}
	}
	if len(of) == 0 {
		return "in no way it heard"
	}
	return strings.Join(of, ", ")
}

// kindsOf are the failure kinds a copy of a run's attempt carries, by how
// the run ended: a handler that succeeded fails only in its commit or
// after_delivery, which the copy calls "none"; a panic and a timeout are
// retryable.
var kindsOf = map[string]string{"ok": "none", "retryable": "retryable", "panicked": "retryable", "timed out": "retryable", "permanent": "permanent"}

// wrongFailure says what is wrong with the failure f, a copy drained at
// the end, says, or "" when nothing is: a copy for a retry bucket is of a
// retryable failure (or a success whose commit or after_delivery failed), a
// DLQ copy with retries left of a permanent one (or one a quorum queue's
// delivery limit sent there, whatever it was), and its kind
// is how one of the ledger's runs of that attempt ended (kindsOf), or, for
// a timeout's kind, a run the ledger never heard end (unheard): the
// runtime hands a timeout off before the handler returns.
func wrongFailure(f failure, e evidence) string {
	k := workKey{f.id, f.attempt}
	ran := false
	for word, kind := range kindsOf {
		ran = ran || kind == f.kind && e.ended[ending{k, word}]
	}
	switch {
	case f.fate == InBucket && f.kind != "retryable" && f.kind != "none":
		return fmt.Sprintf("has a copy for a retry bucket from attempt %d whose failure kind is %q", f.attempt, f.kind)
	case f.fate == InDLQ && f.kind != "permanent" && f.attempt < e.maxAttempts && !f.limited:
		return fmt.Sprintf("has a DLQ copy from attempt %d of %d, retries left, whose failure kind is %q", f.attempt, e.maxAttempts, f.kind)
	case ran || f.limited || f.kind == kindsOf["timed out"] && e.unheard[k] > 0:
		return ""
	}
	return fmt.Sprintf("has a copy whose failure kind is %q on attempt %d, and the ledger's runs of it ended %s", f.kind, f.attempt, endings(k, e.ended))
}

// refusedRetried says what is wrong with the attempts of id, a message
// whose handler fails permanently on every attempt, or "" when nothing
// is. Whatever the records say, the table sends such a failure to the DLQ
// on the attempt it came with: the message reaches attempt n > 1 (in a
// record, a run, or a copy found at the end) only through a handoff of
// attempt n-1 to a retry bucket, after a run of it that the runtime may
// fairly have called timed out (the ledger saw it end late), or one the
// ledger never heard end (its process was killed first; one killed after
// it told "permanent" excuses nothing). A requeue, a deferral or a
// redelivery after an ambiguous ACK keeps the attempt.
func refusedRetried(id string, recs []runtime.Record, copies []found, lastRun int, e evidence) string {
	late := func(attempt int) bool {
		k := workKey{id, attempt}
		return e.ended[ending{k, "timed out"}] || e.unheard[k] > 0
	}
	for _, rec := range recs {
		if rec.Handoff != "" && rec.Destination != e.dlq && !late(rec.Attempt) {
			return fmt.Sprintf("attempt %d, a permanent failure by the ledger's handler, was handed off to %s (handler %q)", rec.Attempt, rec.Destination, rec.Handler)
		}
	}
	last := lastRun
	for _, rec := range recs {
		last = max(last, rec.Attempt)
	}
	for _, f := range copies {
		last = max(last, f.attempt)
	}
	for attempt := 2; attempt <= last; attempt++ {
		if !late(attempt - 1) {
			return fmt.Sprintf("reached attempt %d, and its handler failed permanently on attempt %d, which goes to the DLQ, not to a retry", last, attempt-1)
		}
	}
	return ""
}

// deadByTable says whether the decision table sends a delivery of attempt
// of a message of behaviour b to the DLQ: the ledger's permanent failure
// (the handler fails so on every attempt; refusedRetried says which it may
// reach), any failure once the retries are exhausted, or, as a record of
// that attempt says, a rejection or a quorum queue's delivery limit.
func deadByTable(b Behaviour, attempt int, recs []runtime.Record, e evidence) bool {
	if b == Refused || attempt >= e.maxAttempts {
		return true
	}
	return slices.ContainsFunc(recs, func(rec runtime.Record) bool {
		return rec.Attempt == attempt && rec.Destination == e.dlq && (rec.Rejection != "" || deliveryLimit(rec))
	})
}

// handoffs counts the deliveries of attempt among recs that sent a copy,
// or may have, to the DLQ dlq (toDLQ) or to a retry bucket: a handoff
// confirmed, or one that timed out, failed or was nacked after its publish
// was written (a returned one was not enqueued), and, to the DLQ, a NACK
// that dead-lettered the original. A quorum queue's delivery limit hands
// to the DLQ after a handoff to the bucket that failed (decide's giveBack),
// whose record names the DLQ: it counts as a handoff to both.
func handoffs(recs []runtime.Record, attempt int, dlq string, toDLQ bool) int {
	n := 0
	for _, rec := range recs {
		switch {
		case rec.Attempt != attempt:
		case toDLQ && rec.Path == runtime.PathBrokerDeadLettered:
			n++
		case rec.Handoff == "" || rec.Handoff == "returned":
		case !toDLQ && deliveryLimit(rec), (rec.Destination == dlq) == toDLQ:
			n++
		}
	}
	return n
}

// deliveryLimit: rec's handoff went to the DLQ because its quorum queue's
// delivery limit was reached (decide's giveBack).
func deliveryLimit(rec runtime.Record) bool { return strings.HasPrefix(rec.Reason, "delivery limit ") }

// explain names why a journey ended without proof, in a few words.
func explain(rec runtime.Record) string {
	switch {
	case rec.Handoff != "" && rec.Handoff != "confirmed":
		return "handoff " + rec.Handoff
	case rec.Handler == "cancelled":
		return "handler cancelled by the forced shutdown"
	case rec.Commit == "ambiguous":
		return "commit ambiguous"
	case strings.HasPrefix(rec.Reason, "settlement not attempted: "):
		return "settlement not attempted (" + strings.SplitN(strings.TrimPrefix(rec.Reason, "settlement not attempted: "), ":", 2)[0] + ")"
	case strings.HasPrefix(rec.Reason, "settlement ambiguous"):
		return "settlement ambiguous"
	}
	return rec.Reason
}

func paths(recs []runtime.Record) string {
	var b strings.Builder
	for i, rec := range recs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "#%d %s (%s)", rec.Attempt, rec.Path, rec.Reason)
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// abortedRun: rec is of a delivery whose handler the final abort found
// running, or had not started yet.
func abortedRun(rec runtime.Record) bool {
	return rec.Handler == "abandoned" || rec.Handler == "not started"
}

// abortedAtClose: u, a report's unresolved delivery, was still on its
// journey when the final abort closed the consumer.
func abortedAtClose(u runtime.Record) bool { return strings.Contains(u.Reason, "(final abort)") }
