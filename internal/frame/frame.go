// Package frame sizes the content header frame amqp091-go writes for a
// publish. The header cannot be split across frames, and RabbitMQ closes the
// whole connection (501 FRAME_ERROR) on one larger than the frame size it
// negotiated: every publish in flight on that connection would fail with it.
// It also says what else of a publish the client or the broker would refuse
// (CheckPublish): the checks a runtime.Publisher makes before it writes,
// which cmd/lilydlq makes too.
package frame

import (
	"fmt"
	"maps"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
)

// Size is the frame size Lily's connections ask for: RabbitMQ's default
// frame_max, and amqp091-go's. A broker may negotiate less.
const Size = 131072

// Overhead is what a frame adds to its payload: a type, a channel and a size
// before it, an end octet after.
const Overhead = 8

// MaxProperties is the most a message's content header may take when it is
// stored to be published later (the outbox): a frame of Size, less room for
// the headers added as it is sent: the Publisher's publish id, and a
// telemetry hook's trace context (a W3C baggage alone may take 8 KiB).
const MaxProperties = Size - Overhead - 9<<10

// Check says why p's properties and headers do not fit a frame of
// frameSize (none when frameSize is not positive): the broker would close
// the connection (501) under every publish on it.
func Check(p amqp.Publishing, frameSize int) error {
	if n, most := ContentHeader(p), frameSize-Overhead; frameSize > 0 && n > most {
		return fmt.Errorf("properties and headers: %d bytes, more than the %d of a frame", n, most)
	}
	return nil
}

// MaxPublishID is the longest publish id a runtime.Publisher adds to each
// message it sends, in header x-lily-handoff-id, to match a Return to it:
// 6 random bytes in hex and a '-', then the publish's number, a uint64, in
// base 36, at most 13 digits (confirm's TestPublishIDFitsItsReserve). A
// message that fits a frame with it, the Publisher sends.
const MaxPublishID = 2*6 + 1 + 13

// CheckSent is Check for p as a Publisher sends it: with its publish id.
func CheckSent(p amqp.Publishing, frameSize int) error {
	p.Headers = maps.Clone(p.Headers)
	if p.Headers == nil {
		p.Headers = amqp.Table{}
	}
	p.Headers[envelope.HeaderHandoffID] = strings.Repeat("i", MaxPublishID)
	return Check(p, frameSize)
}

// ContentHeader is the payload size of the content header frame that
// carries p's properties and headers, as amqp091-go encodes them. A header
// value of a type amqp.Table.Validate refuses counts nothing.
func ContentHeader(p amqp.Publishing) int {
	// Class, weight, body size and the property flags.
	n := 2 + 2 + 8 + 2
	for _, s := range [...]string{p.ContentType, p.ContentEncoding, p.CorrelationId, p.ReplyTo, p.Expiration, p.MessageId, p.Type, p.UserId, p.AppId} {
		if s != "" {
			n += 1 + len(s)
		}
	}
	if len(p.Headers) > 0 {
		n += table(p.Headers)
	}
	if p.DeliveryMode > 0 {
		n++
	}
	if p.Priority > 0 {
		n++
	}
	if !p.Timestamp.IsZero() {
		n += 8
	}
	return n
}

// table is the encoded size of t: its length, then each name and value.
func table(t amqp.Table) int {
	n := 4
	for name, v := range t {
		n += 1 + len(name) + value(v)
	}
	return n
}

// value is the encoded size of v with its type octet.
func value(v any) int {
	switch v := v.(type) {
	case nil:
		return 1
	case bool, byte, int8:
		return 2
	case int16, uint16:
		return 3
	case int, int32, uint32, float32:
		return 5
	case amqp.Decimal:
		return 6
	case int64, float64:
		return 9
	case string:
		return 5 + len(v)
	case []byte:
		return 5 + len(v)
	case []any:
		n := 5
		for _, item := range v {
			n += value(item)
		}
		return n
	case amqp.Table:
		return 1 + table(v)
	case time.Time:
		return 9
	default:
		return 0
	}
}
