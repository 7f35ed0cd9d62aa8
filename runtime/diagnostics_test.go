package runtime

import (
	"context"
	"strings"
	"sync"
	"testing"
)

// sinkFunc adapts a function to Sink.
type sinkFunc func(Event)

func (f sinkFunc) Event(ev Event) { f(ev) }

// Every stage of a delivery reaches the sink and the recent-events buffer in
// order, sanitized; the ACK's proof comes after its settlement.
func TestBrokerEventsPerStage(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	publish(t, q.Name, jsonMsg("evt-1", 1))
	var mu sync.Mutex
	var stages []Stage
	r, c := prepare(t, q, onlyV1(func(context.Context, RawDelivery) error { return nil }), func(cfg *Config) {
		cfg.Sink = sinkFunc(func(ev Event) {
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
	want := []Stage{StageReceived, StageHandled, StageSettled, StageAckProven}
	if strings.Join(stagesText(got), " ") != strings.Join(stagesText(want), " ") {
		t.Errorf("stages %v, want %v", got, want)
	}
	if rep.AcksProven != 1 {
		t.Errorf("report: %s", rep)
	}
	recent := c.RecentEvents()
	if len(recent) == 0 || recent[0].Stage != StageConnected || recent[len(recent)-1].Detail != "close" {
		t.Errorf("recent events from %v to %v", recent[0], recent[len(recent)-1])
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}})
}

func stagesText(stages []Stage) []string {
	out := make([]string, len(stages))
	for i, s := range stages {
		out[i] = string(s)
	}
	return out
}

func TestEventRingKeepsTheMostRecent(t *testing.T) {
	r := newEventRing(3)
	for i := range 5 {
		r.push(Event{Attempt: i})
	}
	got := r.snapshot()
	if len(got) != 3 || got[0].Attempt != 2 || got[2].Attempt != 4 {
		t.Errorf("snapshot %+v", got)
	}
}
