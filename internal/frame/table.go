package frame

import (
	"errors"
	"fmt"
	"math"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/sanitize"
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
// broker closes the channel (406), an x-death the broker's dead-lettering
// cannot read (CheckXDeath), which the broker takes and then crashes the
// queue that dead-letters the message, or no room left beside them for the
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
	if err := CheckXDeath(h[XDeath]); err != nil {
		return fmt.Errorf("%s: %w: RabbitMQ's dead-lettering cannot read it, and would crash the queue that dead-letters the message; no broker writes it", XDeath, err)
	}
	if _, ok := h[envelope.HeaderHandoffID]; !ok && len(h) >= MaxTableEntries {
		return fmt.Errorf("%d headers and the publish id, more than the %d a client decodes", len(h), MaxTableEntries)
	}
	return nil
}

// DirectReply says whether a publish to exchange with key is a reply to a
// direct reply-to address: the default exchange, and a routing key
// amq.rabbitmq.reply-to.<token>, the ReplyTo of a request whose sender
// consumes RabbitMQ's direct reply-to pseudo-queue. RabbitMQ hands such a
// reply to the requester's channel, which is no queue: a mandatory publish
// of it comes back as a Return though it was delivered (3.10.8), and
// publishing it again would deliver it again. So it is published without
// mandatory: its confirm says the broker took it, and the broker drops it,
// with no Return and no channel error, when the requester is gone (or the
// token is none).
func DirectReply(exchange, key string) bool {
	return exchange == "" && strings.HasPrefix(key, "amq.rabbitmq.reply-to.")
}

// CheckDirectReply says why headers h cannot go with a publish to exchange
// with key: CC or BCC on a direct reply (DirectReply), which goes without
// mandatory, so a copy that reached no queue would be dropped unreported.
func CheckDirectReply(exchange, key string, h amqp.Table) error {
	if DirectReply(exchange, key) && (h["CC"] != nil || h["BCC"] != nil) {
		return errDirectReplyCopies
	}
	return nil
}

var errDirectReplyCopies = errors.New("headers: CC or BCC on a reply to a direct reply-to address: it is published without mandatory, so a copy that reaches no queue would be dropped unreported; send the copies as messages of their own")

// MaxShortStr is the most bytes AMQP carries in a short string: an
// exchange's or a routing key's name, a property, a header's name.
const MaxShortStr = 255

// CheckEntry says why a header entry, name with value v, cannot be sent,
// whatever table it is in: a name too long for AMQP, which the client does
// not write, an int it would truncate, or a NaN or an infinity, on which the
// broker closes the connection (541). The tables and arrays within v are the
// caller's to walk. It allocates nothing unless one is refused: every
// handoff passes here.
func CheckEntry(name string, v any) error {
	if len(name) > MaxShortStr {
		return fmt.Errorf("a name of %d bytes, more than %d", len(name), MaxShortStr)
	}
	if err := CheckValue(v); err != nil {
		return fmt.Errorf("%s: %w", HeaderName(name), err)
	}
	return nil
}

// maxHeaderName bounds a header's name as a refusal tells it.
const maxHeaderName = 64

// HeaderName is a header's name as a refusal tells it: its producer may
// have put anything in it (ESC and so ANSI sequences, a bidi override, 255
// bytes or, in a table Validate refuses, any number), and the refusal
// reaches a log line, an error a handler returns, a test's output. So it
// is sanitized (sanitize.Text) and bounded.
func HeaderName(name string) string { return sanitize.Text(name, maxHeaderName) }

// CheckTypes says which value in headers t is of a type AMQP has no word
// for: what amqp.Table.Validate refuses, which is the client's word on it,
// told with each name on the way to the value as HeaderName tells it
// (Validate quotes them whole). It allocates nothing unless one is.
func CheckTypes(t amqp.Table) error {
	if t.Validate() == nil {
		return nil
	}
	return unsupported(t)
}

// unsupported is CheckTypes's walk to the value Validate refuses in v.
func unsupported(v any) error {
	switch v := v.(type) {
	case amqp.Table:
		for name, x := range v {
			if err := unsupported(x); err != nil {
				return fmt.Errorf("%s: %w", HeaderName(name), err)
			}
		}
		return nil
	case []any:
		for i, x := range v {
			if err := unsupported(x); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
		}
		return nil
	}
	if (amqp.Table{"": v}).Validate() != nil {
		return fmt.Errorf("value %T not supported", v)
	}
	return nil
}

// CheckValue is CheckEntry for a value alone: an array's element.
func CheckValue(v any) error {
	switch v := v.(type) {
	case float64:
		return finite(v)
	case float32:
		return finite(float64(v))
	case int:
		return CheckInt(v)
	}
	return nil
}

func finite(f float64) error {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("%v is not a finite number", f)
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
