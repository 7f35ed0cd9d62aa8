package reserve

import (
	"context"
	"testing"
	"time"

	_ "github.com/lily-mq/lily/internal/update"
)

// The reserve is a quarter of what is left, at least Min and at most Max,
// and never more than half.
func TestKept(t *testing.T) {
	for _, tc := range []struct{ left, want time.Duration }{
		{400 * time.Millisecond, 200 * time.Millisecond}, // half, under Min
		{time.Second, Min},
		{2 * time.Second, 500 * time.Millisecond},
		{5 * time.Second, 1250 * time.Millisecond},
		{time.Minute, Max},
		{-time.Second, -500 * time.Millisecond}, // past: WithDeadline keeps the parent's
	} {
		if got := kept(tc.left); got != tc.want {
			t.Errorf("%v left: %v kept back, want %v", tc.left, got, tc.want)
		}
	}
}

// Before ends before its parent, by no more than Max; a context without a
// deadline gets none.
func TestBefore(t *testing.T) {
	parent, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctx, stop := Before(parent)
	defer stop()
	end, _ := parent.Deadline()
	if got, _ := ctx.Deadline(); got != end.Add(-Max) {
		t.Errorf("deadline %v, want %v before its parent's", end.Sub(got), Max)
	}
	free, stop := Before(context.Background())
	defer stop()
	if _, ok := free.Deadline(); ok {
		t.Error("a deadline from a context without one")
	}
}

// Left is at most what Before leaves, and has nothing to say of a context
// without a deadline.
func TestLeft(t *testing.T) {
	parent, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	end, _ := parent.Deadline()
	most := time.Until(end.Add(-Max))
	left, ok := Left(parent)
	if least := time.Until(end.Add(-Max)); !ok || left > most || left < least {
		t.Errorf("Left = %v, %v; want between %v and %v", left, ok, least, most)
	}
	if left, ok := Left(context.Background()); ok {
		t.Errorf("Left of a context without a deadline = %v, true", left)
	}
}
