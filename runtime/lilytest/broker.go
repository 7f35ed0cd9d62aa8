package lilytest

import (
	"maps"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/frame"
	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/outcome"
)

// broker stands in for RabbitMQ under a harness's consumer: the consumer
// channel that takes each ACK and NACK, the confirm-mode publisher that
// answers each retry or DLQ copy as the harness was told to, and the retry
// buckets that hand a copy back dead-lettered.
type broker struct {
	h      *Harness
	answer atomic.Pointer[outcome.HandoffEvidence]
}

// confirmed is the fake broker's answer until AnswerHandoffs changes it.
var confirmed = outcome.HandoffConfirmed.String()

// answers are the fake broker's answers to a handoff publish, by their
// word in Record.Handoff, as the runtime's publisher reports each: whether
// the copy may exist (Published) and the detail.
var answers = map[string]outcome.HandoffEvidence{
	confirmed:                        {Status: outcome.HandoffConfirmed, Published: true},
	outcome.HandoffReturned.String(): {Status: outcome.HandoffReturned, Detail: "unroutable: returned by lilytest's broker"},
	outcome.HandoffNacked.String():   {Status: outcome.HandoffNacked, Detail: "the broker refused the publish", Published: true},
	outcome.HandoffTimedOut.String(): {Status: outcome.HandoffTimedOut, Detail: "no confirm in time", Published: true},
	outcome.HandoffFailed.String():   {Status: outcome.HandoffFailed, Detail: "publish: lilytest's broker failed the write"},
}

func (b *broker) Ack(uint64, bool) error {
	b.settled("ack")
	return nil
}

func (b *broker) Nack(_ uint64, _, requeue bool) error {
	if requeue {
		b.settled("requeue")
	} else {
		b.settled("nack")
	}
	return nil
}

// settled notes the settlement written for the delivery under way: the
// harness runs one at a time, and its settlement is written before its
// journey ends.
func (b *broker) settled(op string) {
	c := b.h.current.Load()
	c.mu.Lock()
	c.settlement = op
	c.mu.Unlock()
}

func (b *broker) Publish(exchange, key string, msg amqp.Publishing) outcome.HandoffEvidence {
	ev := *b.answer.Load()
	ev.Destination = key
	// A nacked copy is Published (the runtime's evidence: a nack speaks
	// for one queue only) but in no queue: its bucket refused it, and a
	// copy carries no CC to reach another.
	if delay, ok := b.bucket(key); ok && ev.Published && ev.Status != outcome.HandoffNacked {
		msg.Headers = deadLettered(msg.Headers, exchange, key, time.Now().Add(delay))
	}
	c := b.h.current.Load()
	c.mu.Lock()
	c.copy = (*runtime.Publishing)(&msg)
	c.mu.Unlock()
	return ev
}

// bucket reports whether key names one of the queue's retry buckets, and
// its delay.
func (b *broker) bucket(key string) (time.Duration, bool) {
	for _, d := range b.h.spec.Topology.RetryDelays {
		if queue.RetryBucket(b.h.spec.Name, d) == key {
			return d, true
		}
	}
	return 0, false
}

// deadLettered is headers, a copy's published to exchange with key, a
// retry bucket, as the bucket hands them back to the queue at expired,
// when the copy's TTL ends: with what RabbitMQ's dead-lettering adds there
// (rabbit_dead_letter:make_msg, 3.10.8), to a message without an x-death,
// as the runtime's copies are: an x-death of one entry, and the
// x-first-death-* headers. (A copy carrying an expiration would add its
// original-expiration; the runtime's carry none, nor CC, whose keys would
// join the routing-keys.) RabbitMQ 3.13 adds x-last-death-* too. headers
// are not changed.
func deadLettered(headers amqp.Table, exchange, key string, expired time.Time) amqp.Table {
	h := make(amqp.Table, len(headers)+4)
	maps.Copy(h, headers)
	h[frame.XDeath] = []any{amqp.Table{
		"count":        int64(1),
		"reason":       "expired",
		"queue":        key,
		"time":         time.Unix(expired.Unix(), 0), // a timestamp: whole seconds
		"exchange":     exchange,
		"routing-keys": []any{key},
	}}
	h["x-first-death-reason"] = "expired"
	h["x-first-death-queue"] = key
	h["x-first-death-exchange"] = exchange
	return h
}
