package ledger

import (
	"fmt"
	"maps"
	"slices"

	"github.com/lily-mq/lily/runtime"
)

// reportsDisagree says where r's shutdown reports contradict its records:
// a path counted other than the records say, a delivery that ended
// unresolved listed in no report, or one whose handoff copy may repeat (a
// confirmed handoff whose original was not settled, or a nacked one, whose
// publish was written) listed among no report's possible copies. Each
// delivery still in flight at a final abort is counted unresolved and
// listed, and has no record the observer saw. The counts are never cut
// short; the lists are, past a report's first thousand (Omitted): a list
// cut short is not checked, and up to so many deliveries in flight at a
// final abort may be counted and left out.
func reportsDisagree(r reported) []string {
	ofRecords, ofReports := map[runtime.Path]int{}, map[runtime.Path]int{}
	listed, copies := map[workKey]bool{}, map[workKey]bool{}
	omitted := 0
	for _, rep := range r.reports {
		omitted += rep.Omitted
		for p, n := range rep.Counts {
			ofReports[p] += n
		}
		for _, u := range rep.Unresolved {
			listed[workKey{u.MessageID, u.Attempt}] = true
			if abortedAtClose(u) {
				ofRecords[runtime.PathUnresolved]++
			}
		}
		for _, c := range rep.PossibleCopies {
			copies[workKey{c.MessageID, c.Attempt}] = true
		}
	}
	var problems []string
	problem := func(format string, args ...any) {
		if r.name != "" {
			format = "consumer process " + r.name + ": " + format
		}
		problems = append(problems, fmt.Sprintf(format, args...))
	}
	for _, rec := range r.records {
		ofRecords[rec.Path]++
		k := workKey{rec.MessageID, rec.Attempt}
		switch {
		case omitted > 0: // a list cut short says nothing of what it left out
		case rec.Path == runtime.PathUnresolved && !listed[k]:
			problem("%s attempt %d ended unresolved, and no report lists it: %s", rec.MessageID, rec.Attempt, explain(rec))
		case copyMayRepeat(rec) && !copies[k]:
			problem("%s attempt %d's handoff to %s may have left a copy while its original comes back (handoff %s, %s), and no report lists it among the possible copies", rec.MessageID, rec.Attempt, rec.Destination, rec.Handoff, rec.Path)
		}
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

// copyMayRepeat says whether rec's journey wrote a handoff copy while its
// original may come back too, as a report lists among its possible copies:
// a confirmed handoff whose ACK was not sent, or a nacked one (a nack comes
// after the publish was written). A handoff that timed out or failed may
// have been written or not, which the record does not say.
func copyMayRepeat(rec runtime.Record) bool {
	return rec.Handoff == "nacked" || rec.Handoff == "confirmed" && rec.Path == runtime.PathUnresolved
}
