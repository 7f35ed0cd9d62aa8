// Package step bounds each broker step in time. amqp091's calls are not
// context-aware, so a step runs on a goroutine of its own and its caller stops
// waiting at the step's deadline: the step's outcome is then unknown, and what
// it opens late is closed.
package step

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrTimeout: a broker step did not return in time. The step may still
// complete later; its outcome is unknown.
var ErrTimeout = errors.New("the broker step did not return in time")

// Late is the error of a step that failed as its time ran out: it is
// ErrTimeout (errors.Is says so), since its failure may be the deadline's
// doing, and it keeps what the step answered.
type Late struct{ Err error }

func (e *Late) Error() string {
	return ErrTimeout.Error() + "; as its time ran out it failed: " + e.Err.Error()
}

func (e *Late) Is(target error) bool { return target == ErrTimeout }

func (e *Late) Unwrap() error { return e.Err }

// Described is err, a step's ErrTimeout, as as says it, with what a Late
// step failed with.
func Described(err, as error) error {
	var late *Late
	if errors.As(err, &late) {
		return fmt.Errorf("%w; as its time ran out it failed: %w", as, late.Err)
	}
	return as
}

// ErrExited: the step ended its goroutine with runtime.Goexit instead of
// returning.
var ErrExited = errors.New("the step called runtime.Goexit instead of returning")

// Do runs one broker step and waits for it at most until ctx is done.
// amqp091's writes are not context-aware, so a step that does not return in
// time keeps running in its goroutine (it ends when the connection does); the
// caller gets ErrTimeout and must treat the step's outcome as unknown.
func Do[T any](ctx context.Context, step func() (T, error)) (T, error) {
	return Open(ctx, step, nil)
}

// Open is Do for a step that opens something (a connection, a
// channel): what the step opens after it was given up is handed to discard,
// which closes it, instead of staying open with nobody to use it.
func Open[T any](ctx context.Context, step func() (T, error), discard func(T)) (T, error) {
	type result struct {
		v   T
		err error
	}
	var zero T
	if ctx.Err() != nil {
		return zero, ErrTimeout
	}
	done := make(chan result, 1)
	go func() {
		// A step that ends its goroutine with runtime.Goexit still answers,
		// through the deferred send, rather than being waited for until ctx
		// ends.
		r := result{err: ErrExited}
		defer func() { done <- r }()
		r.v, r.err = step()
	}()
	select {
	case r := <-done:
		if r.err != nil && ended(ctx) {
			// It failed as its time ran out, for that reason perhaps: a
			// socket deadline of the same length (amqp091's dial, or the
			// broker's handshake timeout) makes amqp091 answer a handshake
			// cut short with a 403 for the vhost. Unknown, not refused.
			return zero, &Late{Err: r.err}
		}
		return r.v, r.err
	case <-ctx.Done():
		if discard != nil {
			go func() {
				if r := <-done; r.err == nil {
					discard(r.v)
				}
			}()
		}
		return zero, ErrTimeout
	}
}

// ended reports whether ctx has ended, or its deadline has passed: a
// loaded machine may run the timer that ends it later than the moment.
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	deadline, ok := ctx.Deadline()
	return ok && !time.Now().Before(deadline)
}

// DoErr is Do for steps that return only an error.
func DoErr(ctx context.Context, step func() error) error {
	_, err := Do(ctx, func() (struct{}, error) { return struct{}{}, step() })
	return err
}

// Context bounds one step by the step timeout and the delivery's deadline,
// whichever comes first.
func Context(timeout time.Duration, deadline time.Time) (context.Context, context.CancelFunc) {
	return context.WithDeadline(context.Background(), Deadline(timeout, deadline))
}

// Deadline is the moment one step started now must end by: the step
// timeout, or the delivery's deadline if that comes first.
func Deadline(timeout time.Duration, deadline time.Time) time.Time {
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

// Timer returns a pooled timer that fires at deadline; hand it back with
// Release. Since Go 1.23 a stopped timer delivers no stale value after
// Reset, so reuse is safe.
func Timer(deadline time.Time) *time.Timer {
	t := timers.Get().(*time.Timer)
	t.Reset(time.Until(deadline))
	return t
}

func Release(t *time.Timer) {
	t.Stop()
	timers.Put(t)
}
