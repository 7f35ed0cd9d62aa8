package runtime

import (
	"context"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/runtime/internal/guard"
)

// Publishing is a message's properties, headers and body; generated producers
// build it so that generated code needs no import beyond the runtime and the
// standard library.
type Publishing = amqp.Publishing

// NewPublishing returns a persistent application/json message in Lily's
// canonical envelope, ready for a producer to publish.
func NewPublishing(messageType string, version int, messageID string, body []byte) Publishing {
	return Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		MessageId:    messageID,
		Type:         messageType,
		Timestamp:    time.Now().UTC().Truncate(time.Second),
		Headers:      amqp.Table{guard.HeaderVersion: int64(version)},
		Body:         body,
	}
}

// Message is a message to send: where the broker is to route it, and the
// publishing itself. Generated producers build it as the schema names it.
type Message struct {
	// Exchange is the exchange to publish to; "" is the default exchange,
	// which routes to the queue named by the routing key.
	Exchange   string
	RoutingKey string
	// OrderKey, when not empty, asks an outbox to publish the messages of one
	// key one at a time, in the order they were written. A Publisher needs
	// none: each Send returns only after the broker's answer.
	OrderKey string
	Publishing
}

// Sender sends messages. A *Publisher publishes each and waits for the
// broker's confirm; an outbox writes it in the caller's transaction, for a
// relay to publish after the commit; a test's recorder keeps it. Code that
// sends through a Sender is tested without a broker.
type Sender interface {
	Send(ctx context.Context, m Message) error
}
