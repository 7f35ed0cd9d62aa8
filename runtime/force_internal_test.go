package runtime

import "testing"

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
