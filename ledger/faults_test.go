package ledger

import (
	"testing"

	"github.com/lily-mq/lily/runtime"
)

// A forced stop strikes only when it met what it is there for: a force
// window, a final abort with a delivery in flight, and a delivery requeued
// unstarted. Each missing alone makes it a stop to try again.
func TestForcedStopStrikesOnlyWithWorkInFlight(t *testing.T) {
	full := func() *runtime.Report {
		return &runtime.Report{
			Phases:     []runtime.Phase{{Name: "drain"}, {Name: "force window"}, {Name: "close"}},
			Counts:     map[runtime.Path]int{runtime.PathAcked: 40, runtime.PathNotStarted: 3},
			Unresolved: []runtime.Record{{MessageID: "m1", Handler: "abandoned", Reason: "settlement not attempted (authority revoked)"}},
		}
	}
	if !metWorkInFlight(full()) {
		t.Error("a stop that met all three did not strike")
	}
	open := full()
	open.Unresolved[0] = runtime.Record{MessageID: "m1", Reason: "still in flight when the consumer closed (final abort); the broker redelivers it"}
	if !metWorkInFlight(open) {
		t.Error("a stop whose journey was still open at the abort did not strike")
	}
	for name, spoil := range map[string]func(*runtime.Report){
		"no force window": func(r *runtime.Report) { r.Phases = r.Phases[:1] },
		"nothing aborted": func(r *runtime.Report) { r.Unresolved[0].Handler = "ok" },
		"nothing waiting": func(r *runtime.Report) { delete(r.Counts, runtime.PathNotStarted) },
	} {
		rep := full()
		spoil(rep)
		if metWorkInFlight(rep) {
			t.Errorf("%s: struck", name)
		}
	}
}
