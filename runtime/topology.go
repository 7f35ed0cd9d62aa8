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

// QueueDeclaration is one queue Lily declares: durable, not auto-deleted,
// with these arguments.
type QueueDeclaration struct {
	Name string
	Args amqp.Table
}

// Declarations lists the queues of q's topology in declaration order: the
// DLQ, the retry buckets, the main queue. DeclareTopology declares exactly
// these, and `lilygen topology` writes them as RabbitMQ definitions.
func (q QueueSpec) Declarations() []QueueDeclaration {
	decls := []QueueDeclaration{withType(q.Type, q.DeadLetterQueue, amqp.Table{})}
	for _, d := range q.Retry.Delays {
		decls = append(decls, withType(q.Type, q.RetryBucket(d), amqp.Table{
			"x-message-ttl":             d.Milliseconds(),
			"x-dead-letter-exchange":    "",
			"x-dead-letter-routing-key": q.Name,
		}))
	}
	return append(decls, withType(q.Type, q.Name, amqp.Table{
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": q.DeadLetterQueue,
	}))
}

// DeclareTopology declares the main queue, its retry buckets and its DLQ.
func DeclareTopology(ch *amqp.Channel, q QueueSpec) error {
	for _, d := range q.Declarations() {
		if _, err := ch.QueueDeclare(d.Name, true, false, false, false, d.Args); err != nil {
			return fmt.Errorf("declare queue %s: %w", d.Name, err)
		}
	}
	return nil
}

// withType adds the queue type's arguments. Classic queues carry no
// x-queue-type, so that a queue declared before (by hand or an older tool)
// without it stays equivalent.
func withType(t QueueType, name string, args amqp.Table) QueueDeclaration {
	if t == Quorum {
		args["x-queue-type"] = string(Quorum)
		if _, dl := args["x-dead-letter-routing-key"]; dl {
			// Quorum queues can dead-letter at least once (RabbitMQ 3.10+): an
			// expiring retry copy or an oversized body then cannot be lost
			// between the queues. The strategy requires reject-publish overflow.
			args["x-dead-letter-strategy"] = "at-least-once"
			args["x-overflow"] = "reject-publish"
		}
	}
	return QueueDeclaration{Name: name, Args: args}
}
