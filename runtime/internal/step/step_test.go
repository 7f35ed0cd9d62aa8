package step

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// A step that calls runtime.Goexit (t.FailNow does, off its test's
// goroutine) is answered when its goroutine ends, not at its deadline.
func TestOpenAnswersAStepThatExits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	discarded := make(chan int, 1)
	_, err := Open(ctx, func() (int, error) {
		runtime.Goexit()
		return 1, nil
	}, func(v int) { discarded <- v })
	if !errors.Is(err, ErrExited) {
		t.Fatalf("err = %v, want ErrExited", err)
	}
	if ctx.Err() != nil {
		t.Fatal("answered only at the deadline")
	}
	select {
	case v := <-discarded:
		t.Errorf("discarded %d: a step that exited opened nothing", v)
	default:
	}
}

// A step that fails as its time runs out (amqp091's own socket deadline
// of the same length answers a handshake cut short with a 403 for the
// vhost) is answered as timed out, though the wait saw its answer before
// the deadline: its error says nothing about the broker.
func TestAStepFailingAtItsDeadlineTimedOut(t *testing.T) {
	vhost := errors.New("Exception (403) Reason: \"no access to this vhost\"")
	ctx := &endsUnseen{Context: context.Background()}
	_, err := Do(ctx, func() (int, error) {
		ctx.ended.Store(true)
		return 0, vhost
	})
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, vhost) {
		t.Fatalf("err = %v, want ErrTimeout, keeping the step's own", err)
	}
	if d := Described(err, errors.New("slow")); d.Error() != "slow; as its time ran out it failed: "+vhost.Error() {
		t.Errorf("described: %v", d)
	}
}

// endsUnseen is a context whose end the wait does not see (its Done never
// closes), as when the step's answer is picked first: only Err says so.
type endsUnseen struct {
	context.Context
	ended atomic.Bool
}

func (c *endsUnseen) Done() <-chan struct{} { return nil }

func (c *endsUnseen) Err() error {
	if c.ended.Load() {
		return context.DeadlineExceeded
	}
	return nil
}

// A step that fails once its deadline has passed is late, though the timer
// that ends its context has not run yet (a loaded machine runs it late).
func TestAStepFailingPastItsDeadlineBeforeItsTimerIsLate(t *testing.T) {
	_, err := Do(timerLate{context.Background()}, func() (int, error) { return 0, errors.New("EOF") })
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
}

// timerLate is a context whose deadline has passed, its timer not yet run.
type timerLate struct{ context.Context }

func (timerLate) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }
func (timerLate) Done() <-chan struct{}       { return nil }
func (timerLate) Err() error                  { return nil }
