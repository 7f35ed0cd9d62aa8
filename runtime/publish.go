package runtime

import (
	"context"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/runtime/internal/guard"
)

// Publishing is a message's properties, headers and body; generated producers
// build it so that generated code needs no import beyond the runtime and the
// standard library.
type Publishing = amqp.Publishing

// NewPublishing returns version version of message m, its payload body as
// application/json, in m's envelope profile, as a consumer's guard reads it:
// the type, version and id where the profile keeps them (a CloudEvent in
// binary content mode, with m.Profile.Source as its source), persistent and
// stamped with the time. A profile without ids (NoID) carries no messageID.
// Generated producers call it once they have checked the message, its id
// among the rest. It panics on what no reader would accept or would misread:
//
//   - a message id envelope.CheckID refuses, where the profile carries ids
//     (Lily's does, and a CloudEvent's): "", more than 128 bytes, or not
//     printable ASCII without spaces ("order 1");
//   - a type as it travels, any version suffix included, that is empty,
//     more than 128 bytes or not printable ASCII;
//   - a profile NewConsumer refuses too (an unknown kind, settings on
//     Lily's, a version read from more than one place, ...);
//   - a version outside 1..1,000,000, or other than a fixed-version
//     profile's own;
//   - a CloudEvent without a source, or whose source is more than 128 bytes
//     or not printable ASCII without spaces.
func NewPublishing(m envelope.Message, version int, messageID string, body []byte) Publishing {
	return guard.Build(m, version, messageID, body, time.Now())
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
