package mongoinbox

import (
	"context"
	"testing"
	"time"
)

// Renewal stops at the transaction's lifetime, on its own: a handler that
// never returns must not hold its message off for ever with a lease no
// commit can follow. The last renewal ends the lease at that lifetime.
func TestRenewalStopsAtTheTransactionLifetime(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // never before keepLease returns: that is the point
	end := time.Now().Add(200 * time.Millisecond)
	var untils []time.Time
	done := make(chan struct{})
	go func() {
		defer close(done)
		keepLease(ctx, 10*time.Millisecond, 50*time.Millisecond, end, func(_ context.Context, until time.Time) {
			untils = append(untils, until)
		})
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cancel()
		<-done
		t.Fatalf("still renewing 30 s after the lifetime's end (%d renewals)", len(untils))
	}
	if len(untils) < 2 {
		t.Fatalf("%d renewals, want several before the end", len(untils))
	}
	for _, u := range untils {
		if u.After(end) {
			t.Errorf("a renewal to %v, past the lifetime's end %v", u, end)
		}
	}
	if last := untils[len(untils)-1]; !last.Equal(end) {
		t.Errorf("the last renewal ends the lease at %v, want the lifetime's end %v", last, end)
	}
}

// Renewal stops at once when the claim ends.
func TestRenewalStopsWhenTheClaimEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		keepLease(ctx, time.Millisecond, time.Hour, time.Now().Add(time.Hour), func(context.Context, time.Time) {})
	}()
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("still renewing 30 s after the claim ended")
	}
}

func TestLeaseUntilNeverPassesTheEnd(t *testing.T) {
	now := time.Now()
	end := now.Add(time.Minute)
	if got := leaseUntil(now, 30*time.Second, end); !got.Equal(now.Add(30 * time.Second)) {
		t.Errorf("a lease well within the lifetime ends at %v, want %v", got, now.Add(30*time.Second))
	}
	if got := leaseUntil(now, 2*time.Minute, end); !got.Equal(end) {
		t.Errorf("a lease longer than the lifetime ends at %v, want the lifetime's end %v", got, end)
	}
}
