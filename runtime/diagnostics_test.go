package runtime_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
)

// Every stage of a delivery reaches the logger in order, sanitized; the
// ACK's proof comes after its settlement; each shutdown phase is logged as it
// starts and as it ends.
func TestBrokerEventsPerStage(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	publish(t, q.Name, order(t, "evt-1"))
	r, c := prepare(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { return nil })
	// The ACK awaits its proof from the moment it is sent, before its
	// settled event: the prover could log the proof first. The close
	// proves it, once every journey has ended.
	c.SetProofInterval(time.Hour)
	r.launch(c)
	r.await(1)
	rep := r.stop()
	var stages, phases []string
	all := r.events.all()
	for _, ev := range all {
		switch {
		case ev.messageID == "evt-1":
			stages = append(stages, ev.stage)
		case ev.stage == "shutdown-phase":
			phases = append(phases, ev.detail)
		}
	}
	if got, want := strings.Join(stages, " "), "received handled settled ack-proven"; got != want {
		t.Errorf("stages %q, want %q", got, want)
	}
	want := "stop intake: started, stop intake: ended, cooperative window: started, cooperative window: ended, " +
		"final abort: started, final abort: ended, close: started, close: ended"
	if got := strings.Join(phases, ", "); got != want {
		t.Errorf("phases %q,\nwant %q", got, want)
	}
	if rep.AcksProven != 1 || len(rep.Phases) != 4 {
		t.Errorf("report: %s", rep)
	}
	if all[0].stage != "connected" {
		t.Errorf("the first event is %+v, want connected", all[0])
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}})
}
