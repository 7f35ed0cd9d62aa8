package handoff

import (
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/runtime/internal/decide"
	"github.com/lily-mq/lily/runtime/internal/guard"
	"github.com/lily-mq/lily/runtime/internal/outcome"
)

// A copy leaves the broker's records of the original's life behind, whoever
// wrote them: an x-death naming the source queue would make the broker drop
// a retry copy where the bucket sends it back, and one on a DLQ copy would
// dispute its failure facts' source queue. Either keeps the message's own
// headers.
func TestCopyLeavesTheBrokersRecordsBehind(t *testing.T) {
	records := amqp.Table{
		"x-death":                  []any{amqp.Table{"queue": "orders", "reason": "delivery_limit", "count": int64(1)}},
		"x-first-death-queue":      "orders",
		"x-first-death-reason":     "delivery_limit",
		"x-first-death-exchange":   "",
		"x-last-death-queue":       "orders",
		"x-delivery-count":         int64(3),
		"x-acquired-count":         int64(3),
		guard.HeaderFailureReason:  "an earlier failure",
		guard.HeaderHandoffID:      "an earlier copy",
		guard.HeaderVersion:        int64(1),
		"x-tenant":                 "acme",
		"x-death-is-not-a-prefix":  "kept",
		"x-last-deathly-but-other": "kept",
	}
	d := &amqp.Delivery{Headers: records, MessageId: "m-1", Body: []byte("{}")}
	env := &guard.Envelope{MessageID: "m-1", Attempt: 1, Headers: records}
	o := outcome.Outcome{Handler: outcome.HandlerResult{Ran: true, Kind: outcome.KindRetryable, Cause: "db busy"}}
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

	for _, tc := range []struct {
		name string
		plan decide.Plan
	}{
		{"retry", decide.Plan{Action: decide.ActHandoff, Destination: "orders.retry.5s", NextAttempt: 2}},
		{"dlq", decide.Plan{Action: decide.ActHandoff, Destination: "orders.dlq", NextAttempt: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := Copy(d, env, nil, o, tc.plan, "orders", now).Headers
			for _, k := range []string{"x-death", "x-first-death-queue", "x-first-death-reason", "x-first-death-exchange", "x-last-death-queue", "x-delivery-count", "x-acquired-count"} {
				if _, ok := h[k]; ok {
					t.Errorf("%s: the copy carries it", k)
				}
			}
			for _, k := range []string{guard.HeaderVersion, "x-tenant", "x-death-is-not-a-prefix", "x-last-deathly-but-other"} {
				if h[k] != records[k] {
					t.Errorf("%s = %v, want %v", k, h[k], records[k])
				}
			}
			if h[guard.HeaderHandoffID] != nil || h[guard.HeaderFailureReason] == "an earlier failure" || h[guard.HeaderAttempt] != int64(tc.plan.NextAttempt) {
				t.Errorf("Lily's own headers: %v", h)
			}
		})
	}
}

// A message at the producer's bounds when it first arrives stays within them
// at its next attempt: its retry copy, with Lily's failure facts, then the
// headers the broker adds as the bucket's TTL sends it back and a trace
// context, passes the guard as the original did.
func TestRetryCopyOfAMessageAtTheBoundsPassesTheGuard(t *testing.T) {
	lim := guard.DefaultLimits
	h := amqp.Table{guard.HeaderVersion: int64(1)}
	for i := range lim.MaxHeaders - 5 {
		h["h"+strconv.Itoa(i)] = int64(i)
	}
	for i := range 4 {
		h["v"+strconv.Itoa(i)] = strings.Repeat("v", 3900)
	}
	now := time.Now()
	d := &amqp.Delivery{
		MessageId: "m-1", Type: "orders.created", ContentType: "application/json", Timestamp: now.Add(-time.Minute),
		Headers: h, Body: []byte("{}"),
	}
	env, verdict, reason := guard.Lily.Check(d, 1<<20, lim, now)
	if verdict != guard.Passed {
		t.Fatalf("the original: %q", reason)
	}
	o := outcome.Outcome{Handler: outcome.HandlerResult{Ran: true, Kind: outcome.KindRetryable, Cause: strings.Repeat("x", 500)}}
	plan := decide.Plan{Action: decide.ActHandoff, Destination: "orders.retry.5s", NextAttempt: 2}
	p := Copy(d, env, nil, o, plan, strings.Repeat("q", 255), now)
	p.Headers[guard.HeaderHandoffID] = "0123456789abcdef0123456789abcdef"
	p.Headers["traceparent"] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	p.Headers["x-death"] = []any{amqp.Table{
		"count": int64(1), "exchange": "", "original-expiration": "5000", "queue": "orders.retry.5s",
		"reason": "expired", "routing-keys": []any{"orders.retry.5s"}, "time": now.Truncate(time.Second),
	}}
	for _, k := range []string{"queue", "reason", "exchange"} {
		p.Headers["x-first-death-"+k] = "orders.retry.5s"
		p.Headers["x-last-death-"+k] = "orders.retry.5s"
	}
	back := &amqp.Delivery{
		MessageId: p.MessageId, Type: p.Type, ContentType: p.ContentType, Timestamp: p.Timestamp,
		Headers: p.Headers, Body: p.Body, Redelivered: false,
	}
	env, verdict, reason = guard.Lily.Check(back, 1<<20, lim, now)
	if verdict != guard.Passed || env.Attempt != 2 {
		t.Fatalf("the retry copy, back in its queue: verdict %d, %q", verdict, reason)
	}
}

// A poison delivery's copy keeps its identity sanitized and cut: an id the
// guard refused (longer than 128 bytes, a control byte) may so read as a
// valid one, another message's. The copy is marked, and the guard refuses
// it wherever it goes.
func TestPoisonCopyIsRefusedByTheGuard(t *testing.T) {
	now := time.Now()
	for _, id := range []string{strings.Repeat("a", 140), "evt\x01"} {
		d := &amqp.Delivery{MessageId: id, Type: "orders.created", ContentType: "application/json", Headers: amqp.Table{}, Body: []byte("{}")}
		if _, verdict, _ := guard.Lily.Check(d, 1<<20, guard.DefaultLimits, now); verdict != guard.Poison {
			t.Fatalf("the original %q: verdict %d, want poison", id, verdict)
		}
		o := outcome.Outcome{Rejection: outcome.RejectPoison, Reason: "message_id refused"}
		p := Copy(d, nil, nil, o, decide.Plan{Action: decide.ActHandoff, Destination: "orders.dlq", NextAttempt: 1}, "orders", now)
		if p.Headers[envelope.HeaderPoisonCopy] != true {
			t.Errorf("the copy of %q is not marked: %v", id, p.Headers)
		}
		back := &amqp.Delivery{MessageId: p.MessageId, Type: p.Type, ContentType: p.ContentType, Headers: p.Headers, Body: p.Body}
		if _, verdict, reason := guard.Lily.Check(back, 1<<20, guard.DefaultLimits, now); verdict != guard.Poison || !strings.Contains(reason, "the DLQ copy of a poison message") {
			t.Errorf("the copy of %q (id %q), sent back: verdict %d, %q; want refused as a poison copy", id, p.MessageId, verdict, reason)
		}
	}
}
