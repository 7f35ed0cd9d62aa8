package frame

import (
	"fmt"
	"math"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
)

// The bounds amqp091-go v1.17 decodes a field table within (read.go:
// maxFieldDepth, maxContainerElements), though it writes any: the header
// table is at depth 0, every table or array inside it one deeper, and none
// holds more than MaxTableEntries entries or elements. A message past them
// that comes back to a client (a delivery, or a publish returned
// unroutable) cannot be decoded, and the client closes its connection.
const (
	MaxTableDepth   = 32
	MaxTableEntries = 8192
)

// CheckSentHeaders says why the broker or a client would refuse headers h
// as a Publisher sends them, beyond their values' types and bounds: a CC or
// BCC (sender-selected distribution) that is not an array, on which the
// broker closes the channel (406), or no room left beside them for the
// publish id the Publisher adds, past which a client could not read a
// Return of the message.
func CheckSentHeaders(h amqp.Table) error {
	// The names envelope.Routing names, looked up rather than the table
	// walked: every handoff passes here.
	for _, name := range [...]string{"CC", "BCC"} {
		if v, ok := h[name]; ok {
			if _, ok := v.([]any); !ok {
				return fmt.Errorf("%s: not an array of routing keys", name)
			}
		}
	}
	if _, ok := h[envelope.HeaderHandoffID]; !ok && len(h) >= MaxTableEntries {
		return fmt.Errorf("%d headers and the publish id, more than the %d a client decodes", len(h), MaxTableEntries)
	}
	return nil
}

// CheckInt says why v cannot be sent as a header value of Go type int:
// amqp091-go writes an int as 32 bits ('I'), so one outside the int32
// range would arrive truncated, without an error.
func CheckInt(v int) error {
	if v < math.MinInt32 || v > math.MaxInt32 {
		return fmt.Errorf("the int %d is outside the int32 range, and an int is sent as 32 bits: use int64", v)
	}
	return nil
}
