// Package reserve keeps part of a step's time back from an inbox's commit: a
// commit cut at its own, earlier deadline still leaves the step room to look
// its outcome up, or to try it again, where one given the whole step would
// leave none and could only be called ambiguous. A claim's wait on a lock
// ends as early, so that the server's answer and the rollback still fit.
package reserve

import (
	"context"
	"time"
)

// The time kept back: a quarter of what is left, within these bounds, and
// never more than half.
const (
	Min = 250 * time.Millisecond
	Max = 2 * time.Second
)

// Before is ctx ending the reserve before ctx's deadline; ctx, cancellable,
// when it has none.
func Before(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, deadline.Add(-kept(time.Until(deadline))))
}

// Left is the time ctx leaves before its reserve, as Before's deadline
// would; ok is false when ctx has no deadline.
func Left(ctx context.Context) (left time.Duration, ok bool) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return 0, false
	}
	left = time.Until(deadline)
	return left - kept(left), true
}

// kept is the reserve of a step with left to run.
func kept(left time.Duration) time.Duration {
	return min(max(left/4, Min), Max, left/2)
}
