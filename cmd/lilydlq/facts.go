package main

import (
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
)

// The broker's headers a copy may carry.
const (
	// headerDeath is RabbitMQ's history of a message's dead-letterings, the
	// latest first: how a copy the broker dead-lettered itself says where it
	// came from and why.
	headerDeath = "x-death"
	// headerDeliveryCount is a quorum queue's count of a message's returns
	// to it, set on each redelivery.
	headerDeliveryCount = "x-delivery-count"
)

// kindBroker is the kind lilydlq gives a copy the broker dead-lettered
// itself (a body over the limit, a quorum queue's delivery limit, a TTL, a
// length limit): it carries x-death and none of Lily's failure facts.
const kindBroker = "broker"

// facts is what lilydlq reads from one DLQ copy: where it came from and why,
// each string sanitized and bounded for printing, but for Source, which is
// the queue name as the copy carries it, for routing a re-drive.
type facts struct {
	ID      string    `json:"id"`
	Type    string    `json:"type"`
	Version string    `json:"version,omitempty"`
	Reason  string    `json:"reason"`
	Kind    string    `json:"kind"`
	Attempt string    `json:"attempt,omitempty"` // the attempt that failed, else x-lily-attempt
	Queue   string    `json:"source_queue"`      // Source, sanitized
	Time    time.Time `json:"time,omitzero"`     // when it failed
	// Count is the x-delivery-count the copy carried when read: a quorum
	// DLQ's count of its earlier returns.
	Count  int64  `json:"delivery_count,omitempty"`
	Source string `json:"-"`
}

// factsOf reads a copy's facts: Lily's failure headers when it has them,
// else the first (latest) entry of the broker's x-death.
func factsOf(d *amqp.Delivery) facts {
	f := facts{ID: text(d.MessageId, maxID), Type: text(d.Type, maxID)}
	h := d.Headers
	if v, ok := h[envelope.HeaderVersion]; ok {
		f.Version = valueText(v, maxID)
	}
	if n, ok := integer(h[headerDeliveryCount]); ok {
		f.Count = n
	}
	if q, ok := h[envelope.HeaderFailureQueue].(string); ok {
		f.Source = q
		f.Reason = stringOr(h[envelope.HeaderFailureReason], "(no reason)")
		f.Kind = stringOr(h[envelope.HeaderFailureKind], "")
		f.Time, _ = h[envelope.HeaderFailureTime].(time.Time)
		if v, ok := h[envelope.HeaderFailureAttempt]; ok {
			f.Attempt = valueText(v, maxID)
		}
	} else if death, ok := latestDeath(h); ok {
		f.Source, _ = death["queue"].(string)
		f.Reason = stringOr(death["reason"], "(no reason)")
		f.Kind = kindBroker
		f.Time, _ = death["time"].(time.Time)
	} else {
		f.Reason = "(no failure facts)"
	}
	if f.Attempt == "" {
		if v, ok := h[envelope.HeaderAttempt]; ok {
			f.Attempt = valueText(v, maxID)
		}
	}
	f.Queue = text(f.Source, maxQueue)
	return f
}

// latestDeath is the first entry of a copy's x-death: RabbitMQ keeps the
// latest dead-lettering first.
func latestDeath(h amqp.Table) (amqp.Table, bool) {
	deaths, ok := h[headerDeath].([]any)
	if !ok || len(deaths) == 0 {
		return nil, false
	}
	death, ok := deaths[0].(amqp.Table)
	return death, ok
}

// stringOr is v sanitized as a reason when it is a string, else or.
func stringOr(v any, or string) string {
	if s, ok := v.(string); ok {
		return text(s, maxReason)
	}
	return or
}

// valueText is a header value as bounded, sanitized text.
func valueText(v any, max int) string {
	switch v := v.(type) {
	case string:
		return text(v, max)
	case []byte:
		return text(string(v), max)
	case time.Time:
		return v.UTC().Format(time.RFC3339)
	case amqp.Table, []any:
		return "(" + typeName(v) + ")"
	}
	return text(fmt.Sprint(v), max)
}

// integer reads an AMQP integer of any width.
func integer(v any) (int64, bool) {
	switch n := v.(type) {
	case int8:
		return int64(n), true
	case int16:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case int:
		return int64(n), true
	case uint8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case uint32:
		return int64(n), true
	}
	return 0, false
}
