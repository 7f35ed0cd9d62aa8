package main

import (
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/wire"
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

// kindQuarantined is the kind of a copy whose headers the client cannot
// decode, or not whole: the filter replaced them, so nothing says where it
// came from.
const kindQuarantined = "quarantined"

// facts is what lilydlq reads from one DLQ copy: where it came from and why,
// and its type and version, those of Lily's envelope or else those the
// runtime read (x-lily-failure-type, -version),
// each string sanitized and bounded for printing, but for Source and
// FullReason, which are as the copy carries them, for routing a re-drive and
// for choosing copies by the whole reason rather than by what is printed.
type facts struct {
	ID      string    `json:"id"`
	Type    string    `json:"type"`
	Version string    `json:"version,omitempty"`
	Reason  string    `json:"reason"`
	Kind    string    `json:"kind"`
	Attempt string    `json:"attempt,omitempty"` // the attempt that failed, else x-lily-attempt
	Queue   string    `json:"source_queue"`      // Source, sanitized; empty when in doubt (Conflict)
	Time    time.Time `json:"-"`                 // when it failed
	At      string    `json:"time,omitempty"`    // Time in RFC 3339, when its year has four digits
	// Count is the x-delivery-count the copy carried when read: a quorum
	// DLQ's count of its earlier returns.
	Count int64 `json:"delivery_count,omitempty"`
	// Quarantined is why the client could not decode the copy's headers,
	// or not whole, when so: its headers are then the filter's marker alone.
	Quarantined string `json:"quarantined,omitempty"`
	// PoisonCopy: the runtime marked the copy as a poison message's
	// (envelope.HeaderPoisonCopy), which keeps only its sanitized identity
	// and body and which the guard refuses again.
	PoisonCopy bool `json:"poison_copy,omitempty"`
	// Conflict says why the copy has no source queue although it names
	// one: Lily's failure facts and the broker's latest x-death name
	// different queues. A producer can write either (the facts on a copy
	// the broker dead-lettered, x-death on one Lily moved), so neither
	// routes a re-drive.
	Conflict   string `json:"source_conflict,omitempty"`
	Source     string `json:"-"`
	FullReason string `json:"-"`
	// inDoubt names both disputed queues for a person: "a or b?".
	inDoubt string
}

// shownQueue is the source queue as list and show print it: both names
// when the copy's headers dispute it.
func (f facts) shownQueue() string {
	if f.inDoubt != "" {
		return f.inDoubt
	}
	return orDash(f.Queue)
}

// factsOf reads a copy's facts: Lily's failure headers, or the first
// (latest) entry of the broker's x-death when it is the newer of the two.
// quarantined is why the filter replaced the copy's headers, or "".
//
// A copy can carry both: a retry copy keeps the failure facts of the attempt
// that failed, and when the broker then dead-letters the message (a quorum
// queue's delivery limit, a body over the limit) those facts are stale and
// x-death is the news. Both times are whole seconds; on a tie, or when the
// Lily facts carry no time, they win: a Lily handoff copy keeps the x-death
// of the retry bucket it came back through, often in the same second.
func factsOf(d *amqp.Delivery, quarantined string) facts {
	f := facts{ID: sanitize.Text(d.MessageId, maxID), Type: sanitize.Text(d.Type, maxID)}
	if quarantined != "" {
		f.Quarantined = sanitize.Text(quarantined, maxReason)
		f.FullReason = "quarantined: " + quarantined
		f.Reason = sanitize.Text(f.FullReason, maxReason)
		f.Kind = kindQuarantined
		return f
	}
	h := d.Headers
	if v, ok := h[envelope.HeaderVersion]; ok {
		f.Version = valueText(v, maxID)
	} else if v, ok := h[envelope.HeaderFailureVersion]; ok {
		f.Version = valueText(v, maxID)
	}
	// A message in another envelope profile carries its type in headers of
	// its producer's, which lilydlq does not know: the runtime wrote the
	// type it read beside its other facts.
	if v, ok := h[envelope.HeaderFailureType]; ok && d.Type == "" {
		f.Type = valueText(v, maxID)
	}
	if n, ok := wire.HeaderInt(h[headerDeliveryCount]); ok {
		f.Count = n
	}
	_, f.PoisonCopy = h[envelope.HeaderPoisonCopy]
	source, lily := h[envelope.HeaderFailureQueue].(string)
	failed, _ := h[envelope.HeaderFailureTime].(time.Time)
	death, dead := latestDeath(h)
	died, _ := death["time"].(time.Time)
	// The broker's death wins only when it is not the retry bucket's expiry
	// the copy came back through on its way (its time is the broker's clock,
	// Lily's failure time the consumer's, and the two may differ).
	newerDeath := dead && !failed.IsZero() && died.After(failed) &&
		(death["queue"] == source || death["reason"] != "expired")
	switch {
	case lily && !newerDeath:
		f.Source = source
		f.FullReason = stringOr(h[envelope.HeaderFailureReason], "(no reason)")
		f.Kind = stringOr(h[envelope.HeaderFailureKind], "")
		f.Time = failed
		if v, ok := h[envelope.HeaderFailureAttempt]; ok {
			f.Attempt = valueText(v, maxID)
		}
	case dead:
		f.Source, _ = death["queue"].(string)
		f.FullReason = stringOr(death["reason"], "(no reason)")
		f.Kind = kindBroker
		f.Time = died
	default:
		f.FullReason = "(no failure facts)"
	}
	if lily && dead {
		// The two agree when the broker dead-lettered the message from the
		// queue Lily named, or when the death is its expiry from one of that
		// queue's retry buckets, on its way back.
		dq, _ := death["queue"].(string)
		if dq != source && !(death["reason"] == "expired" && queue.IsRetryBucket(dq, source)) {
			f.Source = ""
			f.Conflict = sanitize.Text(envelope.HeaderFailureQueue+" names "+source+", the latest x-death "+dq, maxReason)
			f.inDoubt = sanitize.Text(source+" or "+dq+"?", maxQueue)
		}
	}
	f.Reason = sanitize.Text(f.FullReason, maxReason)
	f.Kind = sanitize.Text(f.Kind, maxID)
	if f.Attempt == "" {
		if v, ok := h[envelope.HeaderAttempt]; ok {
			f.Attempt = valueText(v, maxID)
		}
	}
	f.Queue = sanitize.Text(f.Source, maxQueue)
	if !f.Time.IsZero() {
		f.At, _ = rfc3339(f.Time)
	}
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

// stringOr is v when it is a string, else or.
func stringOr(v any, or string) string {
	if s, ok := v.(string); ok {
		return s
	}
	return or
}

// valueText is a header value as bounded, sanitized text.
func valueText(v any, max int) string {
	switch v := v.(type) {
	case string:
		return sanitize.Text(v, max)
	case []byte:
		return sanitize.Text(string(v), max)
	case time.Time:
		return v.UTC().Format(time.RFC3339)
	case amqp.Table, []any:
		return "(" + typeName(v) + ")"
	}
	return sanitize.Text(fmt.Sprint(v), max)
}
