package lilytest_test

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
	"github.com/lily-mq/lily/runtime/internal/guard"
	"github.com/lily-mq/lily/runtime/lilytest"
	"github.com/lily-mq/lily/wire"
)

// The rows of the decision table, each through the fixture's generated
// routes, asserted as the runtime's broker tests (runtime/*_test.go) assert
// the same rows on RabbitMQ: the two must agree.

func wantPath(t *testing.T, res lilytest.Result, p runtime.Path) {
	t.Helper()
	if res.Path != p {
		t.Fatalf("record of %s: path %s (%s), want %s", res.MessageID, res.Path, res.Reason, p)
	}
}

// As TestBrokerSuccessIsAcked.
func TestSuccessIsAcked(t *testing.T) {
	var body, orderID string
	h := harness(t, func(_ context.Context, msg *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		body, orderID = string(d.Body()), msg.OrderID
		return nil
	})
	res := h.Deliver(order(t, "ok-1"))
	wantPath(t, res, runtime.PathAcked)
	if res.Handler != "ok" || res.Attempt != 1 || res.Settlement != "ack" || res.Copy != nil || res.Err != nil {
		t.Errorf("result %+v", res)
	}
	if body != `{"order_id":"ok-1"}` || orderID != "ok-1" {
		t.Errorf("handler saw body %s, order id %s", body, orderID)
	}
}

// As TestBrokerRetryableGoesToBucketWithNextAttempt; and the error the
// handler returned is the one the result holds.
func TestRetryableGoesToBucketWithNextAttempt(t *testing.T) {
	errBusy := errors.New("db busy")
	var tenant string
	h := harness(t, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		tenant = *msg.Headers.XTenant
		return runtime.Retryable(errBusy)
	})
	res := h.Deliver(produce(t, "retry-1", &fixture.OrderPlacedV1{OrderID: "retry-1", Headers: fixture.OrderPlacedV1Headers{XTenant: new("acme")}}))
	wantPath(t, res, runtime.PathRetried)
	if res.Destination != "lilytest.retry.300ms" || res.Handoff != "confirmed" || res.Settlement != "ack" || res.NextAttempt() != 2 {
		t.Errorf("result %+v, next attempt %d", res, res.NextAttempt())
	}
	if !errors.Is(res.Err, errBusy) {
		t.Errorf("Err = %v, want the handler's own", res.Err)
	}
	if qe, ok := errors.AsType[*runtime.QueueHandlerError](res.Err); !ok || qe.Permanent {
		t.Errorf("Err = %#v, want a retryable QueueHandlerError", res.Err)
	}
	if tenant != "acme" {
		t.Errorf("handler saw tenant %q", tenant)
	}
	c := res.Copy
	if c.MessageId != "retry-1" || string(c.Body) != `{"order_id":"retry-1"}` || c.Type != "OrderPlaced" {
		t.Errorf("copy = %+v", c)
	}
	if c.Headers[guard.HeaderAttempt] != int64(2) || c.Headers["x-tenant"] != "acme" || c.Headers[guard.HeaderVersion] != int64(1) {
		t.Errorf("copy headers = %v", c.Headers)
	}
	if c.Headers[guard.HeaderFailureKind] != "retryable" || c.Headers[guard.HeaderFailureAttempt] != int64(1) || c.Headers[guard.HeaderFailureQueue] != "lilytest" {
		t.Errorf("failure headers = %v", c.Headers)
	}
	if r, _ := c.Headers[guard.HeaderFailureReason].(string); !strings.Contains(r, "db busy") {
		t.Errorf("failure reason %q", r)
	}
}

// A handler that returns a nil *runtime.QueueHandlerError, Go's typed nil,
// returned an error that is not nil, and proved no success: it is retried
// as an unclassified failure is, the reason says what it returned, and
// once its attempts are spent it goes to the DLQ. Nothing panics, and
// Result.Err is what it returned.
func TestTypedNilHandlerErrorIsRetried(t *testing.T) {
	h := harness(t, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		var herr *runtime.QueueHandlerError
		return herr
	})
	const reason = "nil *runtime.QueueHandlerError"
	res := h.Deliver(order(t, "typednil-1"))
	for attempt := 1; ; attempt++ {
		if res.Handler != "retryable" || !strings.Contains(res.Reason, reason) || res.Settlement != "ack" {
			t.Errorf("attempt %d: result %+v", attempt, res)
		}
		if qe, ok := errors.AsType[*runtime.QueueHandlerError](res.Err); !ok || qe != nil || res.Err.Error() != "retryable: "+reason {
			t.Errorf("attempt %d: Err = %#v", attempt, res.Err)
		}
		if r, _ := res.Copy.Headers[guard.HeaderFailureReason].(string); !strings.Contains(r, reason) {
			t.Errorf("attempt %d: failure reason %q", attempt, r)
		}
		if attempt == 3 {
			wantPath(t, res, runtime.PathDeadLettered)
			break
		}
		wantPath(t, res, runtime.PathRetried)
		res = h.Deliver(*res.Copy)
	}
}

// As TestBrokerRetryThenSuccess: the copy, delivered as the bucket hands
// it back, runs as the next attempt.
func TestRetryThenSuccess(t *testing.T) {
	h := harness(t, func(_ context.Context, _ *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		if d.Attempt() == 1 {
			return errors.New("plain errors are retryable")
		}
		return nil
	})
	first := h.Deliver(order(t, "flaky-1"))
	wantPath(t, first, runtime.PathRetried)
	second := h.Deliver(*first.Copy)
	wantPath(t, second, runtime.PathAcked)
	if first.Attempt != 1 || second.Attempt != 2 || second.MessageID != "flaky-1" {
		t.Errorf("results %+v, %+v", first, second)
	}
}

// A retry copy comes back from its bucket with the headers RabbitMQ's
// dead-lettering adds there (3.10.8; TestBrokerBucketHandsBackWhatCopySays
// compares them with a bucket's): a fresh x-death at every attempt, as the
// runtime leaves the earlier one behind, and the x-first-death-* headers.
// A DLQ copy, which no bucket hands back, has none.
func TestRetryCopyComesBackDeadLettered(t *testing.T) {
	const bucket = "lilytest.retry.300ms"
	seen := map[int]map[string]any{}
	h := harness(t, func(_ context.Context, _ *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		got := map[string]any{}
		for _, k := range []string{"x-death", "x-first-death-reason", "x-first-death-queue", "x-first-death-exchange", "x-last-death-queue"} {
			if v, ok := d.Header(k); ok {
				got[k] = v
			}
		}
		seen[d.Attempt()] = got
		return errors.New("busy")
	})
	res := h.Deliver(order(t, "bucket-1"))
	for attempt := 2; attempt <= 3; attempt++ {
		wantPath(t, res, runtime.PathRetried)
		before := time.Now()
		res = h.Deliver(*res.Copy)
		xd, _ := seen[attempt]["x-death"].([]any)
		if len(xd) != 1 {
			t.Fatalf("attempt %d: headers %v, want one x-death", attempt, seen[attempt])
		}
		entry, _ := xd[0].(amqp.Table)
		at, _ := entry["time"].(time.Time)
		if at.Before(before.Add(300*time.Millisecond-time.Second)) || at.After(time.Now().Add(300*time.Millisecond)) {
			t.Errorf("attempt %d: x-death time %v, want the copy's publish and its delay", attempt, at)
		}
		delete(entry, "time")
		want := amqp.Table{"count": int64(1), "reason": "expired", "queue": bucket, "exchange": "", "routing-keys": []any{bucket}}
		if !reflect.DeepEqual(entry, want) {
			t.Errorf("attempt %d: x-death %#v, want %#v", attempt, entry, want)
		}
		if seen[attempt]["x-first-death-reason"] != "expired" || seen[attempt]["x-first-death-queue"] != bucket ||
			seen[attempt]["x-first-death-exchange"] != "" || seen[attempt]["x-last-death-queue"] != nil {
			t.Errorf("attempt %d: headers %v", attempt, seen[attempt])
		}
	}
	wantPath(t, res, runtime.PathDeadLettered)
	if _, ok := res.Copy.Headers["x-death"]; ok || len(seen[1]) != 0 {
		t.Errorf("DLQ copy headers %v; first attempt's %v", res.Copy.Headers, seen[1])
	}
}

// A retry copy comes back dead-lettered only when its bucket may hold it:
// confirmed, or written with no confirm in time. One the broker returned or
// nacked (a bucket's reject-publish overflow drops what it refuses, and a
// copy carries no CC to reach another queue), or that was never written, is
// in no bucket, and carries none of what dead-lettering adds.
func TestOnlyAStoredRetryCopyComesBackDeadLettered(t *testing.T) {
	for answer, stored := range map[string]bool{"confirmed": true, "timed out": true, "returned": false, "nacked": false, "failed": false} {
		t.Run(answer, func(t *testing.T) {
			t.Parallel()
			h := harness(t, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
				return errors.New("busy")
			})
			h.AnswerHandoffs(answer)
			res := h.Deliver(order(t, "stored-1"))
			if res.Copy == nil || res.Destination != "lilytest.retry.300ms" {
				t.Fatalf("result %+v", res)
			}
			for _, k := range []string{"x-death", "x-first-death-reason", "x-first-death-queue", "x-first-death-exchange"} {
				if _, ok := res.Copy.Headers[k]; ok != stored {
					t.Errorf("copy carries %s: %v, want %v", k, ok, stored)
				}
			}
		})
	}
}

// As TestBrokerPermanentAndExhaustedGoToDLQ.
func TestPermanentAndExhaustedGoToDLQ(t *testing.T) {
	spec := fixture.LilytestQueueSpec()
	spec.MaxAttempts = 2
	h := harnessOf(t, spec, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		if msg.OrderID == "perm-1" {
			return runtime.Permanent(errors.New("order refused"))
		}
		return runtime.Retryable(errors.New("still busy"))
	})
	perm := h.Deliver(order(t, "perm-1"))
	wantPath(t, perm, runtime.PathDeadLettered)
	if perm.Destination != "lilytest.dlq" || perm.Reason != "permanent failure: order refused" || perm.Settlement != "ack" {
		t.Errorf("perm-1: %+v", perm)
	}
	if perm.Copy.Headers[guard.HeaderFailureKind] != "permanent" || perm.NextAttempt() != 1 {
		t.Errorf("perm-1 copy headers %v", perm.Copy.Headers)
	}
	if qe, ok := errors.AsType[*runtime.QueueHandlerError](perm.Err); !ok || !qe.Permanent {
		t.Errorf("perm-1 Err = %v", perm.Err)
	}

	tired := h.Deliver(order(t, "tired-1"))
	wantPath(t, tired, runtime.PathRetried)
	tired = h.Deliver(*tired.Copy)
	wantPath(t, tired, runtime.PathDeadLettered)
	if !strings.HasPrefix(tired.Reason, "retries exhausted after attempt 2 of 2") {
		t.Errorf("tired-1 reason %q", tired.Reason)
	}
	if tired.Copy.Headers[guard.HeaderFailureAttempt] != int64(2) || tired.NextAttempt() != 2 {
		t.Errorf("tired-1 copy headers %v", tired.Copy.Headers)
	}
}

// The Attempt option stands for the copy of an earlier attempt: the last
// attempt's retryable failure goes to the DLQ.
func TestLastAttemptGoesToDLQ(t *testing.T) {
	h := harness(t, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		return errors.New("still busy")
	})
	res := h.Deliver(order(t, "last-1"), lilytest.Attempt(3))
	wantPath(t, res, runtime.PathDeadLettered)
	if res.Attempt != 3 || !strings.HasPrefix(res.Reason, "retries exhausted after attempt 3 of 3: still busy") {
		t.Errorf("result %+v", res)
	}
}

// A body the extractor refuses fails permanently, the extractor's error
// in Err, and the handler is not called.
func TestExtractorFailureGoesToDLQ(t *testing.T) {
	var calls int
	h := harness(t, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { calls++; return nil })
	p := order(t, "empty-1")
	p.Body = []byte(`{"order_id":""}`)
	res := h.Deliver(p)
	wantPath(t, res, runtime.PathDeadLettered)
	fe, ok := errors.AsType[*wire.FieldError](res.Err)
	if !ok || fe.Path != "order_id" || calls != 0 || res.Handler != "permanent" {
		t.Errorf("Err %v, handler calls %d, result %+v", res.Err, calls, res)
	}
}

// As TestBrokerUnsupportedVersionGoesToDLQWithoutHandler.
func TestUnsupportedVersionGoesToDLQWithoutHandler(t *testing.T) {
	var calls int
	h := harness(t, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { calls++; return nil })
	v9 := order(t, "v9-1")
	v9.Headers[guard.HeaderVersion] = int64(9)
	xml := order(t, "ct-1")
	xml.ContentType = "application/xml"
	for _, p := range []runtime.Publishing{v9, xml} {
		res := h.Deliver(p)
		wantPath(t, res, runtime.PathDeadLettered)
		if res.Rejection != "unsupported" || res.Handler != "" || res.Copy.Headers[guard.HeaderFailureKind] != "unsupported" {
			t.Errorf("result %+v", res)
		}
	}
	if calls != 0 {
		t.Errorf("handler called %d times", calls)
	}
}

// As TestBrokerPoisonIsRejectedBeforeUserCode, over the same catalogue.
// The copy carries the five failure facts, the poison copy's mark and none
// of the original headers (on the broker, the publisher adds its handoff
// id: seven).
func TestPoisonIsRejectedBeforeUserCode(t *testing.T) {
	var calls int
	h := harness(t, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { calls++; return nil })
	for name, p := range hostile(t) {
		res := h.Deliver(p)
		wantPath(t, res, runtime.PathDeadLettered)
		if res.Rejection != "poison" || res.Handler != "" || !printable(res.MessageID) || !printable(res.Reason) || len(res.Reason) > 200 {
			t.Errorf("%s: result %+v", name, res)
		}
		c := res.Copy
		if !printable(c.MessageId) || !printable(c.Type) || len(c.Headers) != 6 || c.Headers[guard.HeaderFailureKind] != "poison" || c.Headers[envelope.HeaderPoisonCopy] != true {
			t.Errorf("%s: copy id %q type %q headers %v", name, c.MessageId, c.Type, c.Headers)
		}
	}
	if calls != 0 {
		t.Errorf("handler called %d times", calls)
	}
}

// As TestBrokerOversizedBodyIsDeadLetteredByTheBroker: a NACK without
// requeue, and no copy.
func TestOversizedBodyIsDeadLetteredByTheBroker(t *testing.T) {
	var calls int
	h := harness(t, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { calls++; return nil })
	res := h.Deliver(produce(t, "big-1", &fixture.OrderPlacedV1{OrderID: "big-1", Padding: new(strings.Repeat("x", 4096))}))
	wantPath(t, res, runtime.PathBrokerDeadLettered)
	if res.Rejection != "oversized" || res.Handoff != "" || res.Handler != "" || res.Settlement != "nack" || res.Copy != nil || calls != 0 {
		t.Errorf("result %+v, handler calls %d", res, calls)
	}
}

// As TestBrokerPanicAndTimeoutAreRetryable; and a redelivery of the timed
// out handler's message, while that handler still runs, is deferred rather
// than run beside it.
func TestPanicAndTimeoutAreRetryable(t *testing.T) {
	t.Parallel()
	spec := fixture.LilytestQueueSpec()
	// Long enough for a panic to be caught and told on a loaded machine;
	// slow-1's handler, deaf to its context, still outlives it.
	spec.HandlerTimeout = 500 * time.Millisecond
	release := make(chan struct{})
	var slowCalls atomic.Int32
	h := harnessOf(t, spec, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		if msg.OrderID == "panic-1" {
			panic("nil map\x1b[0m")
		}
		slowCalls.Add(1)
		<-release // deaf to its context
		return nil
	})
	t.Cleanup(func() { close(release) }) // before the harness closes

	res := h.Deliver(order(t, "panic-1"))
	wantPath(t, res, runtime.PathRetried)
	if res.Handler != "panicked" || !strings.HasSuffix(res.Reason, `: panic: nil map\x1b[0m`) || res.Err != nil {
		t.Errorf("panic: %+v", res)
	}

	res = h.Deliver(order(t, "slow-1"))
	wantPath(t, res, runtime.PathRetried)
	if res.Handler != "timed out" || !strings.Contains(res.Reason, "retryable failure") || res.Err != nil {
		t.Errorf("timeout: %+v", res)
	}
	again := h.Deliver(order(t, "slow-1"), lilytest.Redelivered())
	wantPath(t, again, runtime.PathRequeued)
	if again.Handler != "" || again.Settlement != "requeue" || !strings.Contains(again.Reason, "being handled by another delivery") {
		t.Errorf("redelivery beside the running handler: %+v", again)
	}
	if n := slowCalls.Load(); n != 1 {
		t.Errorf("the slow handler ran %d times, want 1", n)
	}
}

// A handler that returns after its timeout, even before Deliver does,
// decided nothing: Err does not report what it returned.
func TestLateReturnIsNotTheResult(t *testing.T) {
	spec := fixture.LilytestQueueSpec()
	spec.HandlerTimeout = 50 * time.Millisecond
	release, cleaned := make(chan struct{}), make(chan struct{})
	h := harnessOf(t, spec, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		<-release // deaf to its context
		return runtime.Permanent(errors.New("late"))
	}, func(cfg *runtime.Config) {
		cfg.Scope = func(ctx context.Context, _ runtime.RawDelivery) (context.Context, func(context.Context) error, error) {
			// An abandoned handler's scope is cleaned up once it returns.
			return ctx, func(context.Context) error { close(cleaned); return nil }, nil
		}
		cfg.AfterDelivery = func(context.Context, runtime.RawDelivery, runtime.Record) error {
			close(release)
			<-cleaned
			return nil
		}
	})
	res := h.Deliver(order(t, "late-1"))
	wantPath(t, res, runtime.PathRetried)
	if res.Handler != "timed out" || res.Err != nil {
		t.Errorf("handler %q, Err %v", res.Handler, res.Err)
	}
}

// A handler abandoned at its timeout has its claim's transaction rolled
// back once it returns, not before: the record, written meanwhile, says
// the rollback is pending. Without an inbox there is none, and the
// record's Commit says nothing, as Record.Commit promises.
func TestTimedOutCommitIsTheInboxs(t *testing.T) {
	spec := fixture.LilytestQueueSpec()
	spec.HandlerTimeout = 50 * time.Millisecond
	for _, inbox := range []*lilytest.Inbox{nil, {}} {
		release := make(chan struct{})
		h := harnessOf(t, spec, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
			<-release // deaf to its context
			return nil
		}, func(cfg *runtime.Config) {
			if inbox != nil {
				cfg.Inbox = inbox
			}
		})
		res := h.Deliver(order(t, "slow-1"))
		want := ""
		if inbox != nil {
			want = "rollback pending"
			if _, err := inbox.Begin(t.Context(), spec.Name, "slow-1"); err == nil {
				t.Error("the abandoned handler's claim was let go of while the handler ran")
			}
		}
		close(release)
		if res.Handler != "timed out" || res.Commit != want {
			t.Errorf("inbox %v: handler %q, commit %q, want %q", inbox != nil, res.Handler, res.Commit, want)
		}
		if inbox == nil {
			continue
		}
		// Rolled back once the handler returned: the key can be claimed.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			tx, err := inbox.Begin(t.Context(), spec.Name, "slow-1")
			if err == nil {
				tx.Rollback(t.Context())
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the claim was not rolled back after the handler returned: %v", err)
			}
		}
	}
}

// As TestBrokerHandoffFailureRequeuesOncePaced and
// TestBrokerHandoffNackedByTheBrokerRequeues: each failed handoff is
// followed by one NACK with requeue, and spends no retry. Its reason keeps
// what the broker said of the handoff (the fake broker's detail) and the
// handler's cause.
func TestHandoffFailureRequeues(t *testing.T) {
	for answer, detail := range map[string]string{
		"returned":  "unroutable: returned by lilytest's broker",
		"nacked":    "the broker refused the publish",
		"timed out": "no confirm in time",
		"failed":    "publish: lilytest's broker failed the write",
	} {
		t.Run(answer, func(t *testing.T) {
			t.Parallel()
			h := harness(t, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
				return runtime.Permanent(errors.New("no"))
			})
			h.AnswerHandoffs(answer)
			res := h.Deliver(order(t, "stuck-1"))
			wantPath(t, res, runtime.PathRequeued)
			if res.Handoff != answer || res.Destination != "lilytest.dlq" || res.Settlement != "requeue" {
				t.Errorf("result %+v", res)
			}
			if want := "handoff to lilytest.dlq " + answer + " (" + detail + "): no"; res.Reason != want {
				t.Errorf("reason %q, want %q", res.Reason, want)
			}
			if res.Copy == nil || res.Copy.Headers[guard.HeaderFailureKind] != "permanent" {
				t.Errorf("copy %+v", res.Copy)
			}
			h.AnswerHandoffs("confirmed")
			res = h.Deliver(order(t, "stuck-1"), lilytest.Redelivered())
			wantPath(t, res, runtime.PathDeadLettered)
			if !res.Redelivered || res.Attempt != 1 {
				t.Errorf("redelivery %+v", res)
			}
		})
	}
}

// slowPublish is a Telemetry whose Publish, called after decide chose the
// handoff and before the copy is written, takes wait.
type slowPublish struct {
	noTelemetry
	wait time.Duration
}

func (s slowPublish) Publish(context.Context, string, string, *runtime.Publishing) func(string, time.Time) {
	time.Sleep(s.wait)
	return ignore
}

// As the runtime's publisher: a copy whose write deadline (half the handoff
// reserve before the budget ends) has passed by the time it is to be written,
// here behind a slow Telemetry, is not written; the handoff timed out, and
// the delivery is requeued in the budget left, not acked.
func TestHandoffPastItsWriteDeadlineIsNotWritten(t *testing.T) {
	t.Parallel()
	spec := fixture.LilytestQueueSpec()
	spec.HandlerTimeout = 500 * time.Millisecond
	const step = 100 * time.Millisecond
	// The least budget NewConsumer takes: the handler's timeout, four
	// steps and the 2 s handoff reserve. The write deadline is 1.9 s
	// after the delivery was received; the Telemetry holds the copy past it.
	spec.SettlementBudget = spec.HandlerTimeout + 4*step + 2*time.Second
	h := harnessOf(t, spec, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		return runtime.Permanent(errors.New("no"))
	}, func(cfg *runtime.Config) {
		cfg.StepTimeout = step
		cfg.Telemetry = slowPublish{wait: 2 * time.Second}
	})
	res := h.Deliver(order(t, "late-1"))
	wantPath(t, res, runtime.PathRequeued)
	if res.Handoff != "timed out" || res.Settlement != "requeue" || res.Copy != nil {
		t.Errorf("result %+v", res)
	}
}

// As TestBrokerScopeThatFailsToOpenSkipsTheHandler; a scope that returns no
// context fails so too, its cleanup run.
func TestScopeThatFailsToOpenSkipsTheHandler(t *testing.T) {
	var cleaned bool
	for why, scope := range map[string]func(context.Context, runtime.RawDelivery) (context.Context, func(context.Context) error, error){
		"pool exhausted": func(ctx context.Context, _ runtime.RawDelivery) (context.Context, func(context.Context) error, error) {
			return ctx, nil, errors.New("pool exhausted")
		},
		"returned no context": func(context.Context, runtime.RawDelivery) (context.Context, func(context.Context) error, error) {
			return nil, func(context.Context) error { cleaned = true; return nil }, nil
		},
	} {
		var calls int
		h := harness(t, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { calls++; return nil }, func(cfg *runtime.Config) {
			cfg.Scope = scope
		})
		res := h.Deliver(order(t, "unscoped-1"))
		wantPath(t, res, runtime.PathRetried)
		if calls != 0 || res.Handler != "" || !strings.HasSuffix(res.Reason, ": scope: "+why) {
			t.Errorf("%s: handler calls %d, result %+v", why, calls, res)
		}
	}
	if !cleaned {
		t.Error("the cleanup of a scope that returned no context did not run")
	}
}

type scopeKey struct{}

// As TestBrokerScopeCleanupFailureIsRetried: the scope's context reaches
// the handler, its cleanup runs after it, AfterDelivery sees the evidence so
// far, and a cleanup failure keeps the delivery from the ACK.
func TestScopeCleanupFailureIsRetried(t *testing.T) {
	var sawScope, cleaned, after bool
	var observed []runtime.Record
	h := harness(t, func(ctx context.Context, _ *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		sawScope = ctx.Value(scopeKey{}) == "open"
		return nil
	}, func(cfg *runtime.Config) {
		cfg.Scope = func(ctx context.Context, _ runtime.RawDelivery) (context.Context, func(context.Context) error, error) {
			return context.WithValue(ctx, scopeKey{}, "open"), func(context.Context) error {
				cleaned = true
				return errors.New("temp file not removed")
			}, nil
		}
		cfg.AfterDelivery = func(_ context.Context, _ runtime.RawDelivery, soFar runtime.Record) error {
			after = soFar.Reason == "cleanup: temp file not removed" && soFar.Handler == "ok"
			return nil
		}
		cfg.Observe = func(rec runtime.Record) { observed = append(observed, rec) }
	})
	res := h.Deliver(order(t, "scoped-1"))
	wantPath(t, res, runtime.PathRetried)
	if !sawScope || !cleaned || !after {
		t.Errorf("scope seen %v, cleanup ran %v, after_delivery saw the cleanup failure %v", sawScope, cleaned, after)
	}
	if res.Handler != "ok" || res.Reason != "cleanup failed on attempt 1 of 3: cleanup: temp file not removed" {
		t.Errorf("record: handler %q, reason %q", res.Handler, res.Reason)
	}
	if len(observed) != 1 || observed[0] != res.Record {
		t.Errorf("Config.Observe got %+v, want the result's record", observed)
	}
}

// An AfterDelivery that fails keeps the delivery from the ACK, as a
// cleanup failure does.
func TestAfterDeliveryFailureIsRetried(t *testing.T) {
	h := harness(t, ok, func(cfg *runtime.Config) {
		cfg.AfterDelivery = func(context.Context, runtime.RawDelivery, runtime.Record) error {
			return errors.New("audit log full")
		}
	})
	res := h.Deliver(order(t, "audited-1"))
	wantPath(t, res, runtime.PathRetried)
	if res.Handler != "ok" || res.Reason != "after_delivery failed on attempt 1 of 3: after_delivery: audit log full" {
		t.Errorf("result %+v", res)
	}
}

// An Observe that panics is logged; its delivery and the next settle.
func TestObservePanicIsLogged(t *testing.T) {
	var log strings.Builder
	h := harness(t, ok, func(cfg *runtime.Config) {
		cfg.Observe = func(rec runtime.Record) { panic("observer broke on " + rec.MessageID) }
		cfg.Logger = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelError}))
	})
	for _, id := range []string{"observed-1", "observed-2"} {
		wantPath(t, h.Deliver(order(t, id)), runtime.PathAcked)
	}
	if n := strings.Count(log.String(), `msg="lily Observe panicked"`); n != 2 || !strings.Contains(log.String(), "observer broke on observed-2") {
		t.Errorf("%d panics logged:\n%s", n, log.String())
	}
}

// A scope cleanup that outlives its step fails the delivery, and the reason
// names the step timeout, not the broker: the user's code was slow.
func TestSlowCleanupNamesTheStepTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	defer close(release)
	h := harness(t, ok, func(cfg *runtime.Config) {
		// Long enough for the handoff's ACK on a loaded machine; the
		// cleanup, which never returns by itself, still outlives it.
		cfg.StepTimeout = 500 * time.Millisecond
		cfg.Scope = func(ctx context.Context, _ runtime.RawDelivery) (context.Context, func(context.Context) error, error) {
			return ctx, func(context.Context) error { <-release; return nil }, nil
		}
	})
	res := h.Deliver(order(t, "slow-cleanup-1"))
	wantPath(t, res, runtime.PathRetried)
	if want := "cleanup failed on attempt 1 of 3: cleanup: did not return within Config.StepTimeout"; !strings.HasPrefix(res.Reason, want) {
		t.Errorf("reason %q, want it to begin %q", res.Reason, want)
	}
}
