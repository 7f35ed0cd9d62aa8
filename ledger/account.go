package ledger

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/lily-mq/lily/internal/lostline"
	"github.com/lily-mq/lily/runtime"
)

// evidence is what the accounting reads: what a run did and saw, and what
// the queues and the database held at its end.
type evidence struct {
	seed       uint64
	queue, dlq string
	// maxAttempts is the queue's: the attempt whose retryable failure goes
	// to the DLQ.
	maxAttempts int
	ids         []string
	behaviours  map[string]Behaviour
	// records are every delivery's record, in the order they were written.
	records []runtime.Record
	// runs counts the handler's runs of each attempt; ambiguous the ACKs
	// sent and never proven; lost says why sessions ended, and why the
	// broker refused the topology, at a reconnect or declared again while
	// consuming (the consumers' diagnostics).
	runs, ambiguous map[workKey]int
	lost            []string
	failedStarts    int
	faults          map[string]int
	// succeeded holds the attempts whose handler (the ledger's own)
	// returned success: the runtime's record of it is not taken on trust.
	succeeded map[workKey]bool
	// ended says how the handler's runs of each attempt ended, in a
	// record's words (endedAs): the records' handler results, and where
	// they sent the message, are judged by it.
	ended map[ending]bool
	// failures are the failure facts the retry and DLQ copies drained at
	// the end carry, badCopies what was wrong with copies, heldLeft
	// the queues that still had consumers or messages unacknowledged at
	// the drain's end (drain's).
	failures  []failure
	badCopies []string
	heldLeft  []string
	// resent counts the sends of each id made again after one that may
	// have left a copy; nodeFaults the nodes taken down, in order, and
	// whether and how soon consumption resumed after each.
	resent map[string]int
	downs  []nodeDown
	// atLeastOnce: the retry bucket is a quorum queue on a cluster, which
	// dead-letters its expired copies back at least once.
	atLeastOnce bool
	// arrivals say how each run's delivery came, and each inbox
	// duplicate's, by attempt.
	arrivals map[workKey][]arrival
	reports  []*runtime.Report
	// queued is where each id was found at the end, rows its business rows.
	queued map[string][]found
	rows   map[string]int

	// Processes die (processes.go): killed counts, by attempt, the handler
	// runs of processes killed before they wrote their record, killedAcks
	// the ACKs they sent and had not proven, and killedDuplicates the
	// deliveries they settled as inbox duplicates (which ran no handler)
	// before they wrote their record; leasedAgain, by id, the leases of its
	// outbox row after the first; claimed, the ids whose work committed in
	// the inbox.
	killed, killedAcks, killedDuplicates map[workKey]int
	// unheard counts, by attempt, the handler runs of killed processes
	// that never told how they ended, with a record or without: a run
	// the runtime recorded timed out at its deadline may be killed
	// before it returns and tells.
	unheard     map[workKey]int
	leasedAgain map[string]int
	claimed     map[string]bool

	// pastDeadline: the run was stopped at its deadline, not once it was
	// over (the problem of a message left unfinished says which);
	// interrupted: once its context ended.
	pastDeadline, interrupted bool
	// reported are the consumers whose every record and report is here (a
	// killed process left none): their reports must agree with their records.
	reported []reported
}

// reported is what some consumers recorded, every record, and reported,
// and, by attempt, the ACKs they logged never proven (ack-ambiguous) and
// their handler's runs.
type reported struct {
	name            string // the consumer process's, or "" for the run's consumers
	records         []runtime.Record
	reports         []*runtime.Report
	ambiguous, runs map[workKey]int
}

// evidence gathers what r saw for the accounting.
func (r *run) evidence(reps []*runtime.Report, queued map[string][]found, rows map[string]int) evidence {
	r.mu.Lock()
	defer r.mu.Unlock()
	return evidence{
		seed: r.cfg.Seed, queue: r.spec.Name, dlq: r.spec.Topology.DeadLetterQueue, maxAttempts: r.spec.MaxAttempts, ids: r.ids, behaviours: r.beh,
		records: slices.Clone(r.records), runs: maps.Clone(r.runs), ambiguous: maps.Clone(r.ambiguous), succeeded: maps.Clone(r.succeeded), ended: maps.Clone(r.ended), failures: r.failures, badCopies: r.badCopies, heldLeft: r.heldLeft,
		lost: slices.Clone(r.lost), failedStarts: r.failedStarts, faults: maps.Clone(r.faults),
		resent: maps.Clone(r.resent), downs: slices.Clone(r.downs), atLeastOnce: r.cfg.Cluster != nil,
		arrivals: maps.Clone(r.arrivals),
		reports:  reps, queued: queued, rows: rows, pastDeadline: r.pastDeadline.Load(), interrupted: r.interrupted.Load(),
	}
}

// publishedAgain explains a copy, or a run of a first attempt, that a send
// made again after one that may have reached the queue.
const publishedAgain = "published again after a send that may have reached the queue (no confirm, or a nack)"

// bucketTwice explains one more run of a later attempt, and the copy it
// left, on a cluster: a quorum retry bucket dead-letters its expired
// copies back at least once, so a node failing while it moves one may move
// it twice (RabbitMQ's at-least-once dead-lettering). The runtime cannot
// see it; the inbox stops it for committed work.
const bucketTwice = "the retry bucket moved its copy back twice (quorum at-least-once dead-lettering, a node failed)"

// settleLost explains, on a cluster where a node went down, one more run of
// an attempt whose ACK a later reply on its channel proved, or the copy it
// left: a quorum queue's channel passes an ACK on to the queue's leader
// without waiting for it to commit, so a leader lost at that moment loses
// the ACK, and the message comes back, redelivered, when its channel closes
// (RabbitMQ 3.10 sends the settle untracked: docs/runtime.md, "Proof"). The
// runtime cannot see it; the inbox stops it for committed work.
const settleLost = "ACK proven on its channel, then lost before the quorum queue committed it (a node failed)"

// Processes die (processes.go). A process killed with SIGKILL writes no
// record of the runs it had started: each such run explains a second run
// of its attempt, a copy of the next attempt (its handoff may have been
// confirmed) and a copy at the end. Nor does it log its ACKs never proven
// (ack-ambiguous): each ACK it sent and had not proven explains a second
// run of its attempt and a copy at the end. A row the outbox relay leased
// again may have been published before: each such lease explains a copy,
// and a second delivery of attempt 1 that came from a publish of its own
// (the inbox ACKs the copies of committed work as duplicates, without a
// run).
const (
	killedMidRun  = "the process running it was killed (SIGKILL)"
	killedHandoff = "another copy of this attempt: the process that ran the attempt before was killed (SIGKILL), perhaps after its handoff"
	killedAck     = "ACK sent by a process killed (SIGKILL) before its proof"
	relayedAgain  = "published again by the outbox relay (its row leased again after a relay was killed, or got no confirm, before its delete)"
)

// account finds every id's fate and checks every promise. It reads e alone,
// so that its verdicts are tested on evidence made up for the purpose.
func account(e evidence) *Result {
	res := &Result{
		Seed: e.seed, N: len(e.ids), Queue: e.queue, Reports: e.reports,
		Behaviours: map[Behaviour]int{}, Fates: map[Fate]int{}, Faults: e.faults,
		SecondDeliveries: map[string]int{}, ExtraCopies: map[string]int{}, FailedStarts: e.failedStarts,
		Resumes: resumes(e.downs), NodeFaults: nodeFaultLines(e.downs),
	}
	for _, n := range e.resent {
		res.Resent += n
	}
	problem := func(format string, args ...any) { res.Problems = append(res.Problems, fmt.Sprintf(format, args...)) }
	if e.interrupted {
		// What it found so far may all be in order: it proves nothing.
		problem("the run was interrupted (its context ended) before it was over")
	}
	for _, k := range slices.Sorted(maps.Keys(res.Faults)) {
		switch {
		case strings.HasPrefix(k, "harness error"):
			problem("%s", k)
		case res.Faults[k] == 0:
			// The run counts every kind it could strike: one that never
			// struck was not tested, whatever else held.
			problem("no fault %q struck: the run did not test it", k)
		}
	}
	byID := map[string][]runtime.Record{}
	for _, rec := range e.records {
		byID[rec.MessageID] = append(byID[rec.MessageID], rec)
		switch {
		case rec.Path == runtime.PathNotStarted:
			res.NotStarted++
		case abortedRun(rec):
			res.AbortedInFlight++
		}
		if rec.Commit == "duplicate" {
			res.InboxStopped++
		}
	}
	// An inbox duplicate rests on work the inbox holds committed, and the
	// inbox commits a claim only after a handler that returned success in
	// time (an abandoned handler's late return is rolled back): each id's
	// attempts whose success committed, or may have. A record of the run
	// says so (committed, or ambiguous), or no record could be written: its
	// process was killed, or its journey was still under way when a report
	// listed it unresolved (the final abort seals the report before its
	// record). A report that cut its list short may have left such a
	// journey out: a run of its consumers' handler of which they wrote no
	// record.
	unrecorded := map[workKey]int{}
	maps.Copy(unrecorded, e.killed)
	for _, rep := range e.reports {
		for _, u := range rep.Unresolved {
			// Not the others it lists (an ACK never proven, a journey that
			// ended unresolved): each has its record.
			if abortedAtClose(u) {
				unrecorded[workKey{u.MessageID, u.Attempt}]++
			}
		}
	}
	for _, r := range e.reported {
		if !slices.ContainsFunc(r.reports, func(rep *runtime.Report) bool { return rep.Omitted > 0 }) {
			continue
		}
		recorded := map[workKey]int{}
		for _, rec := range r.records {
			if ran(rec) {
				recorded[workKey{rec.MessageID, rec.Attempt}]++
			}
		}
		for k, n := range r.runs {
			unrecorded[k] += max(n-recorded[k], 0)
		}
	}
	committedWork := map[string]bool{}
	for k := range e.succeeded {
		if unrecorded[k] > 0 {
			committedWork[k.id] = true
		}
	}
	for _, rec := range e.records {
		if rec.Handler == "ok" && (rec.Commit == "committed" || rec.Commit == "ambiguous") && e.succeeded[workKey{rec.MessageID, rec.Attempt}] {
			committedWork[rec.MessageID] = true
		}
	}
	// Duplicates the runs' arrivals prove: a first attempt that came from
	// more than one publish (the publisher sent it again, or the outbox
	// relay), and, on a cluster, a later attempt whose one publish came as a
	// new delivery more than once (the bucket moved it back twice). Each
	// explains one more run of that attempt and one more copy of the
	// message.
	again, twice, relayed := map[workKey]int{}, map[workKey]int{}, map[workKey]int{}
	againOf, relayedOf := map[string]int{}, map[string]int{}
	for k, as := range e.arrivals {
		publishes, fresh := map[string]bool{}, map[string]int{}
		for _, a := range as {
			publishes[a.publish] = true
			if !a.redelivered {
				fresh[a.publish]++
			}
		}
		switch {
		case k.attempt == 1:
			again[k] = min(max(len(publishes)-1, 0), e.resent[k.id])
			againOf[k.id] += again[k]
			relayed[k] = min(max(len(publishes)-1-again[k], 0), e.leasedAgain[k.id])
			relayedOf[k.id] += relayed[k]
		case e.atLeastOnce:
			for _, n := range fresh {
				twice[k] += max(n-1, 0)
			}
		}
	}
	lostRuns := settlesLost(e)
	// Deliveries in flight when a consumer closed: each explains one more
	// copy of its message, or one more run of its attempt; one whose
	// handoff had no confirm yet, one more copy of the next attempt too, or
	// of its own in the DLQ.
	closedInFlight, closedInHandoff, closedToDLQ := map[workKey]int{}, map[workKey]int{}, map[workKey]int{}
	var lost []string
	for _, rep := range e.reports {
		for _, u := range rep.Unresolved {
			if abortedAtClose(u) {
				res.AbortedInFlight++
				k := workKey{u.MessageID, u.Attempt}
				closedInFlight[k]++
				switch {
				case u.Handoff == "":
				case u.Destination == e.dlq:
					closedToDLQ[k]++
				default:
					closedInHandoff[k]++
				}
			}
		}
		lost = append(lost, rep.Lost...)
	}
	// The deliveries of each message's attempt: a run of the handler, or a
	// delivery that found the attempt's work done (an inbox duplicate, or
	// one settled from the consumer's record); and the copies of it left in
	// the main queue or a retry bucket, deliveries still to come.
	settledAgain, fromRecord := map[workKey]int{}, map[workKey]int{}
	for _, rec := range e.records {
		if doneBefore(rec) {
			settledAgain[workKey{rec.MessageID, rec.Attempt}]++
		}
		if rec.Handler == "completed earlier" {
			fromRecord[workKey{rec.MessageID, rec.Attempt}]++
		}
	}
	left := map[workKey]int{}
	for id, copies := range e.queued {
		for _, f := range copies {
			if f.fate == InMain || f.fate == InBucket {
				left[workKey{id, f.attempt}]++
			}
		}
	}
	// The run's queues are its own: a copy of a message not among its ids
	// is a stray, which no publish of the run made.
	var strays []string
	for id := range e.queued {
		if _, ours := e.behaviours[id]; !ours {
			strays = append(strays, fmt.Sprintf("%q %v", id, e.queued[id]))
		}
	}
	if len(strays) > 0 {
		slices.Sort(strays)
		problem("%d messages not of the run were found in its queues (strays); the first: %s", len(strays), strings.Join(strays[:min(len(strays), 3)], "; "))
	}
	lastRun := map[string]int{}
	for k := range e.runs {
		lastRun[k.id] = max(lastRun[k.id], k.attempt)
	}
	var unfinished []string
	for _, id := range e.ids {
		b := e.behaviours[id]
		res.Behaviours[b]++
		recs, copies := byID[id], e.queued[id]
		lastAttempt, inDLQ := e.maxAttempts, map[int]int{}
		for _, f := range copies {
			lastAttempt = max(lastAttempt, f.attempt)
			if f.fate == InDLQ {
				inDLQ[f.attempt]++
			}
		}
		for _, rec := range recs {
			lastAttempt = max(lastAttempt, rec.Attempt)
		}
		acked := workAcked(recs)
		fate := fateOf(copies, acked)
		if fate == Lost && e.claimed[id] && killedAfterAck(id, lastAttempt, e, committedWork[id]) {
			// Processes die: one killed after the ACK of committed work and
			// before its record leaves the inbox's claim as the evidence.
			acked, fate = true, Acked
		}
		res.Fates[fate]++
		if !acked && (fate == InMain || fate == InBucket) {
			unfinished = append(unfinished, fmt.Sprintf("%s (%s, %s): %s", id, b, fate, paths(recs)))
		}
		// Each ACK and each handoff on its own, by the decision table: a copy
		// left in a queue, or another attempt's success, does not vouch for it.
		// The handler's result each record gives is the ledger's to check,
		// and so where a failure was sent.
		for _, rec := range recs {
			for _, wrong := range []string{wrongResult(rec, e.ended, e.unheard), wrongAck(rec, b, e.succeeded, committedWork[id]), wrongHandoff(rec, e.dlq, e.maxAttempts, e.ended)} {
				if wrong != "" {
					problem("%s (%s) %s; records: %s", id, b, wrong, paths(recs))
				}
			}
		}
		if b == Refused {
			if wrong := refusedRetried(id, recs, copies, lastRun[id], e); wrong != "" {
				problem("%s (%s) %s; records: %s", id, b, wrong, paths(recs))
			}
		}
		if fate == Lost {
			problem("%s (%s) is lost: in no queue, and no ACK of its work; records: %s", id, b, paths(recs))
		}
		// Each copy in the DLQ by its attempt, which says when it was sent
		// there, whether or not a record of it is left; and no more copies
		// of an attempt than its deliveries sent there. A delivery of a
		// later attempt needs a handoff of the one before to a bucket.
		for _, attempt := range slices.Sorted(maps.Keys(inDLQ)) {
			k := workKey{id, attempt}
			switch sent := handoffs(recs, attempt, e.dlq, true) + closedToDLQ[k] + e.killed[k]; {
			case !deadByTable(b, attempt, recs, e):
				problem("%s (%s) is in the DLQ from attempt %d of %d, with retries left; records: %s", id, b, attempt, e.maxAttempts, paths(recs))
			case inDLQ[attempt] > sent:
				problem("%s (%s) is in the DLQ %d times from attempt %d, and only %d deliveries of that attempt were sent there; records: %s", id, b, inDLQ[attempt], attempt, sent, paths(recs))
			}
		}
		for attempt := 2; attempt <= lastAttempt; attempt++ {
			k, before := workKey{id, attempt}, workKey{id, attempt - 1}
			seen := e.runs[k] + settledAgain[k] + left[k] + inDLQ[attempt]
			for _, rec := range recs {
				if rec.Attempt == attempt {
					seen++
				}
			}
			if seen > 0 && handoffs(recs, attempt-1, e.dlq, false)+closedInHandoff[before]+e.killed[before] == 0 {
				problem("%s (%s) attempt %d was delivered or left in a queue, and no delivery of attempt %d was handed off to a retry bucket; records: %s", id, b, attempt, attempt-1, paths(recs))
			}
		}
		// Copies beyond one. Each is one more delivery of some attempt: its
		// original brought back (a confirmed handoff whose original was left
		// unresolved, a handoff that timed out or failed after its publish,
		// an ACK never proven, a delivery in flight at a close or in a killed
		// process) or published again (a send or a lease made again, a
		// bucket that moved its copy twice). That delivery ran, found the
		// work done, or is left in a queue: an attempt's explanations count
		// only up to its deliveries beyond the first and its copies left.
		presences := len(copies)
		if acked {
			presences++
		}
		var because []string
		for attempt := 1; attempt <= lastAttempt; attempt++ {
			k := workKey{id, attempt}
			var of []string
			for _, rec := range recs {
				switch {
				case rec.Attempt != attempt:
				case rec.Handoff == "confirmed" && rec.Path == runtime.PathUnresolved:
					of = append(of, "handoff confirmed, the original's ACK not sent (unresolved)")
				case rec.Handoff == "timed out" || rec.Handoff == "failed":
					// The publish may have reached the queue: only its confirm is missing.
					of = append(of, "handoff "+rec.Handoff+" after its publish (requeued; the copy may exist)")
				}
			}
			of = append(of, slices.Repeat([]string{"ACK sent, never proven (ambiguous)"}, e.ambiguous[k])...)
			of = append(of, slices.Repeat([]string{"in flight at the final abort (unresolved)"}, closedInFlight[k])...)
			of = append(of, slices.Repeat([]string{publishedAgain}, again[k])...)
			of = append(of, slices.Repeat([]string{bucketTwice}, twice[k])...)
			// Processes die.
			of = append(of, slices.Repeat([]string{killedMidRun}, e.killed[k])...)
			of = append(of, slices.Repeat([]string{killedAck}, e.killedAcks[k])...)
			if attempt == 1 {
				of = append(of, slices.Repeat([]string{relayedAgain}, e.leasedAgain[id])...)
			}
			of = append(of, slices.Repeat([]string{settleLost}, lostRuns[k])...)
			more := max(e.runs[k]+settledAgain[k]+e.killedDuplicates[k]-1, 0) + left[k]
			because = append(because, of[:min(len(of), more)]...)
		}
		if extra := presences - 1; extra > len(because) {
			problem("%s (%s) is present %d times at the end (%v, acked %v), and only %d explained", id, b, presences, copies, acked, len(because))
		} else {
			for _, why := range because[:max(extra, 0)] {
				res.ExtraCopies[why]++
			}
		}
		if b == InboxWork {
			if e.rows[id] > 1 {
				problem("%s: the inbox let %d commits of its work through", id, e.rows[id])
			}
			if acked && e.rows[id] != 1 {
				problem("%s was acked as handled, and %d rows of its work committed", id, e.rows[id])
			}
		}
		res.InboxRows += e.rows[id]
	}
	// Second deliveries of one message's attempt, beyond the first (see
	// settledAgain above). A copy of the attempt left in the main queue or a
	// retry bucket is a delivery still to come, and needs the same
	// explanation: a journey that ended without proof sent its message back
	// once, for one more run or one copy left, not both.
	runsOf := maps.Clone(e.runs)
	for _, n := range e.runs {
		res.HandlerRuns += n
	}
	for _, more := range []map[workKey]int{settledAgain, left} {
		for k := range more {
			runsOf[k] += 0
		}
	}
	for k, runs := range runsOf {
		delivered := runs + settledAgain[k]
		n := delivered + left[k]
		if n < 2 {
			continue
		}
		// Each journey that ended without proof sent the message back
		// once. Journeys of one attempt may overlap (a delivery whose channel
		// was lost still finishes its handler while the broker redelivers),
		// so records are not in the order the runs started: every journey of
		// the attempt counts, of those counted above.
		var because []string
		for _, rec := range byID[k.id] {
			if rec.Attempt == k.attempt && (ran(rec) || doneBefore(rec)) && (rec.Path == runtime.PathRequeued || rec.Path == runtime.PathUnresolved) {
				because = append(because, string(rec.Path)+": "+explain(rec))
			}
		}
		because = append(because, slices.Repeat([]string{"ACK sent, never proven (ambiguous)"}, e.ambiguous[k])...)
		because = append(because, slices.Repeat([]string{"in flight when a consumer closed (unresolved)"}, closedInFlight[k])...)
		because = append(because, slices.Repeat([]string{bucketTwice}, twice[k])...)
		// A later attempt exists once per handoff of the one before that may
		// have reached the bucket: confirmed, or timed out or failed after
		// its publish (then the original was requeued and handed off again),
		// or still waiting for its confirm when a consumer closed.
		copies := closedInHandoff[workKey{k.id, k.attempt - 1}]
		for _, rec := range byID[k.id] {
			if rec.Attempt == k.attempt-1 && rec.Destination != e.dlq &&
				(rec.Handoff == "confirmed" || rec.Handoff == "timed out" || rec.Handoff == "failed") {
				copies++
			}
		}
		because = append(because, slices.Repeat([]string{"another copy of this attempt: the attempt before was handed off more than once (a handoff without proof was made again)"}, max(copies-1, 0))...)
		// Processes die.
		because = append(because, slices.Repeat([]string{killedMidRun}, e.killed[k])...)
		because = append(because, slices.Repeat([]string{killedAck}, e.killedAcks[k])...)
		because = append(because, slices.Repeat([]string{killedHandoff}, e.killed[workKey{k.id, k.attempt - 1}])...)
		if k.attempt == 1 {
			because = append(because, slices.Repeat([]string{publishedAgain}, again[k])...)
			because = append(because, slices.Repeat([]string{relayedAgain}, relayed[k])...)
			// A delivery settled from the record reaches neither the handler
			// nor after_delivery, so how it came is not noted, nor is a copy
			// left: a send made again, or a lease, that no noted arrival
			// accounts for may be either.
			unnoted := fromRecord[k] + left[k]
			sent := min(max(e.resent[k.id]-againOf[k.id], 0), unnoted)
			because = append(because, slices.Repeat([]string{publishedAgain}, sent)...)
			because = append(because, slices.Repeat([]string{relayedAgain}, min(max(e.leasedAgain[k.id]-relayedOf[k.id], 0), unnoted-sent))...)
		}
		because = append(because, slices.Repeat([]string{settleLost}, lostRuns[k])...)
		if n-1 > len(because) {
			what := fmt.Sprintf("the handler ran %d times", runs)
			if again := settledAgain[k]; again > 0 {
				what += fmt.Sprintf(" and %d more deliveries found its work done", again)
			}
			if l := left[k]; l > 0 {
				what += fmt.Sprintf(", with %d copies of it left in a queue", l)
			}
			problem("%s attempt %d: %s; only %d earlier journeys ended without proof: %s", k.id, k.attempt, what, len(because), paths(byID[k.id]))
			continue
		}
		for _, why := range because[:max(delivered-1, 0)] {
			res.SecondDeliveries[why]++
		}
	}
	for _, bad := range e.badCopies {
		problem("%s", bad)
	}
	for _, held := range e.heldLeft {
		problem("%s", held)
	}
	for _, f := range e.failures {
		if wrong := wrongFailure(f, e); wrong != "" {
			problem("%s (%s) %s", f.id, e.behaviours[f.id], wrong)
		}
	}
	if len(unfinished) > 0 {
		// A consumer that stalls, or holds a delivery and never settles it,
		// leaves its message in a queue (returned when its channel closes):
		// lost to none of the checks above, and proving nothing, however the
		// run ended.
		when := "ended"
		if e.pastDeadline {
			when = "was stopped at its deadline"
		}
		problem("the run %s with %d messages neither acked nor dead-lettered, as a stalled consumer leaves them; the first: %s",
			when, len(unfinished), strings.Join(unfinished[:min(len(unfinished), 3)], "; "))
	}
	// Every 406, each once: the consumers log a session's end and a
	// refusal of the topology at a reconnect, which their reports list too
	// (Report.Lost), and a refusal of the topology declared again while
	// consuming, which no report lists; a killed process left no report.
	told := map[string]int{}
	for _, why := range e.lost {
		told[why]++
	}
	listed := map[string]int{}
	for _, why := range lost {
		why, n := lostline.Parse(why)
		listed[why] += n
	}
	for why, n := range listed {
		told[why] = max(told[why], n)
	}
	var refused []string
	for _, why := range slices.Sorted(maps.Keys(told)) {
		// The broker's "Exception (406)"; a bare 406 is in port numbers too.
		if strings.Contains(why, "(406)") || strings.Contains(why, "PRECONDITION_FAILED") {
			res.Channel406 += told[why]
			refused = append(refused, why)
		}
	}
	if res.Channel406 > 0 {
		problem("%d channels, connections or declares were refused with 406: %q", res.Channel406, refused[:min(len(refused), 3)])
	}
	for _, r := range e.reported {
		res.Problems = append(res.Problems, reportsDisagree(r)...)
	}
	return res
}
