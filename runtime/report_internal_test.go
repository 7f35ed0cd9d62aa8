package runtime

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/lily-mq/lily/internal/lostline"
)

// A delivery still on its journey at the seal is listed and counted
// unresolved, with its attempt, as one whose journey ended so would be:
// every delivery begun is counted once, under one path.
func TestReportSealCountsTheJourneysInFlight(t *testing.T) {
	b := &reportBuilder{r: Report{Counts: map[Path]int{}}, inflight: map[uint64]journey{}}
	done := b.begin("done-1", 1)
	b.begin("flying-1", 2)
	b.add(done, Record{MessageID: "done-1", Path: PathAcked}, false, false)
	rep := b.seal("q", 0)
	if want := map[Path]int{PathAcked: 1, PathUnresolved: 1}; !maps.Equal(rep.Counts, want) {
		t.Errorf("counts %v, want %v", rep.Counts, want)
	}
	if len(rep.Unresolved) != 1 || rep.Unresolved[0].MessageID != "flying-1" || rep.Unresolved[0].Attempt != 2 {
		t.Errorf("unresolved %+v", rep.Unresolved)
	}
	// A journey still running reaches its handoff's write after the seal:
	// the copy is not to be written, for the report could list it nowhere.
	if b.writingCopy(b.begin("late-1", 1), "q.retry.1s") {
		t.Error("a copy may be written after the seal")
	}
}

// An ACK found unproven while its journey has yet to record (the channel
// closed between the two) is listed at once; should the seal come before
// the record, which is then too late to count, the seal counts it
// unresolved, listed once.
func TestReportSealCountsAJourneyListedBeforeItsRecord(t *testing.T) {
	b := &reportBuilder{r: Report{Counts: map[Path]int{}}, inflight: map[uint64]journey{}}
	token := b.begin("acked-1", 1)
	b.unresolved(token, Record{MessageID: "acked-1", Path: PathUnresolved, Reason: "ack sent, never proven"}, false)
	rep := b.seal("q", 0)
	if b.add(token, Record{MessageID: "acked-1", Path: PathAcked}, false, false) {
		t.Error("a record was added after the seal")
	}
	if want := map[Path]int{PathUnresolved: 1}; !maps.Equal(rep.Counts, want) {
		t.Errorf("counts %v, want %v", rep.Counts, want)
	}
	if len(rep.Unresolved) != 1 || rep.Unresolved[0].Reason != "ack sent, never proven" {
		t.Errorf("unresolved %+v", rep.Unresolved)
	}
}

// An ACK found unproven is listed unresolved but counted once, under the
// path its record took, whether the record came before it was found
// unproven or after: Counts[PathUnresolved] does not count it, and
// Unresolved lists it.
func TestReportCountsAnUnprovenAckUnderItsPath(t *testing.T) {
	b := &reportBuilder{r: Report{Counts: map[Path]int{}}, inflight: map[uint64]journey{}}
	before := b.begin("recorded-first", 1)
	b.add(before, Record{MessageID: "recorded-first", Path: PathAcked}, false, false)
	b.unresolved(before, Record{MessageID: "recorded-first", Path: PathUnresolved, Reason: "ack sent, never proven"}, false)
	after := b.begin("listed-first", 1)
	b.unresolved(after, Record{MessageID: "listed-first", Path: PathUnresolved, Reason: "ack sent, never proven"}, false)
	b.add(after, Record{MessageID: "listed-first", Path: PathAcked}, false, false)
	rep := b.seal("q", 0)
	if want := map[Path]int{PathAcked: 2}; !maps.Equal(rep.Counts, want) {
		t.Errorf("counts %v, want %v", rep.Counts, want)
	}
	if len(rep.Unresolved) != 2 {
		t.Errorf("unresolved %+v, want both listed once", rep.Unresolved)
	}
}

// Past its first 1,000, each list leaves records out and the report counts
// them: unresolved deliveries and possible copies in Omitted (Health's
// unresolved count takes only the first), lost sessions in a last line.
func TestReportCountsWhatItLeavesOut(t *testing.T) {
	b := &reportBuilder{r: Report{Counts: map[Path]int{}}, inflight: map[uint64]journey{}}
	for i := range 1003 {
		b.add(b.begin("u", 1), Record{MessageID: "u", Path: PathUnresolved}, false, false)
		b.add(b.begin("c", 1), Record{MessageID: "c", Path: PathRequeued}, true, false)
		b.lostIntake(alternately[i%2]) // never the same twice in a row
	}
	if got := b.unresolvedSoFar(); got != 1003 {
		t.Errorf("unresolved so far %d, want 1003", got)
	}
	rep := b.seal("q", 0)
	if len(rep.Unresolved) != 1000 || len(rep.PossibleCopies) != 1000 || rep.Omitted != 6 {
		t.Errorf("%d unresolved and %d copies listed, %d omitted; want 1000, 1000, 6", len(rep.Unresolved), len(rep.PossibleCopies), rep.Omitted)
	}
	if len(rep.Lost) != 1000 || rep.Lost[999] != "and 4 more sessions or connection attempts lost, not listed" {
		t.Errorf("%d lost lines, the last %q", len(rep.Lost), rep.Lost[len(rep.Lost)-1])
	}
}

// alternately are two reasons for lost intake, listed one after the other
// so that no line counts the one before.
var alternately = [2]string{"lost", "gone"}

// A reason that comes again at once, every attempt of the backoff refused
// alike while a person mends the topology, is one line that counts it, not
// a line each time; a reason in between starts a line of its own. The
// summary counts every loss.
func TestReportCountsAReasonThatComesAgain(t *testing.T) {
	b := &reportBuilder{r: Report{Queue: "q", Counts: map[Path]int{}}, inflight: map[uint64]journey{}}
	refused := "Exception (406) Reason: \"PRECONDITION_FAILED - inequivalent arg 'x-max-length'\""
	for range 12 {
		b.lostIntake(refused)
	}
	b.lostIntake("dial tcp: connection refused")
	b.lostIntake(refused)
	b.lostIntake(refused)
	rep := b.seal("q", 0)
	want := []string{refused + " (12 times in a row)", "dial tcp: connection refused", refused + " (2 times in a row)"}
	if !slices.Equal(rep.Lost, want) {
		t.Errorf("lost %q, want %q", rep.Lost, want)
	}
	// The ledger reads the count as the runtime wrote it.
	if why, n := lostline.Parse(rep.Lost[0]); why != refused || n != 12 {
		t.Errorf("%q read as %q, %d times", rep.Lost[0], why, n)
	}
	if !strings.Contains(rep.String(), "; 15 sessions or connection attempts lost") {
		t.Errorf("summary %q; want 15 lost", rep.String())
	}
	both := combine([]*Report{rep, {Queue: "r", Lost: []string{"x"}}})
	if !strings.Contains(both.String(), "; 16 sessions or connection attempts lost") || both.Lost[0] != "q: "+refused+" (12 times in a row)" {
		t.Errorf("combined %q, lost %q", both.String(), both.Lost)
	}
}

// A reason whose own words end like a count (a peer's error text) and that
// came once is one loss, in the report's summary and in Serve's.
func TestReportCountsAReasonThatReadsLikeACountOnce(t *testing.T) {
	b := &reportBuilder{r: Report{Queue: "q", Counts: map[Path]int{}}, inflight: map[uint64]journey{}}
	b.lostIntake("closed by peer (9999 times in a row)")
	rep := b.seal("q", 0)
	if !strings.Contains(rep.String(), "; 1 sessions or connection attempts lost") {
		t.Errorf("summary %q; want 1 lost", rep.String())
	}
	if both := combine([]*Report{rep}); !strings.Contains(both.String(), "; 1 sessions or connection attempts lost") {
		t.Errorf("combined %q; want 1 lost", both.String())
	}
}

// Serve's combined report bounds its lists as one report does, and counts
// what it leaves out, the parts' own omissions among them; its summary, and
// each part's, counts every loss, not the lines that list them.
func TestCombinedReportBoundsItsLists(t *testing.T) {
	var parts []*Report
	for _, q := range []string{"a", "b", "c"} {
		b := &reportBuilder{r: Report{Queue: q, Counts: map[Path]int{}}, inflight: map[uint64]journey{}}
		for i := range 1500 {
			b.add(b.begin("u", 1), Record{Queue: q, MessageID: "u", Path: PathUnresolved}, false, false)
			b.add(b.begin("c", 1), Record{Queue: q, MessageID: "c", Path: PathRequeued}, true, false)
			b.lostIntake(alternately[i%2])
		}
		parts = append(parts, b.seal(q, 0))
	}
	rep := combine(parts)
	// 4,500 of each: 1,000 listed, and 3,500 omitted.
	if len(rep.Unresolved) != 1000 || len(rep.PossibleCopies) != 1000 || rep.Omitted != 7000 {
		t.Errorf("%d unresolved and %d copies listed, %d omitted; want 1000, 1000, 7000", len(rep.Unresolved), len(rep.PossibleCopies), rep.Omitted)
	}
	if len(rep.Lost) != 1000 || rep.Lost[0] != "a: lost" || rep.Lost[999] != "and 3501 more sessions or connection attempts lost, not listed" {
		t.Errorf("%d lost lines, the first %q, the last %q", len(rep.Lost), rep.Lost[0], rep.Lost[len(rep.Lost)-1])
	}
	for rep, want := range map[*Report]string{rep: "; 4500 sessions", parts[0]: "; 1500 sessions"} {
		if first, _, _ := strings.Cut(rep.String(), "\n"); !strings.Contains(first, want) {
			t.Errorf("summary %q; want %q", first, want)
		}
	}
}

// Serve's combined report has no phases: each service's stay in its part.
func TestCombinedReportLeavesPhasesToItsParts(t *testing.T) {
	part := func(q string) *Report {
		return &Report{Queue: q, Phases: []Phase{{Name: "stop intake"}}}
	}
	rep := combine([]*Report{part("a"), part("b")})
	if rep.Phases != nil || len(rep.Parts[0].Phases) != 1 || len(rep.Parts[1].Phases) != 1 {
		t.Errorf("combined phases %+v, the parts' %+v and %+v", rep.Phases, rep.Parts[0].Phases, rep.Parts[1].Phases)
	}
}

// A part's line that counts a reason come N times in a row is N losses in
// Serve's combined report too: listed as it is, never merged again with
// the line before (another part's, of the same queue perhaps, whose losses
// did not come in a row with it), and counted by its N when the combined
// list has no room left for it.
func TestCombinedReportCountsEachLineByItsTimes(t *testing.T) {
	var parts []*Report
	for _, q := range []string{"a", "b", "c"} {
		b := &reportBuilder{r: Report{Queue: q, Counts: map[Path]int{}}, inflight: map[uint64]journey{}}
		for i := range 500 {
			for range 5 {
				b.lostIntake(alternately[i%2])
			}
		}
		parts = append(parts, b.seal(q, 0))
	}
	rep := combine(parts)
	// 1,500 lines of 5: 999 listed, 501 not, 2,505 losses.
	if len(rep.Lost) != 1000 || rep.Lost[0] != "a: lost (5 times in a row)" || rep.Lost[999] != lostline.More(2505) {
		t.Errorf("%d lost lines, the first %q, the last %q", len(rep.Lost), rep.Lost[0], rep.Lost[len(rep.Lost)-1])
	}
	for rep, want := range map[*Report]string{rep: "; 7500 sessions", parts[0]: "; 2500 sessions"} {
		if first, _, _ := strings.Cut(rep.String(), "\n"); !strings.Contains(first, want) {
			t.Errorf("summary %q; want %q", first, want)
		}
	}

	// Two services of one queue: the first's last line and the second's
	// first are the same reason, each already counted.
	twice := func() *Report {
		b := &reportBuilder{r: Report{Queue: "q", Counts: map[Path]int{}}, inflight: map[uint64]journey{}}
		for range 4 {
			b.lostIntake("x")
		}
		return b.seal("q", 0)
	}
	both := combine([]*Report{twice(), twice()})
	if want := []string{"q: x (4 times in a row)", "q: x (4 times in a row)"}; !slices.Equal(both.Lost, want) {
		t.Errorf("lost %q, want %q", both.Lost, want)
	}
	if !strings.Contains(both.String(), "; 8 sessions or connection attempts lost") {
		t.Errorf("summary %q; want 8 lost", both.String())
	}
}
