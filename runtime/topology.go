package runtime

import (
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Topology of one queue, all on the default exchange so that a handoff's
// mandatory publish is routed by queue name alone and a missing queue shows up
// as a Return:
//
//	<name>               the main queue; dead-letters (oversized bodies) to <dlq>
//	<name>.retry.<delay> one retry bucket per delay; its message TTL is the delay,
//	                     and expired messages dead-letter back to <name>
//	<dlq>                the dead-letter queue
//
// All are durable and of the queue's type. Classic queues dead-letter at most
// once: RabbitMQ can lose a message between a bucket and the main queue if it
// fails at that moment; quorum queues dead-letter at least once. Declaring is
// idempotent; a queue
// that exists with other arguments is refused by the broker (406), which
// DeclareTopology reports.

// DeclareTopology declares the main queue, its retry buckets and its DLQ.
func DeclareTopology(ch *amqp.Channel, q QueueSpec) error {
	if err := declare(ch, q.Type, q.DeadLetterQueue, nil); err != nil {
		return err
	}
	for _, d := range q.Retry.Delays {
		args := amqp.Table{
			"x-message-ttl":             d.Milliseconds(),
			"x-dead-letter-exchange":    "",
			"x-dead-letter-routing-key": q.Name,
		}
		if err := declare(ch, q.Type, q.RetryBucket(d), args); err != nil {
			return err
		}
	}
	return declare(ch, q.Type, q.Name, amqp.Table{
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": q.DeadLetterQueue,
	})
}

func declare(ch *amqp.Channel, t QueueType, name string, args amqp.Table) error {
	// Classic queues carry no x-queue-type, so that a queue declared before
	// (by hand or an older tool) without it stays equivalent.
	if t == Quorum {
		if args == nil {
			args = amqp.Table{}
		}
		args["x-queue-type"] = string(Quorum)
		if _, dl := args["x-dead-letter-routing-key"]; dl {
			// Quorum queues can dead-letter at least once (RabbitMQ 3.10+): an
			// expiring retry copy or an oversized body then cannot be lost
			// between the queues. The strategy requires reject-publish overflow.
			args["x-dead-letter-strategy"] = "at-least-once"
			args["x-overflow"] = "reject-publish"
		}
	}
	if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
		return fmt.Errorf("declare queue %s: %w", name, err)
	}
	return nil
}
