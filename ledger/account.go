package ledger

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/lily-mq/lily/runtime"
)

// account finds every id's fate and checks every promise.
func (r *run) account(reps []*runtime.Report, queued map[string][]found, rows map[string]int) *Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := &Result{
		Seed: r.cfg.Seed, N: r.cfg.N, Queue: r.spec.Name, Reports: reps,
		Behaviours: map[Behaviour]int{}, Fates: map[Fate]int{}, Faults: maps.Clone(r.faults),
		SecondRuns: map[string]int{}, ExtraCopies: map[string]int{}, FailedStarts: r.failedStarts,
	}
	problem := func(format string, args ...any) { res.Problems = append(res.Problems, fmt.Sprintf(format, args...)) }
	for k := range res.Faults {
		if strings.HasPrefix(k, "harness error") {
			problem("%s", k)
		}
	}
	byID := r.byID
	for _, rec := range r.records {
		if rec.Commit == "duplicate" {
			res.InboxStopped++
		}
	}
	inFlightAtClose := map[string]int{}
	var lost []string
	for _, rep := range reps {
		for _, u := range rep.Unresolved {
			if strings.Contains(u.Reason, "(final abort)") {
				inFlightAtClose[u.MessageID]++
			}
		}
		lost = append(lost, rep.Lost...)
	}
	for _, id := range r.ids {
		b := r.beh[id]
		res.Behaviours[b]++
		recs, copies := byID[id], queued[id]
		acked := workAcked(recs)
		fate := fateOf(copies, acked)
		res.Fates[fate]++
		switch {
		case fate == Lost:
			problem("%s (%s) is lost: in no queue, and no ACK of its work; records: %s", id, b, paths(recs))
		case fate == Acked && b.dead():
			problem("%s (%s) was acked as handled; it should be in the DLQ", id, b)
		case fate == InDLQ && !b.dead() && !slices.ContainsFunc(recs, commitFailed):
			problem("%s (%s) is in the DLQ; records: %s", id, b, paths(recs))
		}
		// Copies beyond one: a confirmed handoff whose original came back, or
		// an ACK never proven whose message came back.
		presences := len(copies)
		if acked {
			presences++
		}
		var because []string
		for _, rec := range recs {
			switch {
			case rec.Handoff == "confirmed" && rec.Path == runtime.PathUnresolved:
				because = append(because, "handoff confirmed, the original's ACK not sent (unresolved)")
			case rec.Handoff == "timed out" || rec.Handoff == "failed":
				// The publish may have reached the queue: only its confirm is missing.
				because = append(because, "handoff "+rec.Handoff+" after its publish (requeued; the copy may exist)")
			}
		}
		for k, n := range r.ambiguous {
			if k.id == id {
				because = append(because, slices.Repeat([]string{"ACK sent, never proven (ambiguous)"}, n)...)
			}
		}
		because = append(because, slices.Repeat([]string{"in flight at the final abort (unresolved)"}, inFlightAtClose[id])...)
		if extra := presences - 1; extra > len(because) {
			problem("%s (%s) is present %d times at the end (%v, acked %v), and only %d explained", id, b, presences, copies, acked, len(because))
		} else {
			for _, why := range because[:max(extra, 0)] {
				res.ExtraCopies[why]++
			}
		}
		if b == InboxWork {
			if rows[id] > 1 {
				problem("%s: the inbox let %d commits of its work through", id, rows[id])
			}
			if fate == Acked && rows[id] != 1 {
				problem("%s was acked as handled, and %d rows of its work committed", id, rows[id])
			}
		}
		res.InboxRows += rows[id]
	}
	// Second runs of one message's attempt.
	for k, n := range r.runs {
		res.HandlerRuns += n
		if n < 2 {
			continue
		}
		// Each run's journey that ended without proof sent the message back
		// once. Journeys of one attempt may overlap (a delivery whose channel
		// was lost still finishes its handler while the broker redelivers),
		// so records are not in the order the runs started: every journey of
		// the attempt counts.
		var because []string
		for _, rec := range byID[k.id] {
			if rec.Attempt == k.attempt && rec.Handler != "" && (rec.Path == runtime.PathRequeued || rec.Path == runtime.PathUnresolved) {
				because = append(because, string(rec.Path)+": "+explain(rec))
			}
		}
		because = append(because, slices.Repeat([]string{"ACK sent, never proven (ambiguous)"}, r.ambiguous[k])...)
		because = append(because, slices.Repeat([]string{"in flight when a consumer closed (unresolved)"}, inFlightAtClose[k.id])...)
		// A later attempt exists once per handoff of the one before that may
		// have reached the bucket: confirmed, or timed out or failed after
		// its publish (then the original was requeued and handed off again).
		copies := 0
		for _, rec := range byID[k.id] {
			if rec.Attempt == k.attempt-1 && rec.Destination != r.spec.DeadLetterQueue &&
				(rec.Handoff == "confirmed" || rec.Handoff == "timed out" || rec.Handoff == "failed") {
				copies++
			}
		}
		because = append(because, slices.Repeat([]string{"another copy of this attempt: a handoff of the attempt before timed out or failed after its publish, and was made again"}, max(copies-1, 0))...)
		if n-1 > len(because) {
			problem("%s attempt %d: the handler ran %d times; only %d earlier journeys ended without proof: %s", k.id, k.attempt, n, len(because), paths(byID[k.id]))
			continue
		}
		for _, why := range because[:n-1] {
			res.SecondRuns[why]++
		}
	}
	for _, why := range append(slices.Clone(r.lost), lost...) {
		if strings.Contains(why, "406") || strings.Contains(why, "PRECONDITION_FAILED") {
			res.Channel406++
		}
	}
	if res.Channel406 > 0 {
		problem("%d channels or connections were closed with 406", res.Channel406)
	}
	return res
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

func commitFailed(rec runtime.Record) bool {
	return rec.Commit == "failed" || rec.Commit == "ambiguous"
}

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
