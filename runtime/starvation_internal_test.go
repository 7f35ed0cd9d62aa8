package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/lily-mq/lily/runtime/internal/settle"
	"github.com/lily-mq/lily/topology"
)

// A quorum channel idle with room is watched for starvation while it
// consumes; once the session retired (its intake ended at a broker cancel),
// it is fed nothing by design, and the watch would requeue the deliveries
// still waiting on it before their bound.
func TestRetiredSessionIsNotWatchedForStarvation(t *testing.T) {
	spec := QueueSpec{
		Name: "starve-test", Topology: topology.Queue{Type: "quorum", DeadLetterQueue: "starve-test.dlq"},
		Prefetch: 4, Concurrency: 2, MaxAttempts: 1, MaxBodyBytes: 1024, HandlerTimeout: time.Second,
	}
	c, err := NewConsumer(spec, Routes{{Type: "t"}: func(context.Context, RawDelivery) error { return nil }}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	c.tuning.starveAfter = time.Millisecond
	idleFor := func(s *session) time.Duration {
		r := c.newRun()
		s.gen = r.newGeneration()
		s.gen.Settler = settle.NewSettler(discardAcker{}, s.gen, spec.Prefetch)
		c.idle(r, s) // the watch starts
		time.Sleep(10 * time.Millisecond)
		idle, _ := c.idle(r, s)
		return idle
	}
	if idle := idleFor(&session{}); idle == 0 {
		t.Fatal("a consuming session idle with room is not watched")
	}
	retired := &session{}
	retired.retired.Store(true)
	if idle := idleFor(retired); idle != 0 {
		t.Errorf("a retired session is watched: idle %v", idle)
	}
}
