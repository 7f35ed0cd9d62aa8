package ledger

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/topology"
)

// handedOut runs spread over n items for a run whose one kind of fault, the
// forced stop under a burst, has not struck, and returns the count of items handed out so far, and the
// channel that answers once spread returned.
func handedOut(t *testing.T, cfg Config, n int) (*run, *atomic.Int64, <-chan error) {
	t.Helper()
	r := newRun(cfg, spec("spread-test", topology.Classic))
	r.ids = make([]string, n)
	r.faults[faultForcedUnderBurst] = 0
	var count atomic.Int64
	done := make(chan error, 1)
	go func() {
		done <- r.spread(t.Context(), n, 4, func(j int) int { return j }, func(int) error {
			count.Add(1)
			return nil
		})
	}()
	return r, &count, done
}

// waitFor polls cond until it holds, failing t after a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 30 s", what)
		}
	}
}

// The last holdBack items wait for every kind of fault to strike: a burst
// still takes its items at once, and once the kind struck the rest go.
func TestSpreadHoldsTheLastItemsUntilEveryFaultStruck(t *testing.T) {
	const n = holdBack + 20
	r, count, done := handedOut(t, Config{Deadline: time.Hour}, n)
	waitFor(t, "unheld item", func() bool { return count.Load() >= n-holdBack })
	if got := count.Load(); got > n-burstSize {
		t.Fatalf("%d of %d items handed out before any fault struck; the last %d are held", got, n, burstSize)
	}
	before := count.Load()
	r.burst <- 10
	waitFor(t, "burst of 10 handed out", func() bool { return count.Load() >= before+10 })
	r.mu.Lock()
	r.faults[faultForcedUnderBurst]++
	r.mu.Unlock()
	waitFor(t, "item left in hand", func() bool { return count.Load() == n })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// The hold ends at two thirds of the Deadline, whatever struck, however
// short PublishOver: PublishOver is the least the publishing lasts.
func TestSpreadHoldEndsAtTwoThirdsOfTheDeadline(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ deadline, end time.Duration }{
		{120 * time.Second, 80 * time.Second},
		{180 * time.Second, 120 * time.Second},
		{30 * time.Minute, 20 * time.Minute},
	} {
		if got := holdEnd(c.deadline); got != c.end {
			t.Errorf("with a deadline of %v the hold ends %v in, want %v", c.deadline, got, c.end)
		}
	}
	const n = holdBack + 20
	_, count, done := handedOut(t, Config{Deadline: 2 * time.Second}, n)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := count.Load(); got != n {
		t.Fatalf("%d of %d items handed out", got, n)
	}
}

// After a burst the schedule goes on at once, over what is left of it: the
// burst leaves no gap behind it.
func TestScheduleGoesOnAfterABurst(t *testing.T) {
	start := time.Unix(1000, 0)
	plan := schedule{from: start, end: start.Add(75 * time.Second), total: 1500}
	if got := plan.due(300); !got.Equal(start.Add(15 * time.Second)) {
		t.Fatalf("message 300 is due at %v, want 15 s in", got.Sub(start))
	}
	// 300 messages handed out at once 1 s in: the next goes then, and the
	// last stays due at the end.
	plan.from, plan.fromFirst = start.Add(time.Second), 300
	if got := plan.due(300); !got.Equal(start.Add(time.Second)) {
		t.Errorf("after the burst, message 300 is due at %v, want 1 s in", got.Sub(start))
	}
	if got := plan.due(1500); !got.Equal(start.Add(75 * time.Second)) {
		t.Errorf("the end is at %v, want 75 s in", got.Sub(start))
	}
}

// spread restarts its schedule once a burst is handed out: over an hour,
// the message after a burst of 500 of 1,000 goes at once, not half an hour
// in.
func TestSpreadGoesOnAfterABurst(t *testing.T) {
	r := newRun(Config{PublishOver: time.Hour, Deadline: 2 * time.Hour}, spec("spread-test", topology.Classic))
	r.ids = make([]string, 1000)
	r.burst <- 500 // asked before the first item is due (3.6 s in)
	var count atomic.Int64
	go func() {
		_ = r.spread(t.Context(), len(r.ids), 4, func(j int) int { return j + 1 }, func(int) error {
			count.Add(1)
			return nil
		})
	}()
	waitFor(t, "item after the burst", func() bool { return count.Load() > 500 })
}

// A burst takes half the items left at most: the rest still go over what
// is left of PublishOver, which stays the least the publishing lasts.
func TestABurstLeavesItemsForThePublishingToCome(t *testing.T) {
	t.Parallel()
	const n, over = 20, 2 * time.Second
	r := newRun(Config{PublishOver: over, Deadline: time.Minute}, spec("spread-test", topology.Classic))
	r.ids = make([]string, n)
	r.burst <- burstSize // more than there are items
	var count atomic.Int64
	start := time.Now()
	if err := r.spread(t.Context(), n, 4, func(j int) int { return j }, func(int) error {
		// The burst, and the item due as it ends; the next waits its turn.
		if count.Add(1) == n/2+2 && time.Since(start) < over/20 {
			t.Errorf("more than half the items handed out at once, %v in", time.Since(start))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < over*3/4 {
		t.Errorf("the publishing lasted %v, and PublishOver is %v", took, over)
	}
	if got := count.Load(); got != n {
		t.Errorf("%d of %d items handed out", got, n)
	}
}

// Once the publishing is over nothing reads a burst (PublishOver 0
// publishes everything before the consumer starts): the forced stop goes
// ahead under what is queued, however often it struck before, rather than
// fail every turn on a burst never handed out, the other kinds behind it.
func TestTheForcedStopStrikesAgainOnceThePublishingIsOver(t *testing.T) {
	r := newRun(Config{Deadline: time.Minute}, spec("spread-test", topology.Classic))
	if err := r.spread(t.Context(), 0, 1, func(j int) int { return j }, func(int) error { return nil }); err != nil {
		t.Fatal(err)
	}
	r.burst <- burstSize // asked by the stop before, never read
	for range 2 {
		struck := make(chan bool, 1)
		go func() {
			ok, _ := r.forcedUnderBurst(t.Context())
			struck <- ok
		}()
		select {
		case <-r.restart:
		case <-struck:
			t.Fatal("the forced stop gave up: its burst was never read")
		}
		r.forced <- &runtime.Report{
			Phases:     []runtime.Phase{{Name: "force window"}},
			Counts:     map[runtime.Path]int{runtime.PathNotStarted: 1},
			Unresolved: []runtime.Record{{Reason: "still in flight when the consumer closed (final abort)"}},
		}
		if !<-struck {
			t.Fatal("a stop that met work in flight did not strike")
		}
	}
}

// The held items go spread over what is left of the hold, one every
// trickle at the most; a burst's worth is kept in hand only until the
// forced stop under a burst struck.
func TestHeldItemsKeepABurstInHandUntilItStruck(t *testing.T) {
	for _, c := range []struct {
		remaining, reserve int
		left, every        time.Duration
		goes               bool
	}{
		{450, 300, time.Minute, 400 * time.Millisecond, true},
		{450, 300, time.Second, trickle, true},
		{300, 300, time.Minute, 0, false},
		{100, 0, 10 * time.Second, trickle, true},
		{10, 0, 10 * time.Second, time.Second, true},
	} {
		if every, goes := pace(c.remaining, c.reserve, c.left); every != c.every || goes != c.goes {
			t.Errorf("pace(%d, %d, %v) = %v, %v; want %v, %v", c.remaining, c.reserve, c.left, every, goes, c.every, c.goes)
		}
	}
	r := newRun(Config{}, spec("spread-test", topology.Classic))
	if n := r.inHand(); n != 0 {
		t.Errorf("a run without the burst keeps %d in hand", n)
	}
	r.faults[faultForcedUnderBurst] = 0
	if n := r.inHand(); n != burstSize {
		t.Errorf("before the burst struck: %d kept in hand, want %d", n, burstSize)
	}
	r.faults[faultForcedUnderBurst]++
	if n := r.inHand(); n != 0 {
		t.Errorf("after the burst struck: %d kept in hand", n)
	}
}
