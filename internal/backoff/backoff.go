// Package backoff paces retries: the consumer's and the publisher's
// reconnects, the outbox relay's retries of a row and of its database, and
// the fault harness's pauses.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Wait is the wait before attempt n (from 1): doubling from first up to
// most, each drawn between half of it and all of it, so that many clients
// (or many rows of one outage) do not come back at once.
func Wait(n int, first, most time.Duration) time.Duration {
	d := min(first<<min(n-1, 20), most)
	return d/2 + rand.N(d/2+1)
}

// Sleep waits d unless ctx ends first; it reports whether it slept it all.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
