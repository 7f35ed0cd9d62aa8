package lilytest

import (
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/outcome"
)

// broker stands in for RabbitMQ under a harness's consumer: the consumer
// channel that takes each ACK and NACK, and the confirm-mode publisher that
// answers each retry or DLQ copy as the harness was told to.
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

func (b *broker) Publish(_, key string, msg amqp.Publishing) outcome.HandoffEvidence {
	c := b.h.current.Load()
	c.mu.Lock()
	c.copy = (*runtime.Publishing)(&msg)
	c.mu.Unlock()
	ev := *b.answer.Load()
	ev.Destination = key
	return ev
}
