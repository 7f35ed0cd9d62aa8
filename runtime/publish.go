package runtime

import (
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/runtime/internal/guard"
)

// Publishing is a message to publish; generated producers return it so that
// generated code needs no import beyond the runtime and the standard library.
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
