package review

import (
	"strings"
	"testing"

	"github.com/lily-mq/lily/schema"
)

// TestAcknowledgeAcceptsOnlyTheChangesOfItsRevision judges each kind of
// acknowledgement against the same changes: new or inherited, with a
// subject or without, matching or not.
func TestAcknowledgeAcceptsOnlyTheChangesOfItsRevision(t *testing.T) {
	narrowed := Finding{Rule: "BOUND-NARROWED", Subject: "Ping.v1.id"}
	removed := Finding{Rule: "FIELD-REMOVED", Subject: "Ping.v1.gift"}
	ack := func(rule, subject, reason string, line int) schema.Acknowledgement {
		return schema.Acknowledgement{Rule: rule, Subject: subject, Reason: reason, Pos: schema.Pos{File: "new.lily.yaml", Line: line, Column: 5}}
	}
	earlier := ack("BOUND-NARROWED", "Ping.v1.id", "ids are uuids", 3)
	for _, tc := range []struct {
		name                   string
		newer, older           []schema.Acknowledgement
		allow                  []string
		breaking, acknowledged []string // findings' Ack
		stale, inherited       []string // acknowledgements' subjects
		note                   bool     // the breaking finding notes its inherited acknowledgement
	}{
		{name: "none", breaking: []string{narrowed.Ack(), removed.Ack()}},
		{
			name:         "new, matching",
			newer:        []schema.Acknowledgement{ack("BOUND-NARROWED", "Ping.v1.id", "ids are uuids", 3)},
			breaking:     []string{removed.Ack()},
			acknowledged: []string{narrowed.Ack()},
		},
		{
			name:     "inherited, matching a new break",
			newer:    []schema.Acknowledgement{earlier},
			older:    []schema.Acknowledgement{{Rule: "BOUND-NARROWED", Subject: "Ping.v1.id", Reason: "ids are uuids", Pos: schema.Pos{File: "old.lily.yaml", Line: 9}}},
			breaking: []string{narrowed.Ack(), removed.Ack()},
			note:     true,
		},
		{
			name:         "inherited rule and subject with a new reason",
			newer:        []schema.Acknowledgement{ack("BOUND-NARROWED", "Ping.v1.id", "ids are now 32 hex digits", 3)},
			older:        []schema.Acknowledgement{earlier},
			breaking:     []string{removed.Ack()},
			acknowledged: []string{narrowed.Ack()},
		},
		{
			name:      "inherited rule and subject with a new reason, matching nothing",
			newer:     []schema.Acknowledgement{ack("BOUND-NARROWED", "Ping.v1.note", "notes are cut at 100 bytes", 3)},
			older:     []schema.Acknowledgement{ack("BOUND-NARROWED", "Ping.v1.note", "notes are cut at 100", 3)},
			breaking:  []string{narrowed.Ack(), removed.Ack()},
			inherited: []string{"Ping.v1.note"},
		},
		{
			name:     "new, matching nothing",
			newer:    []schema.Acknowledgement{ack("BOUND-NARROWED", "Ping.v1.note", "notes are cut at 100", 3)},
			breaking: []string{narrowed.Ack(), removed.Ack()},
			stale:    []string{"Ping.v1.note"},
		},
		{
			name:      "inherited, matching nothing",
			newer:     []schema.Acknowledgement{ack("BOUND-NARROWED", "Ping.v1.note", "notes are cut at 100", 3)},
			older:     []schema.Acknowledgement{ack("BOUND-NARROWED", "Ping.v1.note", "notes are cut at 100", 3)},
			breaking:  []string{narrowed.Ack(), removed.Ack()},
			inherited: []string{"Ping.v1.note"},
		},
		{
			name:         "a standing policy, inherited",
			newer:        []schema.Acknowledgement{ack("FIELD-REMOVED", "", "fields go after a year", 3), ack("QUEUE-REMOVED", "", "queues are drained first", 6)},
			older:        []schema.Acknowledgement{ack("FIELD-REMOVED", "", "fields go after a year", 3), ack("QUEUE-REMOVED", "", "queues are drained first", 6)},
			breaking:     []string{narrowed.Ack()},
			acknowledged: []string{removed.Ack()},
		},
		{
			name:         "an inherited acknowledgement of a change --allow accepts",
			newer:        []schema.Acknowledgement{earlier},
			older:        []schema.Acknowledgement{earlier},
			allow:        []string{"BOUND-NARROWED@Ping.v1.id"},
			breaking:     []string{removed.Ack()},
			acknowledged: []string{narrowed.Ack()},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := Acknowledge([]Finding{narrowed, removed}, tc.newer, tc.older, tc.allow)
			acks := func(fs []Finding) string { return strings.Join(acksOf(fs), " ") }
			subjects := func(as []schema.Acknowledgement) string {
				var s []string
				for _, a := range as {
					s = append(s, a.Subject)
				}
				return strings.Join(s, " ")
			}
			if got, want := acks(j.Breaking), strings.Join(tc.breaking, " "); got != want {
				t.Errorf("breaking: %q, want %q", got, want)
			}
			if got, want := acks(j.Acknowledged), strings.Join(tc.acknowledged, " "); got != want {
				t.Errorf("acknowledged: %q, want %q", got, want)
			}
			if got, want := subjects(j.Stale), strings.Join(tc.stale, " "); got != want {
				t.Errorf("stale: %q, want %q", got, want)
			}
			if got, want := subjects(j.Inherited), strings.Join(tc.inherited, " "); got != want {
				t.Errorf("inherited: %q, want %q", got, want)
			}
			for _, f := range j.Breaking {
				wantNote := tc.note && f.Ack() == narrowed.Ack()
				if gotNote := f.Note != ""; gotNote != wantNote {
					t.Errorf("%s: note %q, want one: %v", f.Ack(), f.Note, wantNote)
				}
				if wantNote && !strings.Contains(f.Note, "BOUND-NARROWED@Ping.v1.id at new.lily.yaml:3:5 is in the older revision too") {
					t.Errorf("note %q does not name the inherited acknowledgement at new.lily.yaml:3:5", f.Note)
				}
			}
		})
	}
}

// An entry accepts every change of its rule and subject, more than its
// author may have seen: each accepted change names what accepts it, so
// that what an entry accepts can be shown in full.
func TestAcknowledgeNamesWhatAcceptsEachChange(t *testing.T) {
	shorter := Finding{Rule: "BOUND-NARROWED", Subject: "Ping.v1.note", Message: "narrows its bounds"}
	pattern := Finding{Rule: "BOUND-NARROWED", Subject: "Ping.v1.note", Message: "narrows its pattern"}
	removed := Finding{Rule: "FIELD-REMOVED", Subject: "Ping.v1.gift"}
	entry := schema.Acknowledgement{Rule: "BOUND-NARROWED", Subject: "Ping.v1.note", Reason: "notes are cut at 50", Pos: schema.Pos{File: "new.lily.yaml", Line: 7, Column: 5}}
	j := Acknowledge([]Finding{shorter, pattern, removed}, []schema.Acknowledgement{entry}, nil, []string{"FIELD-REMOVED"})
	var got []string
	for _, x := range j.Acknowledged {
		got = append(got, x.Message+" by "+x.AcknowledgedBy)
	}
	want := []string{
		"narrows its bounds by BOUND-NARROWED@Ping.v1.note at new.lily.yaml:7:5",
		"narrows its pattern by BOUND-NARROWED@Ping.v1.note at new.lily.yaml:7:5",
		" by --allow FIELD-REMOVED",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("accepted:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(j.Breaking) > 0 {
		t.Errorf("breaking: %v", j.Breaking)
	}
}
