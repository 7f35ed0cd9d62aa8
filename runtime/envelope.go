package runtime

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
)

// Envelope is the canonical, validated view of a delivery's properties and headers.
type Envelope struct {
	MessageID     string
	Type          string
	Version       int
	ContentType   string
	Timestamp     time.Time // zero when the producer set none
	CorrelationID string
	Attempt       int
	headers       amqp.Table
}

// Header returns one header of the delivery; the guard has bounded them all.
// The value is shared with the runtime: do not modify tables or arrays in it.
func (e Envelope) Header(key string) (any, bool) {
	v, ok := e.headers[key]
	return v, ok
}
