package runtime

import (
	"context"
	"testing"
)

// A Force before Run has no stop to hasten: it is dropped, so that a Run
// begun later gets its cooperative window. Once Run has begun, a Force is
// kept for its stop, which may not have begun yet.
func TestForceBeforeRunIsDropped(t *testing.T) {
	c := &Consumer{forceNow: make(chan struct{})}
	c.Force()
	if closed(c.forceNow) {
		t.Error("a Force before Run was kept: the next stop would have no cooperative window")
	}
	c.ran.Store(true)
	c.Force()
	if !closed(c.forceNow) {
		t.Error("a Force once Run has begun was dropped")
	}
}

// A channel that had ended cleanly by the time its close is judged was
// closed cleanly, even when the wait for it has ended too: the close's
// deadline may have passed by the time it asks.
func TestClosedCleanlyWhateverTheDeadline(t *testing.T) {
	s := &session{chEnded: make(chan struct{})}
	close(s.chEnded)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 1000 {
		if err := s.closedCleanly(ended); err != nil {
			t.Fatalf("call %d: %v, though the channel had closed cleanly", i, err)
		}
	}
}
