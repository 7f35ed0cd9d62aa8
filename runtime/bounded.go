package runtime

import (
	"context"
	"errors"
	"sync"
	"time"
)

// errStepTimeout: a broker step did not return in time. The step may still
// complete later; its outcome is unknown.
var errStepTimeout = errors.New("the broker step did not return in time")

// DefaultStepTimeout bounds one broker step (publish, ACK, NACK, channel open,
// cancel, proof) when a Config leaves StepTimeout zero.
const DefaultStepTimeout = 5 * time.Second

// bounded runs one broker step and waits for it at most until ctx is done.
// amqp091's writes are not context-aware, so a step that does not return in
// time keeps running in its goroutine (it ends when the connection does); the
// caller gets errStepTimeout and must treat the step's outcome as unknown.
func bounded[T any](ctx context.Context, step func() (T, error)) (T, error) {
	return boundedOpen(ctx, step, nil)
}

// boundedOpen is bounded for a step that opens something (a connection, a
// channel): what the step opens after it was given up is handed to discard,
// which closes it, instead of staying open with nobody to use it.
func boundedOpen[T any](ctx context.Context, step func() (T, error), discard func(T)) (T, error) {
	type result struct {
		v   T
		err error
	}
	var zero T
	if ctx.Err() != nil {
		return zero, errStepTimeout
	}
	done := make(chan result, 1)
	go func() {
		v, err := step()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		if discard != nil {
			go func() {
				if r := <-done; r.err == nil {
					discard(r.v)
				}
			}()
		}
		return zero, errStepTimeout
	}
}

// boundedErr is bounded for steps that return only an error.
func boundedErr(ctx context.Context, step func() error) error {
	_, err := bounded(ctx, func() (struct{}, error) { return struct{}{}, step() })
	return err
}

// stepContext bounds one step by the step timeout and the delivery's deadline,
// whichever comes first.
func stepContext(timeout time.Duration, deadline time.Time) (context.Context, context.CancelFunc) {
	return context.WithDeadline(context.Background(), stepDeadline(timeout, deadline))
}

// stepDeadline is the moment one step started now must end by: the step
// timeout, or the delivery's deadline if that comes first.
func stepDeadline(timeout time.Duration, deadline time.Time) time.Time {
	if d := time.Now().Add(timeout); deadline.IsZero() || d.Before(deadline) {
		return d
	}
	return deadline
}

// timers keeps stopped timers for the waits every delivery makes (its
// settlement, its handoff), so that each wait does not allocate one.
var timers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// timerUntil returns a pooled timer that fires at deadline; hand it back with
// releaseTimer. Since Go 1.23 a stopped timer delivers no stale value after
// Reset, so reuse is safe.
func timerUntil(deadline time.Time) *time.Timer {
	t := timers.Get().(*time.Timer)
	t.Reset(time.Until(deadline))
	return t
}

func releaseTimer(t *time.Timer) {
	t.Stop()
	timers.Put(t)
}
