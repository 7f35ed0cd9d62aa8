package lilytest_test

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily/internal/services"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
	"github.com/lily-mq/lily/runtime/lilytest"
)

// byOrder orders the fixture's queue by the tenant its order id begins
// with: "a-0" and "a-1" share a lane, "b-0" takes another.
func byOrder(_ map[string]any, body []byte) string {
	if bytes.Contains(body, []byte(`"b-`)) {
		return "b"
	}
	return "a"
}

// A handler past its timeout runs on, and holds its key's lane until it
// returns within the delivery's budget, as the runtime's does
// (TestBrokerOrderedHandlerPastItsTimeoutHoldsTheLane): a-1's Deliver
// waits for a-0's handler, though a-0's journey had ended (dead-lettered:
// it has one attempt).
func TestOrderedHandlerPastItsTimeoutHoldsTheLane(t *testing.T) {
	t.Parallel()
	spec := fixture.LilytestQueueSpec()
	spec.OrderKey = byOrder
	spec.MaxAttempts, spec.HandlerTimeout, spec.SettlementBudget = 1, 200*time.Millisecond, time.Minute
	var running atomic.Bool // a-0's handler
	var beside atomic.Int32
	h := harnessOf(t, spec, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		if running.Load() {
			beside.Add(1)
		}
		if msg.OrderID == "a-0" {
			running.Store(true)
			time.Sleep(5 * spec.HandlerTimeout) // past its timeout, within the budget
			running.Store(false)
		}
		return nil
	})
	wantPath(t, h.Deliver(order(t, "a-0")), runtime.PathDeadLettered)
	wantPath(t, h.Deliver(order(t, "a-1")), runtime.PathAcked)
	if n := beside.Load(); n != 0 {
		t.Errorf("a-1's handler ran while a-0's still ran")
	}
}

// A cleanup given up on at its step runs on, and holds its key's lane
// until it returns within the delivery's budget, as the runtime's does
// (TestBrokerOrderedAbandonedCleanupHoldsTheLane): a-1 starts only after
// a-0's cleanup returned, though a-0's journey had ended (dead-lettered:
// its cleanup failed, and it has one attempt). Another key's delivery,
// b-0, runs beside the cleanup.
func TestOrderedAbandonedCleanupHoldsTheLane(t *testing.T) {
	t.Parallel()
	spec := fixture.LilytestQueueSpec()
	spec.OrderKey = byOrder
	spec.MaxAttempts, spec.SettlementBudget = 1, time.Minute
	var cleaning atomic.Bool
	bHandled := make(chan struct{})
	var calls, beside []string // beside: the calls while a-0's cleanup ran
	h := harnessOf(t, spec, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		// Deliver calls one handler at a time: no lock is needed.
		calls = append(calls, msg.OrderID)
		if cleaning.Load() {
			beside = append(beside, msg.OrderID)
		}
		if msg.OrderID == "b-0" {
			close(bHandled)
		}
		return nil
	}, func(cfg *runtime.Config) {
		cfg.StepTimeout = 200 * time.Millisecond
		cfg.Scope = func(ctx context.Context, d runtime.RawDelivery) (context.Context, func(context.Context) error, error) {
			return ctx, func(context.Context) error {
				if d.MessageID() == "a-0" {
					cleaning.Store(true)
					select {
					case <-bHandled:
					case <-time.After(30 * time.Second):
					}
					time.Sleep(time.Second) // past its step, within the budget
					cleaning.Store(false)
				}
				return nil
			}, nil
		}
	})
	wantPath(t, h.Deliver(order(t, "a-0")), runtime.PathDeadLettered)
	wantPath(t, h.Deliver(order(t, "b-0")), runtime.PathAcked)
	wantPath(t, h.Deliver(order(t, "a-1")), runtime.PathAcked)
	if len(calls) != 3 || len(beside) != 1 || beside[0] != "b-0" {
		t.Errorf("calls while a-0's cleanup ran %q, want only b-0's (all calls %q)", beside, calls)
	}
}

// The lane is held for one budget at most: a Deliver of a-1 by a-0's own
// handler, past its timeout, waits for the turn that handler holds until
// a-0's budget ends, then runs beside it, as on the broker
// (TestBrokerOrderedCleanupPastTheBudgetLeavesTheLane), rather than wait
// for good.
func TestOrderedLaneIsHeldForOneBudgetAtMost(t *testing.T) {
	services.Slow(t, "a settlement budget, eight seconds")
	t.Parallel()
	spec := fixture.LilytestQueueSpec()
	spec.OrderKey = byOrder
	// The least NewConsumer takes: the handler timeout, five steps and the
	// handoff's reserve.
	spec.MaxAttempts, spec.HandlerTimeout, spec.SettlementBudget = 1, time.Second, 8*time.Second
	var h *lilytest.Harness
	returned := make(chan struct{}) // a-0's Deliver
	inner := make(chan lilytest.Result, 1)
	h = harnessOf(t, spec, func(ctx context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		if msg.OrderID == "a-0" {
			<-ctx.Done()
			<-returned
			inner <- h.Deliver(order(t, "a-1"))
		}
		return nil
	}, func(cfg *runtime.Config) { cfg.StepTimeout = time.Second })
	wantPath(t, h.Deliver(order(t, "a-0")), runtime.PathDeadLettered)
	close(returned)
	select {
	case res := <-inner:
		wantPath(t, res, runtime.PathAcked)
	case <-time.After(time.Minute):
		t.Fatal("a-1's Deliver, made by a-0's handler, still waits a minute on")
	}
}
