package lilyotel

import "github.com/lily-mq/lily/internal/sanitize"

// maxIDText bounds an id as a span attribute holds it; maxNameText an
// exchange's or a routing key's name, as AMQP does.
const (
	maxIDText   = 128
	maxNameText = 255
)

// idText is an id a publish names, as a span attribute holds it: valid
// UTF-8 (an OTLP exporter refuses a span batch with invalid UTF-8 in it),
// each rune a trace view shows as itself, at most maxIDText bytes. A retry
// copy of another producer's message carries its message_id as it came,
// which no guard bounded; the common id passes unchanged and unallocated.
// It is sanitize.Name, the runtime's own, so that a send's span and the
// delivery's (RawDelivery) escape the same runes the same way.
func idText(s string) string { return sanitize.Name(s, maxIDText) }

// nameText is an exchange's or a routing key's name as a span holds it, as
// idText holds an id: the telemetry hook sees a Send's names before the
// publisher checks them.
func nameText(s string) string { return sanitize.Name(s, maxNameText) }
