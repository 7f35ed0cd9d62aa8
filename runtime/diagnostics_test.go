package runtime_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/lilytest"
)

// sinkFunc adapts a function to Sink.
type sinkFunc func(runtime.Event)

func (f sinkFunc) Event(ev runtime.Event) { f(ev) }

// Every stage of a delivery reaches the sink and the recent-events buffer in
// order, sanitized; the ACK's proof comes after its settlement.
func TestBrokerEventsPerStage(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	publish(t, q.Name, order(t, "evt-1"))
	var mu sync.Mutex
	var stages []runtime.Stage
	r, c := prepare(t, q, func(context.Context, *lilytest.OrderPlacedV1, runtime.RawDelivery) error { return nil }, func(cfg *runtime.Config) {
		cfg.Sink = sinkFunc(func(ev runtime.Event) {
			if ev.MessageID == "evt-1" {
				mu.Lock()
				stages = append(stages, ev.Stage)
				mu.Unlock()
			}
		})
	})
	r.launch(c)
	r.await(1)
	rep := r.stop()
	mu.Lock()
	got := stages
	mu.Unlock()
	want := []runtime.Stage{runtime.StageReceived, runtime.StageHandled, runtime.StageSettled, runtime.StageAckProven}
	if strings.Join(stagesText(got), " ") != strings.Join(stagesText(want), " ") {
		t.Errorf("stages %v, want %v", got, want)
	}
	if rep.AcksProven != 1 {
		t.Errorf("report: %s", rep)
	}
	recent := c.RecentEvents()
	if len(recent) == 0 || recent[0].Stage != runtime.StageConnected || recent[len(recent)-1].Detail != "close" {
		t.Errorf("recent events from %v to %v", recent[0], recent[len(recent)-1])
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}})
}

func stagesText(stages []runtime.Stage) []string {
	out := make([]string, len(stages))
	for i, s := range stages {
		out[i] = string(s)
	}
	return out
}
