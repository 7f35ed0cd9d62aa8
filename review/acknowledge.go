package review

import (
	"fmt"
	"slices"

	"github.com/lily-mq/lily/schema"
)

// Judgement is what a schema's acknowledgements make of its breaking
// changes against an older revision.
type Judgement struct {
	// Breaking are the changes nothing accepts; Acknowledged those accepted,
	// each naming what accepts it (Finding.AcknowledgedBy).
	Breaking, Acknowledged []Finding
	// Stale are the acknowledgements with a subject, new since the older
	// revision, that match no change: they acknowledge nothing this change
	// does.
	Stale []schema.Acknowledgement
	// Inherited are those with a rule and subject that the older revision
	// has too (with its reason, or another: reworded) and that match no
	// change: their change is merged, and they are left over.
	Inherited []schema.Acknowledgement
}

// Acknowledge sorts changes, the breaking changes of a schema against its
// older revision, by what acknowledges them: allow, the run's own, each
// RULE or RULE@SUBJECT, and the schema's entries, newer. An entry accepts
// only the changes of the revision that adds it: one with a subject that
// older, the older revision's entries, holds too (the same rule, subject
// and reason) was written for an earlier change and accepts nothing, or
// every later break of its rule and subject would pass unseen; a change it
// names gets a Note saying so. An entry without a subject is a standing
// policy for its rule, and accepts its every change. Order is kept.
func Acknowledge(changes []Finding, newer, older []schema.Acknowledgement, allow []string) Judgement {
	type entry struct{ rule, subject, reason string }
	before := map[entry]bool{}
	named := map[entry]bool{} // by rule and subject alone
	for _, a := range older {
		before[entry{a.Rule, a.Subject, a.Reason}] = true
		named[entry{a.Rule, a.Subject, ""}] = true
	}
	var accepting, inherited []schema.Acknowledgement
	for _, a := range newer {
		if a.Subject != "" && before[entry{a.Rule, a.Subject, a.Reason}] {
			inherited = append(inherited, a)
		} else {
			accepting = append(accepting, a)
		}
	}
	var j Judgement
	for _, x := range changes {
		if x.AcknowledgedBy = x.acceptor(allow, accepting); x.AcknowledgedBy != "" {
			j.Acknowledged = append(j.Acknowledged, x)
			continue
		}
		if i := slices.IndexFunc(inherited, x.acknowledgedBy); i >= 0 {
			a := inherited[i]
			note := fmt.Sprintf("the acknowledgement %s at %s:%d:%d is in the older revision too: written for an earlier change, it accepts only that one; to accept this change, give it a new reason, one that says why this change is safe",
				x.Ack(), a.Pos.File, a.Pos.Line, a.Pos.Column)
			if x.Note != "" {
				note = x.Note + "; " + note // where it moved from
			}
			x.Note = note
		}
		j.Breaking = append(j.Breaking, x)
	}
	for _, a := range newer {
		if a.Subject == "" || slices.ContainsFunc(changes, func(x Finding) bool { return x.acknowledgedBy(a) }) {
			continue
		}
		// Inherited, or with its reason alone reworded: no new claim.
		if named[entry{a.Rule, a.Subject, ""}] {
			j.Inherited = append(j.Inherited, a)
		} else {
			j.Stale = append(j.Stale, a)
		}
	}
	return j
}

// acceptor names the first of allow, then of entries, that accepts f; ""
// when none does. An entry's subject may cover more than one change, so
// each accepted change names it, for a reviewer to see all it accepts.
func (f Finding) acceptor(allow []string, entries []schema.Acknowledgement) string {
	for _, a := range allow {
		if f.Acknowledged([]string{a}) {
			return "--allow " + a
		}
	}
	for _, a := range entries {
		if f.acknowledgedBy(a) {
			return fmt.Sprintf("%s at %s:%d:%d", a, a.Pos.File, a.Pos.Line, a.Pos.Column)
		}
	}
	return ""
}

// acknowledgedBy reports whether the schema's entry a names f.
func (f Finding) acknowledgedBy(a schema.Acknowledgement) bool {
	return f.Acknowledged([]string{a.String()})
}
