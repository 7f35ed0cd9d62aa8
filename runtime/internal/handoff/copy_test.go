package handoff

import (
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/frame"
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
// headers the broker adds as the bucket's TTL sends it back, passes the guard
// as the original did, whether its trace context is a telemetry hook's or
// the producer's (kept on the copy, with a re-drive's marks), and at their
// bounds too. Its type is of the longest, as the copy's failure facts
// repeat it.
func TestRetryCopyOfAMessageAtTheBoundsPassesTheGuard(t *testing.T) {
	lim := guard.DefaultLimits
	traceparent := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	tracestate := "lily=" + strings.Repeat("s", 507) // the 512 bytes W3C has propagated whole
	for _, tc := range []struct {
		name string
		own  amqp.Table // the producer's, beside its version, counted as its own
		kept amqp.Table // the producer's, in the room the guard keeps for what a message gains
		hook amqp.Table // what a telemetry hook writes on the copy
	}{
		{name: "a hook's trace context", hook: amqp.Table{"traceparent": traceparent, "tracestate": tracestate}},
		{name: "the producer's trace context, re-driven", kept: amqp.Table{
			"traceparent": traceparent, "tracestate": tracestate,
			envelope.HeaderRedriven: int64(1), envelope.HeaderRedrivenFrom: strings.Repeat("d", 255),
		}},
		{name: "the producer's trace context at the value bound", own: amqp.Table{
			"traceparent": strings.Repeat("t", lim.MaxValueBytes), "tracestate": strings.Repeat("s", 4000),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := amqp.Table{guard.HeaderVersion: int64(1)}
			n, size := 1, len(guard.HeaderVersion)+8
			for k, v := range tc.own {
				h[k] = v
				n, size = n+1, size+len(k)+len(v.(string))
			}
			maps.Copy(h, tc.kept)
			// The producer's other headers take its count and its bytes to
			// their bounds.
			for i := 0; n < lim.MaxHeaders-4; i++ {
				k := "h" + strconv.Itoa(i)
				h[k] = int64(i)
				n, size = n+1, size+len(k)+8
			}
			for i := 0; n < lim.MaxHeaders; i++ {
				k := "v" + strconv.Itoa(i)
				v := strings.Repeat("v", (lim.MaxHeaderBytes-size)/(lim.MaxHeaders-n)-len(k))
				h[k] = v
				n, size = n+1, size+len(k)+len(v)
			}
			now := time.Now()
			d := &amqp.Delivery{
				MessageId: "m-1", Type: strings.Repeat("t", envelope.MaxTypeBytes), ContentType: "application/json", Timestamp: now.Add(-time.Minute),
				Headers: h, Body: []byte("{}"),
			}
			env, verdict, reason := guard.Lily.Check(d, 1<<20, lim, now)
			if verdict != guard.Passed {
				t.Fatalf("the original: %q", reason)
			}
			o := outcome.Outcome{Handler: outcome.HandlerResult{Ran: true, Kind: outcome.KindRetryable, Cause: strings.Repeat("x", 500)}}
			bucket := strings.Repeat("b", 255)
			plan := decide.Plan{Action: decide.ActHandoff, Destination: bucket, NextAttempt: 2}
			p := Copy(d, env, nil, o, plan, strings.Repeat("q", 255), now)
			maps.Copy(p.Headers, tc.hook)
			p.Headers[guard.HeaderHandoffID] = strings.Repeat("i", frame.MaxPublishID)
			p.Headers["x-death"] = []any{amqp.Table{
				"count": int64(1), "exchange": "", "original-expiration": "5000", "queue": bucket,
				"reason": "expired", "routing-keys": []any{bucket}, "time": now.Truncate(time.Second),
			}}
			for _, k := range []string{"queue", "reason", "exchange"} {
				p.Headers["x-first-death-"+k] = bucket
				p.Headers["x-last-death-"+k] = bucket
			}
			back := &amqp.Delivery{
				MessageId: p.MessageId, Type: p.Type, ContentType: p.ContentType, Timestamp: p.Timestamp,
				Headers: p.Headers, Body: p.Body, Redelivered: false,
			}
			env, verdict, reason = guard.Lily.Check(back, 1<<20, lim, now)
			if verdict != guard.Passed || env.Attempt != 2 {
				t.Fatalf("the retry copy, back in its queue: verdict %d, %q", verdict, reason)
			}
		})
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

// A copy says which type and version the guard read where its failure was
// decided, by the message's own envelope profile: a header-mapped
// producer's copy has no AMQP type or x-lily-version that lilydlq could
// list or choose it by. Facts the original carried (a producer's, an
// earlier copy's) are replaced; a poison copy, whose envelope was not
// read, carries none.
func TestCopyCarriesTheTypeAndVersionTheGuardRead(t *testing.T) {
	r, err := guard.NewReader([]envelope.Message{{Type: "com.shop.OrderCreated", Profile: envelope.Profile{
		Kind: envelope.Headers, TypeHeader: "event_type", IDHeader: "event_id", Version: envelope.Version{Header: "schema_version"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	d := &amqp.Delivery{ContentType: "application/json", Body: []byte("{}"), Headers: amqp.Table{
		"event_type": "com.shop.OrderCreated", "event_id": "o-1", "schema_version": "3",
		guard.HeaderFailureType: "forged", guard.HeaderFailureVersion: int64(9),
	}}
	env, verdict, reason := r.Check(d, 1<<20, guard.DefaultLimits, now)
	if verdict != guard.Passed {
		t.Fatalf("the original: %q", reason)
	}
	o := outcome.Outcome{Handler: outcome.HandlerResult{Ran: true, Kind: outcome.KindPermanent, Cause: "no such sku"}}
	p := Copy(d, env, r.Identity, o, decide.Plan{Action: decide.ActHandoff, Destination: "orders.dlq", NextAttempt: 1}, "orders", now)
	if p.Type != "" || p.Headers[guard.HeaderFailureType] != "com.shop.OrderCreated" || p.Headers[guard.HeaderFailureVersion] != int64(3) {
		t.Errorf("the copy: type %q, %s %#v, %s %#v; want the type and version the guard read", p.Type,
			guard.HeaderFailureType, p.Headers[guard.HeaderFailureType], guard.HeaderFailureVersion, p.Headers[guard.HeaderFailureVersion])
	}
	d.Headers["event_id"] = "o 1" // poison: a space
	if _, verdict, _ := r.Check(d, 1<<20, guard.DefaultLimits, now); verdict != guard.Poison {
		t.Fatalf("the poison original: verdict %d", verdict)
	}
	o = outcome.Outcome{Rejection: outcome.RejectPoison, Reason: "event_id refused"}
	p = Copy(d, nil, r.Identity, o, decide.Plan{Action: decide.ActHandoff, Destination: "orders.dlq", NextAttempt: 1}, "orders", now)
	for _, k := range []string{guard.HeaderFailureType, guard.HeaderFailureVersion} {
		if v, ok := p.Headers[k]; ok {
			t.Errorf("the poison copy carries %s %#v", k, v)
		}
	}
}
