package pgoutbox

import "testing"

// A Force before Run is dropped, so that a Run begun later lets its sends
// end; once Run has begun, a Force is kept for its stop.
func TestForceBeforeRunIsDropped(t *testing.T) {
	r := &Relay{forceNow: make(chan struct{})}
	forced := func() bool {
		select {
		case <-r.forceNow:
			return true
		default:
			return false
		}
	}
	r.Force()
	if forced() {
		t.Error("a Force before Run was kept: the next stop would not wait for its sends")
	}
	r.ran.Store(true)
	r.Force()
	if !forced() {
		t.Error("a Force once Run has begun was dropped")
	}
}
