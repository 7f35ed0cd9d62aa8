package lilytest_test

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/services"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
	"github.com/lily-mq/lily/runtime/internal/guard"
	"github.com/lily-mq/lily/runtime/lilytest"
)

// withInbox gives the consumer in as its inbox.
func withInbox(in *lilytest.Inbox) func(*runtime.Config) {
	return func(cfg *runtime.Config) { cfg.Inbox = in }
}

// As TestBrokerInboxDuplicatesAreCounted: work that committed is, the next
// time, a duplicate, ACKed without the handler; Redelivered decides nothing.
func TestInboxDuplicateIsAckedWithoutTheHandler(t *testing.T) {
	var calls int
	h := harness(t, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { calls++; return nil }, withInbox(&lilytest.Inbox{}))
	first := h.Deliver(order(t, "d-1"))
	wantPath(t, first, runtime.PathAcked)
	if first.Commit != "committed" || first.Handler != "ok" {
		t.Errorf("first: %+v", first)
	}
	for _, opts := range [][]lilytest.Option{nil, {lilytest.Redelivered()}} {
		again := h.Deliver(order(t, "d-1"), opts...)
		wantPath(t, again, runtime.PathAcked)
		if again.Commit != "duplicate" || again.Handler != "" || again.Settlement != "ack" {
			t.Errorf("again: %+v", again)
		}
	}
	if calls != 1 {
		t.Errorf("handler ran %d times, want 1", calls)
	}
}

// A claim the inbox cannot decide now defers the delivery: one requeue, no
// retry spent, and the handler does not run; the redelivery is handled.
func TestInboxDeferralRequeuesWithoutARetry(t *testing.T) {
	t.Parallel()
	var calls int
	in := &lilytest.Inbox{}
	h := harness(t, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { calls++; return nil }, withInbox(in))
	in.Defer("lease-1", "worker 2 holds the lease")
	res := h.Deliver(order(t, "lease-1"))
	wantPath(t, res, runtime.PathRequeued)
	if res.Commit != "deferred" || res.Handler != "" || res.Settlement != "requeue" || res.Copy != nil ||
		res.Reason != "deferred; no application retry used: inbox: lilytest: worker 2 holds the lease" {
		t.Errorf("deferred: %+v", res)
	}
	res = h.Deliver(order(t, "lease-1"), lilytest.Redelivered())
	wantPath(t, res, runtime.PathAcked)
	if res.Attempt != 1 || calls != 1 {
		t.Errorf("redelivery: %+v, handler calls %d", res, calls)
	}
}

// A commit whose answer was lost defers the delivery; the work committed,
// so its redelivery is a duplicate and the handler does not run again.
func TestInboxAmbiguousCommitDefersAndTheRedeliveryIsADuplicate(t *testing.T) {
	t.Parallel()
	var calls int
	in := &lilytest.Inbox{}
	h := harness(t, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { calls++; return nil }, withInbox(in))
	in.FailCommit("lost-1", fmt.Errorf("connection reset during COMMIT: %w", runtime.ErrCommitAmbiguous))
	res := h.Deliver(order(t, "lost-1"))
	wantPath(t, res, runtime.PathRequeued)
	if res.Commit != "ambiguous" || res.Handler != "ok" || !strings.Contains(res.Reason, "commit: connection reset during COMMIT") {
		t.Errorf("ambiguous: %+v", res)
	}
	res = h.Deliver(order(t, "lost-1"), lilytest.Redelivered())
	wantPath(t, res, runtime.PathAcked)
	if res.Commit != "duplicate" || calls != 1 {
		t.Errorf("redelivery: %+v, handler calls %d", res, calls)
	}
}

// docs/runtime.md's way to see a quorum queue's delivery limit: a
// redelivery the broker counted to the limit, which the inbox defers or
// whose commit goes unanswered, is sent to the DLQ rather than requeued;
// the count changes nothing for one that is handled.
func TestInboxDeferralAtTheDeliveryLimitGoesToTheDLQ(t *testing.T) {
	spec := fixture.LilytestQueueSpec()
	spec.Topology.Type = "quorum" // the default delivery limit, 20
	in := &lilytest.Inbox{}
	h := harnessOf(t, spec, ok, withInbox(in))
	atLimit := func(id string) runtime.Publishing {
		p := order(t, id)
		p.Headers["x-delivery-count"] = int64(20)
		return p
	}

	p := atLimit("limit-1")
	in.Defer(p.MessageId, "lease held")
	res := h.Deliver(p, lilytest.Redelivered())
	wantPath(t, res, runtime.PathDeadLettered)
	if res.Destination != spec.Topology.DeadLetterQueue || !strings.HasPrefix(res.Reason, "delivery limit 20 reached (x-delivery-count 20): deferred") {
		t.Errorf("deferred at the limit: %+v", res)
	}

	p = atLimit("limit-2")
	in.FailCommit(p.MessageId, fmt.Errorf("lost: %w", runtime.ErrCommitAmbiguous))
	res = h.Deliver(p, lilytest.Redelivered())
	wantPath(t, res, runtime.PathDeadLettered)
	if res.Commit != "ambiguous" {
		t.Errorf("ambiguous commit at the limit: %+v", res)
	}

	res = h.Deliver(atLimit("limit-3"), lilytest.Redelivered())
	wantPath(t, res, runtime.PathAcked)
}

// failingSteps are a scope cleanup or an after_delivery that fails, by an
// error or a panic, while *on; each case's reason is what the record says.
var failingSteps = []struct {
	name   string
	tweak  func(on *atomic.Bool) func(*runtime.Config)
	reason string
}{
	{"cleanup fails", func(on *atomic.Bool) func(*runtime.Config) {
		return withCleanup(on, func() error { return errors.New("temp file not removed") })
	}, "cleanup failed on attempt 1 of 3: cleanup: temp file not removed"},
	{"cleanup panics", func(on *atomic.Bool) func(*runtime.Config) {
		return withCleanup(on, func() error { panic("temp dir gone") })
	}, "cleanup failed on attempt 1 of 3: cleanup: panic: temp dir gone"},
	{"after_delivery fails", func(on *atomic.Bool) func(*runtime.Config) {
		return withAfterDelivery(on, func() error { return errors.New("audit log full") })
	}, "after_delivery failed on attempt 1 of 3: after_delivery: audit log full"},
	{"after_delivery panics", func(on *atomic.Bool) func(*runtime.Config) {
		return withAfterDelivery(on, func() error { panic("audit client nil") })
	}, "after_delivery failed on attempt 1 of 3: after_delivery: panic: audit client nil"},
}

func withCleanup(on *atomic.Bool, fail func() error) func(*runtime.Config) {
	return func(cfg *runtime.Config) {
		cfg.Scope = func(ctx context.Context, _ runtime.RawDelivery) (context.Context, func(context.Context) error, error) {
			return ctx, func(context.Context) error {
				if on.Load() {
					return fail()
				}
				return nil
			}, nil
		}
	}
}

func withAfterDelivery(on *atomic.Bool, fail func() error) func(*runtime.Config) {
	return func(cfg *runtime.Config) {
		cfg.AfterDelivery = func(context.Context, runtime.RawDelivery, runtime.Record) error {
			if on.Load() {
				return fail()
			}
			return nil
		}
	}
}

// A scope cleanup or after_delivery that fails or panics after a committed
// handler keeps the delivery from the ACK: it is retried, and the retry
// copy meets the committed claim, a duplicate, without the handler.
func TestFailedStepAfterTheCommitIsRetried(t *testing.T) {
	for _, step := range failingSteps {
		t.Run(step.name, func(t *testing.T) {
			var calls int
			var on atomic.Bool
			on.Store(true)
			h := harness(t, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { calls++; return nil },
				withInbox(&lilytest.Inbox{}), step.tweak(&on))
			res := h.Deliver(order(t, "step-1"))
			wantPath(t, res, runtime.PathRetried)
			if res.Handler != "ok" || res.Commit != "committed" || res.Reason != step.reason || res.NextAttempt() != 2 {
				t.Errorf("first: %+v", res)
			}
			on.Store(false)
			res = h.Deliver(*res.Copy)
			wantPath(t, res, runtime.PathAcked)
			if res.Commit != "duplicate" || res.Attempt != 2 || calls != 1 {
				t.Errorf("retry: %+v; handler ran %d times, want 1", res, calls)
			}
		})
	}
}

// A duplicate's scope cleanup and after_delivery run too, and their failure
// keeps it from the ACK as after a committed handler: the ACK is for a
// pipeline, cleanup and after_delivery that all succeeded. The retry copy
// meets the duplicate again, so the handler still runs once.
func TestFailedStepOfADuplicateIsRetried(t *testing.T) {
	for _, step := range failingSteps {
		t.Run(step.name, func(t *testing.T) {
			var calls int
			var on atomic.Bool
			h := harness(t, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { calls++; return nil },
				withInbox(&lilytest.Inbox{}), step.tweak(&on))
			first := h.Deliver(order(t, "dup-1"))
			wantPath(t, first, runtime.PathAcked)
			if first.Commit != "committed" {
				t.Fatalf("first: %+v", first)
			}
			on.Store(true)
			res := h.Deliver(order(t, "dup-1"), lilytest.Redelivered())
			wantPath(t, res, runtime.PathRetried)
			if res.Handler != "" || res.Commit != "duplicate" || res.Reason != step.reason || res.NextAttempt() != 2 || res.Settlement != "ack" {
				t.Errorf("duplicate: %+v", res)
			}
			on.Store(false)
			res = h.Deliver(*res.Copy)
			wantPath(t, res, runtime.PathAcked)
			if res.Commit != "duplicate" || calls != 1 {
				t.Errorf("retry: %+v; handler ran %d times, want 1", res, calls)
			}
		})
	}
}

// On an ordered queue a duplicate whose cleanup failed is retried in line,
// as its handler's retry would be, not through a bucket behind its key's
// later messages: the retry meets the duplicate again and is acked.
func TestFailedCleanupOfADuplicateIsRetriedInLine(t *testing.T) {
	spec := fixture.LilytestQueueSpec()
	spec.OrderKey = func(map[string]any, []byte) string { return "one" }
	spec.Topology.RetryDelays = []time.Duration{time.Millisecond}
	var calls, cleanups int
	var on atomic.Bool
	h := harnessOf(t, spec, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { calls++; return nil },
		withInbox(&lilytest.Inbox{}), withCleanup(&on, func() error {
			cleanups++
			on.Store(false) // once
			return errors.New("temp file not removed")
		}))
	wantPath(t, h.Deliver(order(t, "dup-in-line")), runtime.PathAcked)
	on.Store(true)
	res := h.Deliver(order(t, "dup-in-line"), lilytest.Redelivered())
	wantPath(t, res, runtime.PathAcked)
	if res.Commit != "duplicate" || res.Attempt != 2 || res.Copy != nil || calls != 1 || cleanups != 1 {
		t.Errorf("duplicate: %+v; handler ran %d times, the cleanup failed %d", res, calls, cleanups)
	}
}

// A commit that fails is a retryable failure: the work did not commit, so
// the retry runs the handler again and commits.
func TestInboxFailedCommitIsRetried(t *testing.T) {
	in := &lilytest.Inbox{}
	h := harness(t, ok, withInbox(in))
	in.FailCommit("conflict-1", errors.New("serialization failure"))
	res := h.Deliver(order(t, "conflict-1"))
	wantPath(t, res, runtime.PathRetried)
	if res.Commit != "failed" || res.Reason != "commit failed on attempt 1 of 3: commit: serialization failure" {
		t.Errorf("failed commit: %+v", res)
	}
	res = h.Deliver(*res.Copy)
	wantPath(t, res, runtime.PathAcked)
	if res.Commit != "committed" || res.Attempt != 2 {
		t.Errorf("retry: %+v", res)
	}
}

// FailCommit with a nil error is a commit that succeeds, and takes back an
// earlier FailCommit of the key: its work is remembered, and the
// redelivery is a duplicate the handler does not see.
func TestInboxFailCommitNilCommits(t *testing.T) {
	var calls int
	in := &lilytest.Inbox{}
	h := harness(t, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { calls++; return nil }, withInbox(in))
	in.FailCommit("nil-1", errors.New("serialization failure"))
	in.FailCommit("nil-1", nil)
	in.FailCommit("nil-2", nil)
	for _, id := range []string{"nil-1", "nil-2"} {
		calls = 0
		res := h.Deliver(order(t, id))
		wantPath(t, res, runtime.PathAcked)
		if res.Commit != "committed" {
			t.Errorf("%s: %+v", id, res)
		}
		res = h.Deliver(order(t, id), lilytest.Redelivered())
		wantPath(t, res, runtime.PathAcked)
		if res.Commit != "duplicate" || calls != 1 {
			t.Errorf("%s redelivered: %+v, handler calls %d", id, res, calls)
		}
	}
}

// A handler that fails rolls its claim back: the message is claimed afresh
// when it comes back.
func TestInboxRollbackFreesTheClaim(t *testing.T) {
	h := harness(t, func(_ context.Context, _ *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		if d.Attempt() == 1 {
			return errors.New("not yet")
		}
		return nil
	}, withInbox(&lilytest.Inbox{}))
	res := h.Deliver(order(t, "again-1"))
	if res.Commit != "rolled back" {
		t.Errorf("first: %+v", res)
	}
	res = h.Deliver(*res.Copy)
	wantPath(t, res, runtime.PathAcked)
	if res.Commit != "committed" {
		t.Errorf("retry: %+v", res)
	}
}

// What a handler keeps with AfterCommit takes effect with its claim's
// commit, and is dropped when the claim rolls back. Outside a claim there is
// nothing to keep it for; once the claim has ended (a context that outlived
// its handler), there is nothing to keep it in, as pgx's transaction is
// closed then: both fail, and f never runs.
func TestAfterCommitFollowsTheClaim(t *testing.T) {
	var rows []string
	var kept error
	var stale context.Context
	h := harness(t, func(ctx context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		kept = lilytest.AfterCommit(ctx, func() { rows = append(rows, msg.OrderID) })
		stale = ctx
		if msg.OrderID == "bad-1" {
			return runtime.Permanent(errors.New("refused"))
		}
		return nil
	}, withInbox(&lilytest.Inbox{}))
	h.Deliver(order(t, "good-1"))
	h.Deliver(order(t, "bad-1"))
	if kept != nil || len(rows) != 1 || rows[0] != "good-1" {
		t.Errorf("AfterCommit in a claim: %v, rows %v; want only good-1", kept, rows)
	}

	late := func() { rows = append(rows, "late") }
	if err := lilytest.AfterCommit(context.Background(), late); err == nil || !strings.Contains(err.Error(), "no Inbox claim") {
		t.Errorf("AfterCommit in a bare context: %v", err)
	}
	if err := lilytest.AfterCommit(stale, late); err == nil || !strings.Contains(err.Error(), "has ended") {
		t.Errorf("AfterCommit in an ended claim: %v", err)
	}
	out := &lilytest.Recorder{Outbox: true}
	if err := out.Send(stale, runtime.Message{RoutingKey: "late"}); err == nil || len(out.Sent()) != 0 {
		t.Errorf("Send into an ended claim: %v, sent %v", err, out.Sent())
	}
	h.Deliver(order(t, "good-2"))
	if len(rows) != 2 || rows[1] != "good-2" {
		t.Errorf("rows %v; want good-1 and good-2 only", rows)
	}
}

// foreignHarness is a harness of the queue of other producers' envelopes,
// with an Inbox, whose handlers count their calls in calls.
func foreignHarness(t *testing.T, calls *int) (*lilytest.Harness, *lilytest.Inbox) {
	in := &lilytest.Inbox{}
	h, err := lilytest.New(fixture.LilytestForeignQueueSpec(), fixture.LilytestForeignRoutes(foreign{calls: calls}), runtime.Config{Logger: quiet, Inbox: in})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h, in
}

// Defer and FailCommit take the key the runtime claims by, which
// Record.MessageID shows: for a CloudEvent its source and id, for a
// header-mapped profile "headers", the type and the id.
func TestInboxKeysOfOtherEnvelopes(t *testing.T) {
	t.Parallel()
	var calls int
	h, in := foreignHarness(t, &calls)
	payment, err := fixture.NewPaymentAuthorizedV1("pay-1", &fixture.PaymentAuthorizedV1{PaymentID: "p-1"})
	if err != nil {
		t.Fatal(err)
	}
	shipment, err := fixture.NewOrderShippedV1("ship-1", &fixture.OrderShippedV1{OrderID: "o-1"})
	if err != nil {
		t.Fatal(err)
	}
	const paymentKey = "https://payments.acme.example/api pay-1"
	const shipmentKey = "headers " + fixture.OrderShippedType + " ship-1"

	in.Defer(paymentKey, "worker 2 holds the lease")
	res := h.Deliver(payment)
	if res.MessageID != paymentKey || res.Commit != "deferred" || res.Path != runtime.PathRequeued {
		t.Errorf("payment: %+v", res)
	}
	if res := h.Deliver(payment, lilytest.Redelivered()); res.Commit != "committed" {
		t.Errorf("payment redelivered: %+v", res)
	}
	in.FailCommit(shipmentKey, errors.New("serialization failure"))
	res = h.Deliver(shipment)
	if res.MessageID != shipmentKey || res.Commit != "failed" || res.Path != runtime.PathRetried {
		t.Fatalf("shipment: %+v", res)
	}
	if res := h.Deliver(*res.Copy); res.Commit != "committed" {
		t.Errorf("shipment's retry: %+v", res)
	}
	if calls != 3 {
		t.Errorf("handlers ran %d times, want 3", calls)
	}
}

// A key longer than a message id (a CloudEvent's source and id, a
// header-mapped profile's type and id) is what Record.MessageID shows,
// whole: Defer and FailCommit take it from the record. Cut at 128 bytes, as
// it was, Defer(res.MessageID) missed, and the retry committed.
func TestInboxLongKeysAreWholeInTheRecord(t *testing.T) {
	t.Parallel()
	var calls int
	h, in := foreignHarness(t, &calls)
	id := strings.Repeat("a", 128) // the longest id
	payment, err := fixture.NewPaymentAuthorizedV1(id, &fixture.PaymentAuthorizedV1{PaymentID: "p-1"})
	if err != nil {
		t.Fatal(err)
	}
	shipment, err := fixture.NewOrderShippedV1(id, &fixture.OrderShippedV1{OrderID: "o-1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		p   runtime.Publishing
		key string
	}{
		{payment, "https://payments.acme.example/api " + id},
		{shipment, "headers " + fixture.OrderShippedType + " " + id},
	} {
		in.FailCommit(tc.key, errors.New("serialization failure"))
		res := h.Deliver(tc.p)
		if res.MessageID != tc.key || res.Commit != "failed" || res.Path != runtime.PathRetried {
			t.Fatalf("MessageID %q (%d bytes), commit %q, path %s; want the key claimed (%d bytes), failed, retried",
				res.MessageID, len(res.MessageID), res.Commit, res.Path, len(tc.key))
		}
		in.Defer(res.MessageID, "worker 2 holds the lease")
		if res = h.Deliver(*res.Copy); res.MessageID != tc.key || res.Commit != "deferred" || res.Path != runtime.PathRequeued {
			t.Errorf("the retry after Defer(Record.MessageID): MessageID %q, commit %q, path %s; want deferred, requeued", res.MessageID, res.Commit, res.Path)
		}
	}
}

// A CloudEvent without data (CloudEvents makes it optional) is poison at
// the guard, in either content mode: no scope opens, the inbox claims
// nothing, no handler runs, and the DLQ copy is Lily's poison copy with the
// reason. It was claimed and then failed to decode, "payload: invalid JSON
// at byte 0", as if the handler had refused it.
func TestCloudEventWithoutDataIsPoison(t *testing.T) {
	var calls, scopes int
	in := &lilytest.Inbox{}
	scope := func(ctx context.Context, _ runtime.RawDelivery) (context.Context, func(context.Context) error, error) {
		scopes++
		return ctx, func(context.Context) error { return nil }, nil
	}
	h, err := lilytest.New(fixture.LilytestForeignQueueSpec(), fixture.LilytestForeignRoutes(foreign{calls: &calls}),
		runtime.Config{Logger: quiet, Inbox: in, Scope: scope})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	event := `{"specversion":"1.0","id":"nd","source":"s","type":"com.acme.payment.authorized.v1"`
	binary, err := fixture.NewPaymentAuthorizedV1("nd", &fixture.PaymentAuthorizedV1{PaymentID: "p-1"})
	if err != nil {
		t.Fatal(err)
	}
	binary.Body = nil
	for _, tc := range []struct {
		name   string
		p      runtime.Publishing
		reason string
	}{
		{"no data member", runtime.Publishing{ContentType: "application/cloudevents+json", Body: []byte(event + `}`)}, "CloudEvent has no data: member data missing or null"},
		{"data null", runtime.Publishing{ContentType: "application/cloudevents+json", Body: []byte(event + `,"data":null}`)}, "CloudEvent has no data: member data missing or null"},
		{"binary, empty body", binary, "CloudEvent has no data: its body is empty"},
	} {
		res := h.Deliver(tc.p)
		wantPath(t, res, runtime.PathDeadLettered)
		if res.Rejection != "poison" || res.Handler != "" || res.Commit != "" || !strings.HasSuffix(res.Reason, tc.reason) {
			t.Errorf("%s: rejection %q, handler %q, commit %q, reason %q; want poison before any claim: %s",
				tc.name, res.Rejection, res.Handler, res.Commit, res.Reason, tc.reason)
			continue
		}
		c := res.Copy.Headers
		if reason, _ := c[guard.HeaderFailureReason].(string); c[guard.HeaderFailureKind] != "poison" || c[envelope.HeaderPoisonCopy] != true || !strings.HasSuffix(reason, tc.reason) {
			t.Errorf("%s: copy headers %v", tc.name, c)
		}
	}
	if calls != 0 || scopes != 0 {
		t.Errorf("handlers ran %d times, scopes opened %d times; want none", calls, scopes)
	}
}

// A binary CloudEvent with an attribute under both of the binding's
// prefixes, cloudEvents_id and cloudEvents:id, is poison when the two
// differ: the inbox could not say which event it claims. It was claimed
// under cloudEvents_id, and the other id went unseen. The same value under
// both is one event, handled.
func TestCloudEventWithTwoIDsIsPoison(t *testing.T) {
	t.Parallel()
	var calls int
	h, _ := foreignHarness(t, &calls)
	payment := func(oldID string) runtime.Publishing {
		p, err := fixture.NewPaymentAuthorizedV1("pay-1", &fixture.PaymentAuthorizedV1{PaymentID: "p-1"})
		if err != nil {
			t.Fatal(err)
		}
		p.Headers["cloudEvents:id"] = oldID
		return p
	}
	const reason = `CloudEvents attribute "id" differs between its cloudEvents_ and cloudEvents: headers`
	res := h.Deliver(payment("pay-2"))
	wantPath(t, res, runtime.PathDeadLettered)
	if res.Rejection != "poison" || res.Handler != "" || res.Commit != "" || !strings.HasSuffix(res.Reason, reason) {
		t.Errorf("rejection %q, handler %q, commit %q, reason %q; want poison before any claim", res.Rejection, res.Handler, res.Commit, res.Reason)
	}
	if _, err := lilytest.RawDelivery(fixture.LilytestForeignQueueSpec(), fixture.LilytestForeignRoutes(foreign{calls: &calls}), payment("pay-2")); !errors.Is(err, lilytest.ErrRejected) || !strings.HasSuffix(err.Error(), reason) {
		t.Errorf("RawDelivery: %v", err)
	}
	if calls != 0 {
		t.Errorf("handlers ran %d times; want none", calls)
	}
	res = h.Deliver(payment("pay-1"))
	if res.Path != runtime.PathAcked || res.Commit != "committed" || res.MessageID != "https://payments.acme.example/api pay-1" || calls != 1 {
		t.Errorf("the same id under both: %+v, %d calls", res, calls)
	}
}

// foreign handles the fixture's messages of other envelopes, counting calls.
type foreign struct {
	fixture.UnimplementedLilytestForeignHandler
	calls *int
}

func (f foreign) HandlePaymentAuthorizedV1(context.Context, *fixture.PaymentAuthorizedV1, runtime.RawDelivery) error {
	*f.calls++
	return nil
}

func (f foreign) HandleOrderShippedV1(context.Context, *fixture.OrderShippedV1, runtime.RawDelivery) error {
	*f.calls++
	return nil
}

// brokenBind is an adapter whose transaction's Bind panics, or returns no
// context: every other call of an adapter runs under a recover.
type brokenBind struct {
	panics     bool
	rolledBack int
}

func (b *brokenBind) Begin(context.Context, string, string) (runtime.InboxTx, error) { return b, nil }
func (b *brokenBind) Commit(context.Context) error                                   { return nil }
func (b *brokenBind) Rollback(context.Context)                                       { b.rolledBack++ }

func (b *brokenBind) Bind(context.Context) context.Context {
	if b.panics {
		panic("bind")
	}
	return nil
}

// A transaction whose Bind panics or returns no context defers its
// delivery, rolled back, without the handler: the process goes on.
func TestInboxBrokenBindDefers(t *testing.T) {
	t.Parallel()
	for _, panics := range []bool{true, false} {
		t.Run(fmt.Sprintf("panics %t", panics), func(t *testing.T) {
			var calls int
			in := &brokenBind{panics: panics}
			h := harness(t, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { calls++; return nil },
				func(cfg *runtime.Config) { cfg.Inbox = in })
			res := h.Deliver(order(t, "bind-1"))
			wantPath(t, res, runtime.PathRequeued)
			if calls != 0 || in.rolledBack != 1 || res.Commit != "deferred" || !strings.Contains(res.Reason, "inbox: Bind") {
				t.Errorf("result %+v; handler calls %d, rollbacks %d", res, calls, in.rolledBack)
			}
		})
	}
}

// oddCommit is an adapter whose transaction's Commit runs do, counting the
// calls of Commit and Rollback.
type oddCommit struct {
	do                 func()
	commits, rollbacks atomic.Int32
}

func (a *oddCommit) Begin(context.Context, string, string) (runtime.InboxTx, error) { return a, nil }
func (a *oddCommit) Bind(ctx context.Context) context.Context                       { return ctx }
func (a *oddCommit) Rollback(context.Context)                                       { a.rollbacks.Add(1) }

func (a *oddCommit) Commit(context.Context) error {
	a.commits.Add(1)
	a.do()
	return nil
}

// A Commit that panics or leaves by runtime.Goexit is ambiguous, and runs no
// more: its transaction, which holds a connection and the claim's lock, is
// rolled back once, or nothing would end it; so is one that breaks after its
// step gave up on it. One that outlives its step and returns may yet have
// committed: no Rollback races it.
func TestInboxCommitThatPanicsIsRolledBack(t *testing.T) {
	services.Slow(t, "two commit steps")
	for _, c := range []struct {
		name string
		do   func(release <-chan struct{})
		// late: the commit outlives its step, until released after the
		// delivery's result.
		late      bool
		rollbacks int32
	}{
		{"panics", func(<-chan struct{}) { panic("commit bookkeeping") }, false, 1},
		{"leaves by runtime.Goexit", func(<-chan struct{}) { goruntime.Goexit() }, false, 1},
		{"panics after its step", func(release <-chan struct{}) { <-release; panic("a nil result of a call cut short") }, true, 1},
		{"returns after its step", func(release <-chan struct{}) { <-release }, true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			release := make(chan struct{})
			in := &oddCommit{do: func() { c.do(release) }}
			h := harness(t, ok, func(cfg *runtime.Config) { cfg.Inbox, cfg.StepTimeout = in, time.Second })
			res := h.Deliver(order(t, "commit-1"))
			wantPath(t, res, runtime.PathRequeued)
			if res.Commit != "ambiguous" || in.commits.Load() != 1 {
				t.Errorf("result %+v; Commit calls %d, want 1", res, in.commits.Load())
			}
			if c.late {
				if n := in.rollbacks.Load(); n != 0 {
					t.Fatalf("%d Rollback calls while the commit still ran", n)
				}
				close(release)
				// The late commit's end is its own goroutine's: wait for the
				// rollback it is due, then for any it is not.
				deadline := time.Now().Add(time.Minute)
				for in.rollbacks.Load() < c.rollbacks && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				time.Sleep(100 * time.Millisecond)
			}
			if n := in.rollbacks.Load(); n != c.rollbacks {
				t.Errorf("Rollback calls %d, want %d", n, c.rollbacks)
			}
		})
	}
}
