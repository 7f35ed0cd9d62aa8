package ledger

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/lily-mq/lily/runtime"
)

// reportsDisagree says where r's shutdown reports contradict its records:
// a path counted other than the records say, a delivery that ended
// unresolved listed in no report, or one whose handoff copy may repeat (a
// confirmed handoff whose original was not settled, or a nacked one, whose
// publish was written) listed among no report's possible copies. Each
// delivery still in flight at a final abort is counted unresolved and
// listed, and has no record the observer saw. The counts are never cut
// short; the lists are, past a report's first thousand (Omitted): r's
// reports may leave out of their lists as many deliveries as they omitted,
// those in flight at a final abort they counted unresolved and left out
// among them, and no more.
//
// Every ACK the records show sent was proven (AcksProven) or logged never
// proven (ack-ambiguous), and each ACK never proven is listed unresolved,
// and among the possible copies when its handoff was confirmed (the
// records of its attempt say whether there was another ACK it could be).
// A journey the seal counted without a record may have sent its ACK; a
// dead-lettering NACK never proven is logged as an ACK is.
func reportsDisagree(r reported) []string {
	ofRecords, ofReports := map[runtime.Path]int{}, map[runtime.Path]int{}
	// The listings of each attempt: unresolved, and among the possible
	// copies, for a record (of its journey's end), and for an ACK never
	// proven; those of a journey in flight at a final abort have no record.
	listed, copies := map[workKey]int{}, map[workKey]int{}
	unprovenListed, unprovenCopies := map[workKey]int{}, map[workKey]int{}
	omitted, proven := 0, 0
	for _, rep := range r.reports {
		omitted += rep.Omitted
		proven += rep.AcksProven
		for p, n := range rep.Counts {
			ofReports[p] += n
		}
		for _, u := range rep.Unresolved {
			k := workKey{u.MessageID, u.Attempt}
			switch {
			case abortedAtClose(u):
				ofRecords[runtime.PathUnresolved]++
			case neverProven(u):
				unprovenListed[k]++
			default:
				listed[k]++
			}
		}
		for _, c := range rep.PossibleCopies {
			k := workKey{c.MessageID, c.Attempt}
			switch {
			case abortedAtClose(c):
			case neverProven(c):
				unprovenCopies[k]++
			default:
				copies[k]++
			}
		}
	}
	var problems []string
	problem := func(format string, args ...any) {
		if r.name != "" {
			format = "consumer process " + r.name + ": " + format
		}
		problems = append(problems, fmt.Sprintf(format, args...))
	}
	var unlisted []string
	acks, nacks, unrecorded := 0, 0, 0
	otherAcks := map[workKey]int{} // ACKs, and NACKs, sent without a confirmed handoff
	for _, rec := range r.records {
		ofRecords[rec.Path]++
		k := workKey{rec.MessageID, rec.Attempt}
		switch {
		case rec.Path == runtime.PathBrokerDeadLettered:
			nacks++
			otherAcks[k]++
		case ackSent(rec):
			acks++
			if rec.Handoff != "confirmed" {
				otherAcks[k]++
			}
		case rec.Path == runtime.PathUnresolved:
			unrecorded--
		}
		if rec.Path == runtime.PathUnresolved {
			if listed[k]--; listed[k] < 0 {
				unlisted = append(unlisted, fmt.Sprintf("%s attempt %d ended unresolved, and no report lists it: %s", rec.MessageID, rec.Attempt, explain(rec)))
			}
		}
		if copyMayRepeat(rec) {
			if copies[k]--; copies[k] < 0 {
				unlisted = append(unlisted, fmt.Sprintf("%s attempt %d's handoff to %s may have left a copy while its original comes back (handoff %s, %s), and no report lists it among the possible copies", rec.MessageID, rec.Attempt, rec.Destination, rec.Handoff, rec.Path))
			}
		}
	}
	unrecorded = max(unrecorded+ofReports[runtime.PathUnresolved], 0)
	unproven := 0
	for _, k := range slices.SortedFunc(maps.Keys(r.ambiguous), byWork) {
		n := r.ambiguous[k]
		unproven += n
		if n > unprovenListed[k] {
			unlisted = append(unlisted, fmt.Sprintf("%s attempt %d: %d ACKs sent were never proven, and the reports list %d unresolved so", k.id, k.attempt, n, unprovenListed[k]))
		}
		if n-otherAcks[k] > unprovenCopies[k] {
			unlisted = append(unlisted, fmt.Sprintf("%s attempt %d: %d ACKs after a confirmed handoff were never proven, and the reports list %d among the possible copies", k.id, k.attempt, n-otherAcks[k], unprovenCopies[k]))
		}
	}
	// What the lists left out: those in flight at a final abort, counted
	// and not listed, then these.
	if len(unlisted) > omitted-max(ofReports[runtime.PathUnresolved]-ofRecords[runtime.PathUnresolved], 0) {
		for _, u := range unlisted {
			problem("%s", u)
		}
	}
	if proven+unproven < acks || proven+unproven > acks+nacks+unrecorded {
		problem("the reports count %d ACKs proven and %d were logged never proven, of %d ACKs the records show sent", proven, unproven, acks)
	}
	every := maps.Clone(ofRecords)
	maps.Copy(every, ofReports)
	for _, p := range slices.Sorted(maps.Keys(every)) {
		if ofReports[p] != ofRecords[p] && (p != runtime.PathUnresolved || ofReports[p] < ofRecords[p] || ofReports[p] > ofRecords[p]+omitted) {
			problem("the reports count %d deliveries %s, the records %d", ofReports[p], p, ofRecords[p])
		}
	}
	return problems
}

// neverProven says whether a report lists u for an ACK, or a
// dead-lettering NACK, sent and never proven.
func neverProven(u runtime.Record) bool {
	return strings.HasPrefix(u.Reason, "ack sent, never proven") || strings.HasPrefix(u.Reason, "dead-lettering nack sent, never proven")
}

// byWork orders work keys by id, then attempt.
func byWork(a, b workKey) int {
	if c := strings.Compare(a.id, b.id); c != 0 {
		return c
	}
	return a.attempt - b.attempt
}

// copyMayRepeat says whether rec's journey wrote a handoff copy while its
// original may come back too, as a report lists among its possible copies:
// a confirmed handoff whose ACK was not sent, or a nacked one (a nack comes
// after the publish was written). A handoff that timed out or failed may
// have been written or not, which the record does not say.
func copyMayRepeat(rec runtime.Record) bool {
	return rec.Handoff == "nacked" || rec.Handoff == "confirmed" && rec.Path == runtime.PathUnresolved
}
