package runtime_test

import (
	"context"
	"errors"
	goruntime "runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
)

type scopeKey struct{}

// The scope's context reaches the handler, its cleanup runs after it, and a
// cleanup failure keeps the delivery from the ACK: it takes the retry path.
func TestBrokerScopeCleanupFailureIsRetried(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, hourRetry)
	declareTopology(t, q)
	publish(t, q.Name, order(t, "scoped-1"))
	var sawScope, cleaned, after atomic.Bool
	c := start(t, q, func(ctx context.Context, _ *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		sawScope.Store(ctx.Value(scopeKey{}) == "open")
		return nil
	}, func(cfg *runtime.Config) {
		cfg.Scope = func(ctx context.Context, _ runtime.RawDelivery) (context.Context, func(context.Context) error, error) {
			return context.WithValue(ctx, scopeKey{}, "open"), func(context.Context) error {
				cleaned.Store(true)
				return errors.New("temp file not removed")
			}, nil
		}
		cfg.AfterDelivery = func(_ context.Context, _ runtime.RawDelivery, soFar runtime.Record) error {
			after.Store(soFar.Reason == "cleanup: temp file not removed" && soFar.Handler == "ok")
			return nil
		}
	})
	rec := c.await(1)[0]
	wantPath(t, rec, runtime.PathRetried)
	if !sawScope.Load() || !cleaned.Load() || !after.Load() {
		t.Errorf("scope seen %v, cleanup ran %v, after_delivery saw the cleanup failure %v", sawScope.Load(), cleaned.Load(), after.Load())
	}
	if rec.Handler != "ok" || rec.Reason != "cleanup failed on attempt 1 of 3: cleanup: temp file not removed" {
		t.Errorf("record: handler %q, reason %q", rec.Handler, rec.Reason)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket(q, time.Hour): {1, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// A handler abandoned at its timeout has returned, but its scope's cleanup is
// still running at the final abort: the report counts it abandoned, for its
// end was not observed. Its delivery was retried at the timeout.
func TestBrokerAbandonedHandlersCleanupIsAbandonedAtTheAbort(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, hourRetry, func(q *runtime.QueueSpec) { q.HandlerTimeout = 200 * time.Millisecond })
	declareTopology(t, q)
	publish(t, q.Name, order(t, "cleaning-1"))
	retried, cleaning, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	defer close(release)
	c := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		<-retried // ignores its context
		return nil
	}, func(cfg *runtime.Config) {
		cfg.StepTimeout, cfg.ShutdownGrace, cfg.ForceWindow = 30*time.Second, 100*time.Millisecond, 100*time.Millisecond
		cfg.Scope = func(ctx context.Context, _ runtime.RawDelivery) (context.Context, func(context.Context) error, error) {
			return ctx, func(context.Context) error {
				close(cleaning)
				<-release
				return nil
			}, nil
		}
	})
	rec := c.await(1)[0]
	wantPath(t, rec, runtime.PathRetried)
	close(retried)
	<-cleaning
	rep := c.stop()
	if rec.Handler != "timed out" || rep.Abandoned != 1 || len(rep.Unresolved) != 0 {
		t.Errorf("record %+v; report: %s", rec, rep)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket(q, time.Hour): {1, 0}})
}

// A scope that cannot open is a retryable failure, and the handler never runs.
func TestBrokerScopeThatFailsToOpenSkipsTheHandler(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, hourRetry)
	declareTopology(t, q)
	publish(t, q.Name, order(t, "unscoped-1"))
	var calls atomic.Int32
	c := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { calls.Add(1); return nil }, func(cfg *runtime.Config) {
		cfg.Scope = func(ctx context.Context, _ runtime.RawDelivery) (context.Context, func(context.Context) error, error) {
			return ctx, nil, errors.New("pool exhausted")
		}
	})
	rec := c.await(1)[0]
	wantPath(t, rec, runtime.PathRetried)
	if calls.Load() != 0 || rec.Handler != "" || !strings.HasSuffix(rec.Reason, ": scope: pool exhausted") {
		t.Errorf("handler calls %d, record %+v", calls.Load(), rec)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket(q, time.Hour): {1, 0}})
}

// A handler that calls runtime.Goexit (t.FailNow does, on a goroutine other
// than its test's) never returns, yet ends: its delivery is retried at once,
// as for a panic, not at the handler timeout, its claim is rolled back and
// its scope cleaned up. Nothing is left running for the report to count
// abandoned.
func TestBrokerHandlerGoexitIsRetriedAtOnce(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, hourRetry, heldHandler)
	declareTopology(t, q)
	publish(t, q.Name, order(t, "goexit-1"))
	var cleaned atomic.Int32
	claims := &rollbackInbox{}
	c := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		goruntime.Goexit()
		return nil
	}, func(cfg *runtime.Config) {
		cfg.Inbox = claims
		cfg.Scope = func(ctx context.Context, _ runtime.RawDelivery) (context.Context, func(context.Context) error, error) {
			return ctx, func(context.Context) error { cleaned.Add(1); return nil }, nil
		}
	})
	rec := c.await(1)[0]
	wantPath(t, rec, runtime.PathRetried)
	rep := c.stop()
	if rec.Handler != "panicked" || !strings.Contains(rec.Reason, "runtime.Goexit") || cleaned.Load() != 1 || claims.rollbacks.Load() != 1 {
		t.Errorf("record: handler %q, reason %q; cleanups %d, rollbacks %d", rec.Handler, rec.Reason, cleaned.Load(), claims.rollbacks.Load())
	}
	if rep.Abandoned != 0 || len(rep.Unresolved) != 0 {
		t.Errorf("report: %s", rep)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket(q, time.Hour): {1, 0}})
}

// rollbackInbox claims every message and counts its claims rolled back.
type rollbackInbox struct{ rollbacks atomic.Int32 }

func (i *rollbackInbox) Begin(context.Context, string, string) (runtime.InboxTx, error) {
	return rollbackTx{i}, nil
}

type rollbackTx struct{ in *rollbackInbox }

func (rollbackTx) Bind(ctx context.Context) context.Context { return ctx }
func (rollbackTx) Commit(context.Context) error             { return nil }
func (t rollbackTx) Rollback(context.Context)               { t.in.rollbacks.Add(1) }

// A delivery whose after_delivery is still running at the final abort: the
// close waits for it within its step, so a hook that ends in time ends
// before Run returns; one still running past its step runs on after Run
// returned, and the report counts it abandoned.
func TestBrokerUserStepAtTheAbortIsWaitedForOrCounted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		step, hookTakes time.Duration
		abandoned       int
	}{
		{"ends within the step", 5 * time.Second, time.Second, 0},
		// A step that carries the first connection on a loaded machine.
		{"outlives the step", 3 * time.Second, 6 * time.Second, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := brokerSpec(t, heldHandler)
			declareTopology(t, q)
			publish(t, q.Name, order(t, "late-1"))
			handled := make(chan struct{})
			var hookEnded atomic.Int64
			c := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
				close(handled)
				return nil
			}, func(cfg *runtime.Config) {
				cfg.StepTimeout, cfg.ShutdownGrace, cfg.ForceWindow = tc.step, 100*time.Millisecond, 100*time.Millisecond
				cfg.AfterDelivery = func(context.Context, runtime.RawDelivery, runtime.Record) error {
					time.Sleep(tc.hookTakes) // ignores its context
					hookEnded.Store(time.Now().UnixNano())
					return nil
				}
			})
			<-handled
			rep := c.stop()
			returned := time.Now().UnixNano()
			ended := hookEnded.Load()
			if tc.abandoned == 0 && (ended == 0 || ended > returned) {
				t.Error("after_delivery was still running when Run returned")
			}
			if rep.Abandoned != tc.abandoned || rep.Counts[runtime.PathUnresolved] != 1 || len(rep.Unresolved) != 1 {
				t.Errorf("report: %s; want %d abandoned, late-1 unresolved", rep, tc.abandoned)
			}
			assertCounts(t, map[string][2]int{q.Name: {1, 0}})
		})
	}
}
