// Package guard is the first stage of a delivery's journey: before anything
// copies, decodes or quotes a delivery, it checks the body's size, then bounds
// every header at any depth, then reads the envelope by its profile (Lily's
// own, CloudEvents, or a header-mapped one; see package envelope). What
// passes becomes an Envelope; what does not is oversized (the broker
// dead-letters it) or poison, with a bounded, sanitized reason. Build writes
// what the guard reads, for the producers of each profile.
package guard

import (
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
)

// Header names Lily reads and writes: the wire contract's, named once in
// package envelope.
const (
	HeaderVersion = envelope.HeaderVersion
	HeaderAttempt = envelope.HeaderAttempt
	// HeaderFailurePrefix starts the bounded failure facts on retry and DLQ copies.
	HeaderFailurePrefix  = envelope.HeaderFailurePrefix
	HeaderFailureReason  = envelope.HeaderFailureReason
	HeaderFailureKind    = envelope.HeaderFailureKind
	HeaderFailureAttempt = envelope.HeaderFailureAttempt
	HeaderFailureQueue   = envelope.HeaderFailureQueue
	HeaderFailureTime    = envelope.HeaderFailureTime
	HeaderFailureType    = envelope.HeaderFailureType
	HeaderFailureVersion = envelope.HeaderFailureVersion
	// HeaderHandoffID correlates a Return with its own handoff publish.
	HeaderHandoffID = envelope.HeaderHandoffID
	// HeaderDeliveryCount is the broker's: a quorum queue's count of a
	// message's earlier returns to it.
	HeaderDeliveryCount = "x-delivery-count"
)

// The keys of the envelopes other than Lily's (Envelope.Key): a CloudEvent's
// "<source> <id>", each part an id, and a header-mapped profile's
// "headers <type> <id>", which sets it apart from both.
const headersKeyPrefix = "headers "

// MaxKeyBytes bounds the key of a message the guard passed under
// DefaultLimits, the runtime's: the longest is a header-mapped profile's,
// "headers " and a wire type and an id of their longest (265 bytes); a
// CloudEvent's source and id come to 257 at most, an id of Lily's envelope
// to 128.
const MaxKeyBytes = len(headersKeyPrefix) + envelope.MaxTypeBytes + len(" ") + envelope.MaxIDBytes

// Envelope is the canonical, validated view of a delivery's properties and headers.
type Envelope struct {
	// MessageID is the message's id as its profile carries it; "" for a
	// profile that has none.
	MessageID string
	// Type is the wire type, without a version suffix the profile reads.
	Type          string
	Version       int
	ContentType   string    // the payload's media type alone, lower-cased
	Timestamp     time.Time // the producer's time, when TimestampSet
	TimestampSet  bool      // even to the zero instant, which is out of bounds
	CorrelationID string
	Attempt       int
	// DeliveryCount is the broker's x-delivery-count, 0 when absent or not a
	// count: only a quorum queue sets it, and only its limit makes it count.
	DeliveryCount int
	// Headers are the delivery's own table, bounded by the guard, not copied.
	Headers amqp.Table
	// Foreign is what another producer's envelope adds; nil for Lily's, so
	// that the envelope of every delivery in Lily's stays small.
	Foreign *Foreign
	// held is what user code has been given of the payload (Held); nil in
	// an Envelope built by hand.
	held *held
}

// Foreign is what an envelope of another producer's adds to Lily's.
type Foreign struct {
	// Key identifies the message (see Envelope.Key).
	Key string
	// Structured: a structured CloudEvent, whose Data member is the
	// payload (never nil: an event without data is poison), not copied,
	// and whose context Attributes are kept as headers cloudEvents_<name>
	// would hold them.
	Structured bool
	Data       []byte
	Attributes map[string]any
}

// Key identifies the message to the inbox and to the consumer's memory of
// its work: the MessageID in Lily's envelope, a CloudEvent's source and id,
// another producer's type and id; "" when the message has no id. It is
// printable ASCII of at most MaxKeyBytes, so that it is shown whole.
func (e *Envelope) Key() string {
	if e.Foreign != nil {
		return e.Foreign.Key
	}
	return e.MessageID
}

// Payload is what the extractor decodes: body, or a structured
// CloudEvent's data member.
func (e *Envelope) Payload(body []byte) []byte {
	if e.Foreign != nil && e.Foreign.Structured {
		return e.Foreign.Data
	}
	return body
}
