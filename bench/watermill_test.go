package main

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Watermill's measure holds a message delivered while the router's other
// subscriptions still open: neither the handler runs nor the run's clocks
// start until every subscription consumes, so that the time and CPU its
// opening takes are not counted as the run's.
func TestWatermillClockWaitsForSubscriptions(t *testing.T) {
	tr := newTracker(1)
	ready := make(chan struct{})
	handled := make(chan struct{}, 1)
	failed := make(chan error, 1)
	h := measure(t.Context(), ready, tr, failed)(func(*message.Message) ([]*message.Message, error) {
		handled <- struct{}{}
		return nil, nil
	})
	returned := make(chan error, 1)
	go func() {
		_, err := h(message.NewMessage("o-1", nil))
		returned <- err
	}()
	select {
	case <-handled:
		t.Fatal("the handler ran before every subscription consumed")
	case <-time.After(100 * time.Millisecond):
	}
	if cpu := tr.firstCPU.Load(); cpu != 0 {
		t.Fatalf("the CPU clock started at %d ns before every subscription consumed", cpu)
	}
	for selfCPU() < 20*time.Millisecond {
		// Spend some CPU before the gate opens, so that a clock started
		// earlier would show.
	}
	opened, openedCPU := time.Now(), selfCPU()
	close(ready)
	if err := <-returned; err != nil {
		t.Fatal(err)
	}
	select {
	case <-handled:
	default:
		t.Fatal("the handler did not run once every subscription consumed")
	}
	if got := time.Duration(tr.firstCPU.Load()); got < openedCPU {
		t.Errorf("the CPU clock started at %v, before the subscriptions' %v", got, openedCPU)
	}
	if got := tr.started(); got.Before(opened) {
		t.Errorf("the run's time started %v before every subscription consumed", opened.Sub(got))
	}
	select {
	case <-tr.done:
	default:
		t.Error("the settlement was not noted")
	}
	select {
	case err := <-failed:
		t.Errorf("failed: %v", err)
	default:
	}
}

// A message still held when the run ends is failed back to the router, so
// that the router's close does not wait for it.
func TestWatermillHeldMessageAtEnd(t *testing.T) {
	tr := newTracker(1)
	ctx, cancel := context.WithCancel(t.Context())
	h := measure(ctx, make(chan struct{}), tr, make(chan error, 1))(func(*message.Message) ([]*message.Message, error) {
		t.Error("the handler ran")
		return nil, nil
	})
	cancel()
	if _, err := h(message.NewMessage("o-1", nil)); err == nil {
		t.Error("a held message at the end: no error")
	}
	if cpu := tr.firstCPU.Load(); cpu != 0 {
		t.Errorf("the CPU clock started at %d ns", cpu)
	}
}
