package runtime_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
	"github.com/lily-mq/lily/runtime/internal/guard"
)

func wantPath(t *testing.T, rec runtime.Record, p runtime.Path) {
	t.Helper()
	if rec.Path != p {
		t.Fatalf("record of %s: path %s (%s), want %s", rec.MessageID, rec.Path, rec.Reason, p)
	}
}

func header(t *testing.T, d amqp.Delivery, key string) any {
	t.Helper()
	v, ok := d.Headers[key]
	if !ok {
		t.Fatalf("message %s has no header %s; headers %v", d.MessageId, key, d.Headers)
	}
	return v
}

func TestBrokerSuccessIsAcked(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	publish(t, q.Name, order(t, "ok-1"))
	var body, orderID atomic.Value
	c := start(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		body.Store(string(d.Body()))
		orderID.Store(msg.OrderID)
		return nil
	})
	rec := c.await(1)[0]
	wantPath(t, rec, runtime.PathAcked)
	if rec.Handler != "ok" || rec.Attempt != 1 {
		t.Errorf("record = %+v", rec)
	}
	if got := body.Load(); got != `{"order_id":"ok-1"}` {
		t.Errorf("handler saw body %v", got)
	}
	if got := orderID.Load(); got != "ok-1" {
		t.Errorf("handler saw order id %v", got)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}, bucket(q, q.Topology.RetryDelays[0]): {0, 0}})
	if rep := c.stop(); rep.Counts[runtime.PathAcked] != 1 || len(rep.Unresolved) != 0 {
		t.Errorf("report: %s", rep)
	}
}

func TestBrokerRetryableGoesToBucketWithNextAttempt(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, hourRetry) // stays in the bucket
	declareTopology(t, q)
	publish(t, q.Name, produce(t, "retry-1", &fixture.OrderPlacedV1{
		OrderID: "retry-1", Headers: fixture.OrderPlacedV1Headers{XTenant: new("acme")},
	}))
	var tenant atomic.Value
	c := start(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		tenant.Store(*msg.Headers.XTenant)
		return runtime.Retryable(errors.New("db busy"))
	})
	rec := c.await(1)[0]
	wantPath(t, rec, runtime.PathRetried)
	bucket := bucket(q, time.Hour)
	if rec.Destination != bucket || rec.Handoff != "confirmed" {
		t.Errorf("handoff = %+v", rec.Handoff)
	}
	if tenant.Load() != "acme" {
		t.Errorf("handler saw tenant %v", tenant.Load())
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket: {1, 0}, q.Topology.DeadLetterQueue: {0, 0}})
	c.stop()
	got := drain(t, bucket)
	if len(got) != 1 {
		t.Fatalf("bucket holds %d messages, want 1", len(got))
	}
	d := got[0]
	if d.MessageId != "retry-1" || string(d.Body) != `{"order_id":"retry-1"}` || d.Type != "OrderPlaced" {
		t.Errorf("copy = %+v", d)
	}
	if header(t, d, guard.HeaderAttempt) != int64(2) || header(t, d, "x-tenant") != "acme" || header(t, d, guard.HeaderVersion) != int64(1) {
		t.Errorf("copy headers = %v", d.Headers)
	}
	if header(t, d, guard.HeaderFailureKind) != "retryable" || header(t, d, guard.HeaderFailureAttempt) != int64(1) || header(t, d, guard.HeaderFailureQueue) != q.Name {
		t.Errorf("failure headers = %v", d.Headers)
	}
	if r := header(t, d, guard.HeaderFailureReason).(string); !strings.Contains(r, "db busy") {
		t.Errorf("failure reason %q", r)
	}
}

func TestBrokerRetryThenSuccess(t *testing.T) {
	t.Parallel()
	for _, qt := range []string{"classic", "quorum"} {
		t.Run(qt, func(t *testing.T) {
			t.Parallel()
			q := brokerSpec(t, func(q *runtime.QueueSpec) { q.Topology.Type = qt })
			declareTopology(t, q)
			publish(t, q.Name, order(t, "flaky-1"))
			c := start(t, q, func(_ context.Context, _ *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
				if d.Attempt() == 1 {
					return errors.New("plain errors are retryable")
				}
				return nil
			})
			recs := byAttempt(c.await(2))
			wantPath(t, recs[0], runtime.PathRetried)
			wantPath(t, recs[1], runtime.PathAcked)
			if recs[0].Attempt != 1 || recs[1].Attempt != 2 || recs[1].MessageID != "flaky-1" {
				t.Errorf("records = %+v", recs)
			}
			assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket(q, q.Topology.RetryDelays[0]): {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
		})
	}
}

// A handler that writes into RawDelivery.Body changes its own copy: the
// retry copy the bucket hands back carries the body as published, and its
// next attempt decodes and is acked. The handler's writes reached the
// delivery's own bytes, which the retry copy carries: its next attempt
// failed in the extractor and went to the DLQ as permanent.
func TestBrokerHandlerCannotChangeTheBodyHandedOff(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	p := order(t, "alias-1")
	publish(t, q.Name, p)
	c := start(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		if d.Attempt() > 1 {
			if msg.OrderID != "alias-1" || string(d.Body()) != string(p.Body) {
				return runtime.Permanent(errors.New("attempt 2 reads " + msg.OrderID + " from " + string(d.Body())))
			}
			return nil
		}
		copy(d.Body(), "XXXXXXXX")
		return runtime.Retryable(errors.New("busy"))
	})
	recs := byAttempt(c.await(2))
	wantPath(t, recs[0], runtime.PathRetried)
	wantPath(t, recs[1], runtime.PathAcked)
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket(q, q.Topology.RetryDelays[0]): {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// A message whose x-death says it left this queue before, for a reason
// other than rejected (a producer's, or the broker's own carried back by a
// shovel), is retried like any other. Its retry copy leaves x-death behind:
// RabbitMQ before 3.13 reads a published x-death in its cycle check and
// would drop, without a word, the copy the bucket's TTL sends back here.
func TestBrokerRetryCopyOfAMessageWithXDeathComesBack(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	m := order(t, "died-before")
	m.Headers["x-death"] = []any{amqp.Table{
		"queue": q.Name, "reason": "delivery_limit", "count": int64(1), "exchange": "", "routing-keys": []any{q.Name}, "time": time.Now(),
	}}
	publish(t, q.Name, m)
	c := start(t, q, func(_ context.Context, _ *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		if d.Attempt() == 1 {
			return runtime.Retryable(errors.New("once"))
		}
		return nil
	})
	recs := byAttempt(c.await(2))
	wantPath(t, recs[0], runtime.PathRetried)
	wantPath(t, recs[1], runtime.PathAcked)
	if recs[1].Attempt != 2 || recs[1].MessageID != "died-before" {
		t.Errorf("records = %+v", recs)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket(q, q.Topology.RetryDelays[0]): {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// A message that came to its queue by dead-lettering (here through a delay
// queue, its x-death naming that queue) and then failed for good: its DLQ
// copy names the queue in its failure facts and carries no x-death, so the
// only x-death a DLQ copy can carry is the broker's own, and the two never
// dispute where it came from.
func TestBrokerDLQCopyLeavesTheOriginalsXDeathBehind(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	m := order(t, "delayed-1")
	m.Headers["x-death"] = []any{amqp.Table{
		"queue": q.Name + ".delay", "reason": "expired", "count": int64(1), "exchange": "", "routing-keys": []any{q.Name + ".delay"}, "time": time.Now(),
	}}
	m.Headers["x-first-death-queue"] = q.Name + ".delay"
	publish(t, q.Name, m)
	c := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		return runtime.Permanent(errors.New("no such order"))
	})
	wantPath(t, c.await(1)[0], runtime.PathDeadLettered)
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {1, 0}})
	d := drain(t, q.Topology.DeadLetterQueue)[0]
	if _, ok := d.Headers["x-death"]; ok || d.Headers["x-first-death-queue"] != nil || header(t, d, guard.HeaderFailureQueue) != q.Name {
		t.Errorf("DLQ copy headers %v", d.Headers)
	}
}

// A producer's CC header (RabbitMQ's sender-selected distribution) routed
// the original to a second queue as well. The retry and DLQ copies leave it
// behind: published with it, each would reach that queue again, a duplicate
// for another service.
func TestBrokerHandoffCopiesDoNotCarryCC(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	other := q.Name + ".cc"
	ch := channel(t, dial(t))
	if _, err := ch.QueueDeclare(other, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(other, false, false, false) })
	m := order(t, "copied-to")
	m.Headers["CC"] = []any{other}
	publish(t, q.Name, m)
	c := start(t, q, func(_ context.Context, _ *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		if d.Attempt() == 1 {
			return runtime.Retryable(errors.New("once"))
		}
		return runtime.Permanent(errors.New("then refused"))
	})
	recs := byAttempt(c.await(2))
	wantPath(t, recs[0], runtime.PathRetried)
	wantPath(t, recs[1], runtime.PathDeadLettered)
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket(q, q.Topology.RetryDelays[0]): {0, 0}, q.Topology.DeadLetterQueue: {1, 0}, other: {1, 0}})
	c.stop()
	dead := drain(t, q.Topology.DeadLetterQueue)
	if _, ok := dead[0].Headers["CC"]; ok || dead[0].MessageId != "copied-to" {
		t.Errorf("the DLQ copy %q has headers %v, want no CC", dead[0].MessageId, dead[0].Headers)
	}
}

func TestBrokerPermanentAndExhaustedGoToDLQ(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, func(q *runtime.QueueSpec) { q.MaxAttempts = 2 })
	declareTopology(t, q)
	publish(t, q.Name, order(t, "perm-1"), order(t, "tired-1"))
	c := start(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		if msg.OrderID == "perm-1" {
			return runtime.Permanent(errors.New("order refused"))
		}
		return runtime.Retryable(errors.New("still busy"))
	})
	paths := map[string][]runtime.Path{}
	for _, r := range byAttempt(c.await(3)) { // perm-1 once; tired-1 twice
		paths[r.MessageID] = append(paths[r.MessageID], r.Path)
	}
	if len(paths["perm-1"]) != 1 || paths["perm-1"][0] != runtime.PathDeadLettered {
		t.Errorf("perm-1 paths %v", paths["perm-1"])
	}
	if p := paths["tired-1"]; len(p) != 2 || p[0] != runtime.PathRetried || p[1] != runtime.PathDeadLettered {
		t.Errorf("tired-1 paths %v", p)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {2, 0}, bucket(q, q.Topology.RetryDelays[0]): {0, 0}})
	c.stop()
	dead := map[string]amqp.Delivery{}
	for _, d := range drain(t, q.Topology.DeadLetterQueue) {
		dead[d.MessageId] = d
	}
	perm, tired := dead["perm-1"], dead["tired-1"]
	if header(t, perm, guard.HeaderFailureKind) != "permanent" || header(t, perm, guard.HeaderAttempt) != int64(1) {
		t.Errorf("perm-1 headers %v", perm.Headers)
	}
	if r := header(t, perm, guard.HeaderFailureReason).(string); r != "permanent failure: order refused" {
		t.Errorf("perm-1 reason %q", r)
	}
	if header(t, tired, guard.HeaderFailureAttempt) != int64(2) || header(t, tired, guard.HeaderAttempt) != int64(2) {
		t.Errorf("tired-1 headers %v", tired.Headers)
	}
	if r := header(t, tired, guard.HeaderFailureReason).(string); !strings.HasPrefix(r, "retries exhausted after attempt 2 of 2") {
		t.Errorf("tired-1 reason %q", r)
	}
}

func TestBrokerUnsupportedVersionGoesToDLQWithoutHandler(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	// What no producer of this schema sends: a version it never had, a content
	// type it does not accept.
	v9 := order(t, "v9-1")
	v9.Headers[guard.HeaderVersion] = int64(9)
	wrongType := order(t, "ct-1")
	wrongType.ContentType = "application/xml"
	publish(t, q.Name, v9, wrongType)
	var calls atomic.Int32
	var steps *userSteps
	c := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { calls.Add(1); return nil },
		func(cfg *runtime.Config) { steps = watch(cfg) })
	for _, rec := range c.await(2) {
		wantPath(t, rec, runtime.PathDeadLettered)
		if rec.Rejection != "unsupported" || rec.Handler != "" {
			t.Errorf("record %+v", rec)
		}
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {2, 0}})
	c.stop()
	if calls.Load() != 0 {
		t.Errorf("handler called %d times", calls.Load())
	}
	// Failed at dispatch, before any scope (rule 9).
	steps.expect(t, nil)
	for _, d := range drain(t, q.Topology.DeadLetterQueue) {
		if header(t, d, guard.HeaderFailureKind) != "unsupported" {
			t.Errorf("%s headers %v", d.MessageId, d.Headers)
		}
	}
}

// hostile is fixture.Hostile's catalogue of the test schema's order.
func hostile(t *testing.T) map[string]amqp.Publishing {
	return fixture.Hostile(func(id string) amqp.Publishing { return order(t, id) })
}

func TestBrokerPoisonIsRejectedBeforeUserCode(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	msgs := hostile(t)
	for _, m := range msgs {
		publish(t, q.Name, m)
	}
	var calls atomic.Int32
	var steps *userSteps
	c := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { calls.Add(1); return nil },
		func(cfg *runtime.Config) { steps = watch(cfg) })
	for _, rec := range c.await(len(msgs)) {
		wantPath(t, rec, runtime.PathDeadLettered)
		if rec.Rejection != "poison" || rec.Handler != "" || !printable(rec.MessageID) || !printable(rec.Reason) || len(rec.Reason) > 200 {
			t.Errorf("record %+v", rec)
		}
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {len(msgs), 0}})
	c.stop()
	if calls.Load() != 0 {
		t.Errorf("handler called %d times", calls.Load())
	}
	steps.expect(t, nil)
	for _, d := range drain(t, q.Topology.DeadLetterQueue) {
		if !printable(d.MessageId) || !printable(d.Type) {
			t.Errorf("forwarded unsanitized id %q type %q", d.MessageId, d.Type)
		}
		// The five failure facts, the handoff id and the poison copy's mark;
		// none of the original headers.
		if len(d.Headers) != 7 || header(t, d, guard.HeaderFailureKind) != "poison" || header(t, d, guard.HeaderHandoffID) == "" || header(t, d, envelope.HeaderPoisonCopy) != true {
			t.Errorf("forwarded headers of %s: %v", d.MessageId, d.Headers)
		}
		if !printable(header(t, d, guard.HeaderFailureReason).(string)) {
			t.Errorf("reason of %s not sanitized", d.MessageId)
		}
	}
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func TestBrokerOversizedBodyIsDeadLetteredByTheBroker(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	big := produce(t, "big-1", &fixture.OrderPlacedV1{OrderID: "big-1", Padding: new(strings.Repeat("x", 4096))})
	publish(t, q.Name, big)
	var calls atomic.Int32
	c := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { calls.Add(1); return nil })
	rec := c.await(1)[0]
	wantPath(t, rec, runtime.PathBrokerDeadLettered)
	if rec.Rejection != "oversized" || rec.Handoff != "" || rec.Handler != "" {
		t.Errorf("record %+v", rec)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {1, 0}})
	c.stop()
	d := drain(t, q.Topology.DeadLetterQueue)[0]
	deaths, _ := header(t, d, "x-death").([]any)
	if len(deaths) != 1 || deaths[0].(amqp.Table)["reason"] != "rejected" || deaths[0].(amqp.Table)["queue"] != q.Name {
		t.Errorf("x-death = %v", d.Headers["x-death"])
	}
	if _, ok := d.Headers[guard.HeaderFailureReason]; ok || len(d.Body) != len(big.Body) {
		t.Errorf("broker-native path should carry no Lily failure facts: %v", d.Headers)
	}
	if calls.Load() != 0 {
		t.Errorf("handler called %d times", calls.Load())
	}
}

func TestBrokerPanicAndTimeoutAreRetryable(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, func(q *runtime.QueueSpec) {
		q.Topology.RetryDelays = []time.Duration{time.Hour}
		// Long enough for a panic to be caught and told on a loaded machine.
		q.HandlerTimeout = time.Second
	})
	declareTopology(t, q)
	publish(t, q.Name, order(t, "panic-1"), order(t, "slow-1"))
	late := make(chan struct{})
	c := start(t, q, func(ctx context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		if msg.OrderID == "panic-1" {
			panic("nil map\x1b[0m")
		}
		<-ctx.Done()
		<-late // returns as the test ends: too late to decide
		return nil
	})
	t.Cleanup(func() { close(late) }) // before the consumer stops
	for _, rec := range c.await(2) {
		wantPath(t, rec, runtime.PathRetried)
		switch rec.MessageID {
		case "panic-1":
			if rec.Handler != "panicked" || !strings.HasSuffix(rec.Reason, `: panic: nil map\x1b[0m`) {
				t.Errorf("panic record %+v", rec)
			}
		case "slow-1":
			if rec.Handler != "timed out" || !strings.Contains(rec.Reason, "retryable failure") {
				t.Errorf("timeout record %+v", rec)
			}
		}
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket(q, time.Hour): {2, 0}})
}

// A handler returning a nil *runtime.QueueHandlerError (Go's typed nil) is
// retried, as an unclassified failure is: its copy is in the retry bucket,
// saying what the handler returned, and the consumer lives on.
func TestBrokerTypedNilHandlerErrorIsRetried(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, hourRetry) // stays in the bucket
	declareTopology(t, q)
	publish(t, q.Name, order(t, "typednil-1"))
	c := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		var herr *runtime.QueueHandlerError
		return herr
	})
	rec := c.await(1)[0]
	wantPath(t, rec, runtime.PathRetried)
	const reason = "nil *runtime.QueueHandlerError"
	if rec.Handler != "retryable" || !strings.Contains(rec.Reason, reason) {
		t.Errorf("record %+v", rec)
	}
	bucket := bucket(q, time.Hour)
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket: {1, 0}, q.Topology.DeadLetterQueue: {0, 0}})
	c.stop()
	d := drain(t, bucket)[0]
	if r := header(t, d, guard.HeaderFailureReason).(string); header(t, d, guard.HeaderFailureKind) != "retryable" || !strings.Contains(r, reason) {
		t.Errorf("failure headers = %v", d.Headers)
	}
}

// A handoff that fails is followed by exactly one requeueing NACK, paced so a
// persistent failure (here: the DLQ was deleted) cannot spin. Each record
// keeps why the handoff failed, as the broker's Return said it, and the
// handler's cause.
func TestBrokerHandoffFailureRequeuesOncePaced(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	c := startWithBrokenDLQ(t, q, nil)
	// Taken before the publish: the first delivery (and its pause) may start
	// before the publisher's confirm returns.
	begin := time.Now()
	publish(t, q.Name, order(t, "stuck-1"))
	recs := c.await(3)
	took := time.Since(begin)
	redelivered := 0
	dlq := q.Topology.DeadLetterQueue
	for i, rec := range recs[:3] {
		wantPath(t, rec, runtime.PathRequeued)
		if want := "handoff to " + dlq + " returned (unroutable: no queue named " + dlq + "): no"; rec.Handoff != "returned" || rec.Reason != want {
			t.Errorf("record %d: %+v, want the reason %q", i, rec, want)
		}
		if rec.Redelivered {
			redelivered++
		}
	}
	// Counted, not found by place: a delivery may be recorded after its
	// redelivery (byAttempt says why).
	if redelivered != 2 {
		t.Errorf("%d of three deliveries marked redelivered, want 2", redelivered)
	}
	// Pauses of 250 ms, then 500 ms, then 1 s: three deliveries take at least 1.75 s.
	if took < 1750*time.Millisecond {
		t.Errorf("three failed handoffs took %s: the requeue is not paced", took)
	}
	rep := c.stop()
	if rep.Counts[runtime.PathRequeued] < 3 {
		t.Errorf("report %s", rep)
	}
	// One NACK each: a second one on a tag would close the channel with
	// 406 PRECONDITION_FAILED, and the consumer would reconnect.
	noPreconditionFailed(t, rep)
	if n := c.reconnects(); n != 0 || len(rep.Lost) != 0 {
		t.Errorf("%d reconnects, sessions lost %q; want none", n, rep.Lost)
	}
	// The message must be back in the main queue.
	assertCounts(t, map[string][2]int{q.Name: {1, 0}})
}

func TestBrokerGracefulStopSettlesInFlightAndRequeuesTheRest(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, heldHandler, func(q *runtime.QueueSpec) { q.Concurrency, q.Prefetch = 1, 4 })
	declareTopology(t, q)
	for _, id := range []string{"a", "b", "c", "d"} {
		publish(t, q.Name, order(t, id))
	}
	started := make(chan struct{}, 4)
	release := make(chan struct{})
	c := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		started <- struct{}{}
		<-release
		return nil
	})
	<-started
	go func() {
		// "a" runs until intake has stopped: the others are not started.
		c.events.within(time.Minute, phase("stop intake: ended"))
		close(release)
	}()
	rep := c.stop()
	if rep.Counts[runtime.PathAcked] != 1 || rep.Counts[runtime.PathNotStarted] != 3 || len(rep.Unresolved) != 0 {
		t.Errorf("report: %s", rep)
	}
	if len(rep.Phases) == 0 || rep.Phases[0].Name != "stop intake" {
		t.Errorf("phases %+v", rep.Phases)
	}
	assertCounts(t, map[string][2]int{q.Name: {3, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// A DLQ that refuses publishes (full, overflow reject-publish) nacks the
// handoff: the original is requeued once, nothing is lost.
func TestBrokerHandoffNackedByTheBrokerRequeues(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	c := startWithBrokenDLQ(t, q, amqp.Table{"x-max-length": int64(0), "x-overflow": "reject-publish"})
	publish(t, q.Name, order(t, "refused-1"))
	rec := c.await(1)[0]
	wantPath(t, rec, runtime.PathRequeued)
	if rec.Handoff != "nacked" || rec.Destination != q.Topology.DeadLetterQueue {
		t.Errorf("record %+v", rec)
	}
	c.stop()
	assertCounts(t, map[string][2]int{q.Name: {1, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// A DLQ that dead-letters what it refuses (full, overflow
// reject-publish-dlx) nacks the handoff and keeps a copy all the same, in
// its own dead-letter queue: each nacked handoff is a possible copy in the
// report, one for each copy made.
func TestBrokerHandoffNackedWithADeadLetteredCopyIsAPossibleCopy(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	refused := q.Name + ".refused"
	ch := channel(t, dial(t))
	defer ch.Close()
	if _, err := ch.QueueDeclare(refused, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteQueues(t, runtime.QueueSpec{Name: refused}) })
	c := startWithBrokenDLQ(t, q, amqp.Table{"x-max-length": int64(0), "x-overflow": "reject-publish-dlx",
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": refused})
	publish(t, q.Name, order(t, "refused-1"))
	rec := c.await(1)[0]
	wantPath(t, rec, runtime.PathRequeued)
	if rec.Handoff != "nacked" || rec.Destination != q.Topology.DeadLetterQueue {
		t.Errorf("record %+v", rec)
	}
	rep := c.stop()
	nacked := rep.Counts[runtime.PathRequeued]
	if len(rep.PossibleCopies) != nacked {
		t.Errorf("%d nacked handoffs, possible copies %+v", nacked, rep.PossibleCopies)
	}
	for _, r := range rep.PossibleCopies {
		if r.MessageID != "refused-1" || r.Handoff != "nacked" {
			t.Errorf("possible copy %+v", r)
		}
	}
	assertCounts(t, map[string][2]int{q.Name: {1, 0}, q.Topology.DeadLetterQueue: {0, 0}, refused: {nacked, 0}})
}

// startWithBrokenDLQ starts a consumer whose handler fails permanently, then
// (once the consumer has declared its topology) deletes the DLQ, or replaces
// it with one declared with args.
func startWithBrokenDLQ(t *testing.T, q runtime.QueueSpec, args amqp.Table) *running {
	t.Helper()
	c := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		return runtime.Permanent(errors.New("no"))
	})
	awaitConsumer(t, q.Name)
	ch := channel(t, dial(t))
	defer ch.Close()
	if _, err := ch.QueueDelete(q.Topology.DeadLetterQueue, false, false, false); err != nil {
		t.Fatal(err)
	}
	if args != nil {
		if _, err := ch.QueueDeclare(q.Topology.DeadLetterQueue, true, false, false, false, args); err != nil {
			t.Fatal(err)
		}
	}
	return c
}
