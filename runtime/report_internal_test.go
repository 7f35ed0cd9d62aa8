package runtime

import (
	"maps"
	"testing"
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
