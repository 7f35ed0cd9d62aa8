package runtime

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/lily-mq/lily/internal/lostline"
)

// Report is what Run returns when the consumer stops: the shutdown's phases,
// how many deliveries took each path, and every delivery not settled with
// proof. Every string in it is sanitized and bounded.
type Report struct {
	Queue   string       `json:"queue"`
	Started time.Time    `json:"started"`
	Stopped time.Time    `json:"stopped"`
	Phases  []Phase      `json:"phases"`
	Counts  map[Path]int `json:"counts"`
	// AcksProven counts ACKs that a later reply on their channel proved.
	AcksProven int `json:"acks_proven"`
	// Duplicates counts the deliveries whose message's work the inbox
	// held committed already: each was settled without running the handler
	// (Counts has it under its path, acked unless its ACK failed).
	Duplicates int `json:"duplicates"`
	// Unresolved lists deliveries not settled with proof, with why: the broker
	// redelivers them, or (an ACK never proven) may.
	Unresolved []Record `json:"unresolved"`
	// Omitted counts the records left out of Unresolved and of
	// PossibleCopies, each of which lists its first 1,000.
	Omitted int `json:"omitted,omitempty"`
	// PossibleCopies lists deliveries whose handoff copy exists, or may,
	// while the original may come back too, so the work may run twice
	// (bounded like Unresolved): a failed handoff whose publish had been
	// written (the original requeued as the table says), a confirmed one whose
	// ACK was not sent or never proven, and one still waiting for its confirm
	// when the consumer closed.
	PossibleCopies []Record `json:"possible_copies,omitempty"`
	// Lost says why each session ended under the consumer, and why each
	// connection attempt after it failed; every session after the first
	// follows one of these. A reason that came again at once is not listed
	// again: its line ends " (N times in a row)" (and one that came once
	// but whose own words end so, " (once)"). Past 999, the last line
	// counts the losses left out: "and N more sessions or connection
	// attempts lost, not listed".
	Lost []string `json:"lost,omitempty"`
	// Abandoned counts the user code still running when the report was
	// sealed, at the end of the close (the end of all else was observed):
	// handlers, and steps (a scope's open or cleanup, an inbox claim or
	// commit, an abandoned handler's rollback, AfterDelivery) given up at
	// their step. They run on after Run returns. A handler abandoned at the
	// final abort leaves its delivery unresolved, and is rolled back and
	// cleaned up when it returns; one abandoned earlier, at its timeout, may
	// still be running though its delivery was settled by the retry.
	Abandoned int `json:"abandoned"`
	// Parts are the reports of each service Serve ran, when it ran several;
	// the fields above then combine them, their lists bounded as one
	// report's are, but for Phases: each service stops through phases of its
	// own, which only its part holds, and the combined report has none.
	Parts []*Report `json:"parts,omitempty"`
}

// Phase is one step of the shutdown, with how long it took.
type Phase struct {
	Name     string        `json:"name"`
	Duration time.Duration `json:"duration_ns"`
}

// String is a short human summary of the report.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", r.Queue, r.Stopped.Sub(r.Started).Round(time.Millisecond))
	for _, p := range slices.Sorted(maps.Keys(r.Counts)) {
		fmt.Fprintf(&b, ", %s %d", p, r.Counts[p])
	}
	fmt.Fprintf(&b, "; %d acks proven", r.AcksProven)
	if r.Duplicates > 0 {
		fmt.Fprintf(&b, "; %d inbox duplicates", r.Duplicates)
	}
	if reasons, more := splitLost(r.Lost); len(reasons)+more > 0 {
		for _, why := range reasons {
			_, n := lostline.Parse(why)
			more += n
		}
		fmt.Fprintf(&b, "; %d sessions or connection attempts lost", more)
	}
	fmt.Fprintf(&b, "; %d abandoned (user code still running)", r.Abandoned)
	if len(r.Parts) > 0 {
		// The parts say the rest, each of its own service.
		for _, p := range r.Parts {
			fmt.Fprintf(&b, "\n  %s", strings.ReplaceAll(p.String(), "\n", "\n  "))
		}
		return b.String()
	}
	for _, p := range r.Phases {
		fmt.Fprintf(&b, "\n  phase %s: %s", p.Name, p.Duration.Round(time.Millisecond))
	}
	for _, u := range r.Unresolved {
		fmt.Fprintf(&b, "\n  unresolved %s (attempt %d): %s", u.MessageID, u.Attempt, u.Reason)
	}
	if r.Omitted > 0 {
		fmt.Fprintf(&b, "\n  and %d more unresolved or possible copies, not listed", r.Omitted)
	}
	for _, c := range r.PossibleCopies {
		fmt.Fprintf(&b, "\n  possible copy of %s (attempt %d) in %s: handoff %s: %s", c.MessageID, c.Attempt, c.Destination, c.Handoff, c.Reason)
	}
	return b.String()
}
