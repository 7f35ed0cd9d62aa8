package main

import (
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
)

// TestFactsTheNewerFailure: a copy carrying both Lily's failure facts and
// x-death is shown by the newer of the two: the broker's dead-lettering after
// a stale Lily failure (a retry copy that then hit a quorum queue's delivery
// limit), Lily's handoff after the retry bucket's expiry, and Lily's on a tie
// or when its facts carry no time.
func TestFactsTheNewerFailure(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	lily := func(at time.Time) amqp.Table {
		h := amqp.Table{
			envelope.HeaderFailureReason:  "retryable failure on attempt 1 of 3: timeout",
			envelope.HeaderFailureKind:    "retryable",
			envelope.HeaderFailureAttempt: int64(1),
			envelope.HeaderFailureQueue:   "orders",
			envelope.HeaderAttempt:        int64(2),
		}
		if !at.IsZero() {
			h[envelope.HeaderFailureTime] = at
		}
		return h
	}
	withDeath := func(h amqp.Table, queue, reason string, at time.Time) amqp.Table {
		h[headerDeath] = []any{
			amqp.Table{"queue": queue, "reason": reason, "time": at, "count": int64(1)},
			amqp.Table{"queue": "older", "reason": "rejected", "time": at.Add(-time.Hour), "count": int64(1)},
		}
		return h
	}
	for _, c := range []struct {
		name                         string
		headers                      amqp.Table
		reason, kind, queue, attempt string
		at                           time.Time
	}{
		{"lily only", lily(t0), "retryable failure on attempt 1 of 3: timeout", "retryable", "orders", "1", t0},
		{"x-death only", withDeath(amqp.Table{}, "orders", "delivery_limit", t0), "delivery_limit", kindBroker, "orders", "", t0},
		{"a newer x-death hides stale Lily facts", withDeath(lily(t0), "orders", "delivery_limit", t0.Add(time.Minute)),
			"delivery_limit", kindBroker, "orders", "2", t0.Add(time.Minute)},
		{"newer Lily facts hide the retry bucket's x-death", withDeath(lily(t0.Add(time.Minute)), "orders.retry.1s", "expired", t0),
			"retryable failure on attempt 1 of 3: timeout", "retryable", "orders", "1", t0.Add(time.Minute)},
		{"a bucket's expiry on a broker clock ahead stays behind Lily's facts", withDeath(lily(t0), "orders.retry.1s", "expired", t0.Add(5*time.Second)),
			"retryable failure on attempt 1 of 3: timeout", "retryable", "orders", "1", t0},
		{"a tie goes to Lily", withDeath(lily(t0), "orders.retry.1s", "expired", t0),
			"retryable failure on attempt 1 of 3: timeout", "retryable", "orders", "1", t0},
		{"Lily facts without a time win", withDeath(lily(time.Time{}), "orders", "delivery_limit", t0),
			"retryable failure on attempt 1 of 3: timeout", "retryable", "orders", "1", time.Time{}},
		{"no facts", amqp.Table{}, "(no failure facts)", "", "", "", time.Time{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := factsOf(&amqp.Delivery{MessageId: "m", Headers: c.headers}, "")
			if f.Reason != c.reason || f.FullReason != c.reason || f.Kind != c.kind || f.Source != c.queue || f.Queue != c.queue || f.Attempt != c.attempt || !f.Time.Equal(c.at) {
				t.Errorf("facts %+v; want reason %q, kind %q, queue %q, attempt %q, time %v", f, c.reason, c.kind, c.queue, c.attempt, c.at)
			}
		})
	}
}

// TestFactsConflictingSources: Lily's facts and x-death that name different
// queues give the copy no source, since a producer can write either: the
// facts on a copy the broker dead-lettered (here after a TTL), x-death on
// one Lily moved. An expiry from a retry bucket of the named queue agrees.
func TestFactsConflictingSources(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	copyOf := func(named, died, reason string, at time.Time) amqp.Table {
		return amqp.Table{
			envelope.HeaderFailureReason: "permanent failure: card declined",
			envelope.HeaderFailureQueue:  named,
			envelope.HeaderFailureTime:   t0,
			headerDeath:                  []any{amqp.Table{"queue": died, "reason": reason, "time": at, "count": int64(1)}},
		}
	}
	for _, c := range []struct {
		name    string
		headers amqp.Table
		source  string // "" for a conflict
	}{
		{"facts written by the producer of a copy that expired", copyOf("payments", "orders", "expired", t0), ""},
		{"facts without a time", func() amqp.Table {
			h := copyOf("payments", "orders", "expired", t0)
			delete(h, envelope.HeaderFailureTime)
			return h
		}(), ""},
		{"a newer x-death written by the producer of a copy Lily moved", copyOf("orders", "payments", "rejected", t0.Add(time.Hour)), ""},
		{"an older x-death of another queue", copyOf("orders", "payments", "rejected", t0.Add(-time.Hour)), ""},
		{"an expiry from a queue that is not a retry bucket", copyOf("orders", "orders.wait", "expired", t0), ""},
		{"an expiry from a bucket of another queue", copyOf("orders", "payments.retry.1s", "expired", t0), ""},
		{"an expiry from the named queue's bucket", copyOf("orders", "orders.retry.1m0s", "expired", t0), "orders"},
		{"the named queue's own dead-lettering", copyOf("orders", "orders", "delivery_limit", t0.Add(time.Hour)), "orders"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := factsOf(&amqp.Delivery{MessageId: "m", Headers: c.headers}, "")
			if f.Source != c.source || (c.source == "") != (f.Conflict != "") {
				t.Errorf("source %q, conflict %q; want source %q", f.Source, f.Conflict, c.source)
			}
			if c.source == "" && (f.Queue != "" || !strings.Contains(f.shownQueue(), " or ")) {
				t.Errorf("queue shown as %q; want both names", f.Queue)
			}
		})
	}
}

// TestFactsQuarantined: a copy the filter quarantined says so, and why, and
// has no source: its headers are the filter's marker alone.
func TestFactsQuarantined(t *testing.T) {
	t.Parallel()
	d := &amqp.Delivery{MessageId: "m", Type: "t", Headers: amqp.Table{"x-lily-quarantined": "header tables or arrays nested deeper than 32"}}
	f := factsOf(d, "header tables or arrays nested deeper than 32")
	if f.Kind != kindQuarantined || f.Reason != "quarantined: header tables or arrays nested deeper than 32" || f.Quarantined == "" || f.Source != "" || f.ID != "m" || f.Type != "t" {
		t.Errorf("facts %+v", f)
	}
	// The marker alone, which a producer can send, is not a quarantine.
	if f := factsOf(d, ""); f.Kind != "" || f.Quarantined != "" || f.Reason != "(no failure facts)" {
		t.Errorf("a forged marker: facts %+v", f)
	}
}

// TestFactsTypeTheRuntimeRead: a copy of a message in another envelope
// profile (its type and version in headers of its producer's) has no AMQP
// type or x-lily-version; its type and version are those the runtime read
// and wrote as failure facts. Where Lily's envelope has its own, they are
// shown; a copy made before the runtime wrote the facts has neither.
func TestFactsTypeTheRuntimeRead(t *testing.T) {
	t.Parallel()
	foreign := amqp.Table{
		"event_type": "com.shop.OrderCreated", "schema_version": "3",
		envelope.HeaderFailureQueue: "orders", envelope.HeaderFailureReason: "permanent failure: no such sku",
		envelope.HeaderFailureType: "com.shop.OrderCreated", envelope.HeaderFailureVersion: int64(3),
	}
	for _, c := range []struct {
		name, typ string
		headers   amqp.Table
		wantType  string
		wantVer   string
	}{
		{"a foreign copy", "", foreign, "com.shop.OrderCreated", "3"},
		{"Lily's own envelope", "order.placed", amqp.Table{
			envelope.HeaderVersion: int64(2), envelope.HeaderFailureType: "other", envelope.HeaderFailureVersion: int64(9),
		}, "order.placed", "2"},
		{"a hostile fact", "", amqp.Table{envelope.HeaderFailureType: "t\x1b[2J", envelope.HeaderFailureVersion: "\x07"}, `t\x1b[2J`, `\x07`},
		{"a copy made before the facts", "", amqp.Table{"event_type": "com.shop.OrderCreated"}, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := factsOf(&amqp.Delivery{MessageId: "m", Type: c.typ, Headers: c.headers}, "")
			if f.Type != c.wantType || f.Version != c.wantVer {
				t.Errorf("type %q, version %q; want %q, %q", f.Type, f.Version, c.wantType, c.wantVer)
			}
		})
	}
}
