// Package guard is the first stage of a delivery's journey: before anything
// copies, decodes or quotes a delivery, it checks the body's size, then bounds
// every header at any depth, then validates Lily's canonical envelope. What
// passes becomes an Envelope; what does not is oversized (the broker
// dead-letters it) or poison, with a bounded, sanitized reason.
package guard

import (
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Header names Lily reads and writes.
const (
	HeaderVersion = "x-lily-version"
	HeaderAttempt = "x-lily-attempt"
	// HeaderFailurePrefix starts the bounded failure facts on retry and DLQ copies.
	HeaderFailurePrefix  = "x-lily-failure-"
	HeaderFailureReason  = HeaderFailurePrefix + "reason"
	HeaderFailureKind    = HeaderFailurePrefix + "kind"
	HeaderFailureAttempt = HeaderFailurePrefix + "attempt"
	HeaderFailureQueue   = HeaderFailurePrefix + "queue"
	HeaderFailureTime    = HeaderFailurePrefix + "time"
	// HeaderHandoffID correlates a Return with its own handoff publish.
	HeaderHandoffID = "x-lily-handoff-id"
	// HeaderDeliveryCount is the broker's: a quorum queue's count of a
	// message's earlier returns to it.
	HeaderDeliveryCount = "x-delivery-count"
)

// Envelope is the canonical, validated view of a delivery's properties and headers.
type Envelope struct {
	MessageID     string
	Type          string
	Version       int
	ContentType   string    // the media type alone, lower-cased
	Timestamp     time.Time // zero when the producer set none
	CorrelationID string
	Attempt       int
	// DeliveryCount is the broker's x-delivery-count, 0 when absent or not a
	// count: only a quorum queue sets it, and only its limit makes it count.
	DeliveryCount int
	// Headers are the delivery's own table, bounded by the guard, not copied.
	Headers amqp.Table
}
