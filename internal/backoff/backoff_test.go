package backoff

import (
	"context"
	"testing"
	"time"

	_ "github.com/lily-mq/lily/internal/update"
)

// Each wait lies between half and all of its doubled bound, which stops
// doubling at most.
func TestWaitDoublesWithinItsBounds(t *testing.T) {
	for n, bound := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 10: time.Second, 1000: time.Second} {
		for range 100 {
			if w := Wait(n, 100*time.Millisecond, time.Second); w < bound/2 || w > bound {
				t.Fatalf("Wait(%d) = %s, want %s to %s", n, w, bound/2, bound)
			}
		}
	}
}

func TestSleepEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Error("slept through a cancelled context")
	}
	if !Sleep(context.Background(), time.Millisecond) {
		t.Error("did not sleep")
	}
}
