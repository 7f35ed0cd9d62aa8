// Package outboxcodec is the stored form of a message an outbox keeps to
// publish later: its properties column, as JSON whose header values are
// tagged with their Go types, and the bounds a stored message must keep so
// that it can be published at all. pgoutbox stores and relays by it, and
// lilytest's Recorder, standing for an outbox, refuses what it refuses.
package outboxcodec

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/frame"
	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime"
)

// The properties column holds a publishing's AMQP properties as a JSON
// object. Each header value in it is tagged with its Go type ({"int16": 7}),
// because JSON alone would bring every number back as a float64 and every
// table as a map[string]any, and the consumer's extractors read the types.

// Bounds that Encode checks, beyond the value types.
const (
	// maxShortStr is the most bytes AMQP carries in an exchange, a routing
	// key, a property or a header name.
	maxShortStr = 255
	// maxDepth bounds the nesting of header tables and arrays.
	maxDepth = 32
	// maxBody is the largest body RabbitMQ takes, whatever its
	// max_message_size (which it caps there).
	maxBody = 512 << 20
)

// properties is the stored form of a publishing without its body.
type properties struct {
	ContentType     string `json:"content_type,omitempty"`
	ContentEncoding string `json:"content_encoding,omitempty"`
	DeliveryMode    uint8  `json:"delivery_mode,omitempty"`
	Priority        uint8  `json:"priority,omitempty"`
	CorrelationID   string `json:"correlation_id,omitempty"`
	ReplyTo         string `json:"reply_to,omitempty"`
	Expiration      string `json:"expiration,omitempty"`
	MessageID       string `json:"message_id,omitempty"`
	Timestamp       string `json:"timestamp,omitempty"` // RFC 3339 with nanoseconds
	Type            string `json:"type,omitempty"`
	UserID          string `json:"user_id,omitempty"`
	AppID           string `json:"app_id,omitempty"`
	// Headers is an object of tagged values; absent for nil headers, so
	// that an empty table and none stay apart.
	Headers json.RawMessage `json:"headers,omitempty"`
}

// Encode checks m's bounds, as an outbox row must keep them to be
// published later, and returns its properties column.
func Encode(m runtime.Message) ([]byte, error) {
	if m.Exchange == "" && m.RoutingKey == "" {
		return nil, errors.New("a message needs an exchange or, for the default exchange, a routing key naming a queue")
	}
	// The broker would close the relay's channel on a larger body, at every
	// attempt, under every publish in flight beside it.
	if len(m.Body) > maxBody {
		return nil, fmt.Errorf("body: %d bytes, more than the %d (512 MiB) RabbitMQ takes at most", len(m.Body), maxBody)
	}
	p := m.Publishing
	texts := []struct {
		name, value string
		max         int
	}{
		{"exchange", m.Exchange, maxShortStr}, {"routing key", m.RoutingKey, maxShortStr},
		{"content_type", p.ContentType, maxShortStr}, {"content_encoding", p.ContentEncoding, maxShortStr},
		{"correlation_id", p.CorrelationId, maxShortStr}, {"reply_to", p.ReplyTo, maxShortStr},
		{"expiration", p.Expiration, maxShortStr}, {"message_id", p.MessageId, maxShortStr}, {"type", p.Type, maxShortStr},
		{"user_id", p.UserId, maxShortStr}, {"app_id", p.AppId, maxShortStr},
	}
	for _, t := range texts {
		if err := checkText(t.value, t.max); err != nil {
			return nil, fmt.Errorf("%s: %w", t.name, err)
		}
	}
	if err := checkTime(p.Timestamp); err != nil {
		return nil, fmt.Errorf("timestamp: %w", err)
	}
	// The broker closes the channel on an expiration that is not a
	// non-negative integer of milliseconds: a row that can never be
	// published, which would fail every publish in flight beside it.
	if _, err := strconv.ParseUint(p.Expiration, 10, 32); p.Expiration != "" && err != nil {
		return nil, errors.New("expiration: not a whole number of milliseconds")
	}
	if err := frame.CheckDeliveryMode(p.DeliveryMode); err != nil {
		return nil, err
	}
	// Likewise on this reply_to from a channel that does not consume the
	// direct reply-to pseudo-queue, as the relay's never does (406, 3.10.8).
	// An address, amq.rabbitmq.reply-to.<token>, the broker takes as it is.
	if p.ReplyTo == "amq.rabbitmq.reply-to" {
		return nil, errors.New(`reply_to: "amq.rabbitmq.reply-to" is taken only from a channel that consumes it, and the relay's consumes nothing: the broker would close the channel (406)`)
	}
	out := properties{
		ContentType: p.ContentType, ContentEncoding: p.ContentEncoding, DeliveryMode: p.DeliveryMode, Priority: p.Priority,
		CorrelationID: p.CorrelationId, ReplyTo: p.ReplyTo, Expiration: p.Expiration, MessageID: p.MessageId,
		Type: p.Type, UserID: p.UserId, AppID: p.AppId,
	}
	if !p.Timestamp.IsZero() {
		// In UTC: RFC 3339 gives a zone's offset to the minute, and some
		// zones' historic offsets have seconds.
		out.Timestamp = p.Timestamp.UTC().Format(time.RFC3339Nano)
	}
	if err := frame.CheckSentHeaders(p.Headers); err != nil {
		return nil, fmt.Errorf("headers: %w", err)
	}
	if err := frame.CheckDirectReply(m.Exchange, m.RoutingKey, p.Headers); err != nil {
		return nil, err
	}
	if p.Headers != nil {
		h, err := encodeTable(p.Headers, "headers", 1)
		if err != nil {
			return nil, err
		}
		if out.Headers, err = json.Marshal(h); err != nil {
			return nil, err
		}
	}
	// The broker would close the relay's connection on a content header
	// larger than a frame: every publish in flight beside it would fail,
	// on every attempt at the row.
	if n := frame.ContentHeader(p); n > frame.MaxProperties {
		return nil, fmt.Errorf("properties and headers: %d bytes, more than %d", n, frame.MaxProperties)
	}
	return json.Marshal(out)
}

// checkText says why s cannot be stored as text: too long, not UTF-8, or a
// NUL, which PostgreSQL's text and jsonb refuse.
func checkText(s string, maxBytes int) error {
	switch {
	case len(s) > maxBytes:
		return fmt.Errorf("%d bytes, more than %d", len(s), maxBytes)
	case !utf8.ValidString(s):
		return errors.New("not valid UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		return errors.New("holds a NUL byte")
	}
	return nil
}

// StoredOrderKey is k as the order_key column holds it. The relay only
// compares keys, so a key that is longer than 255 bytes, or not text that
// PostgreSQL takes, is kept as its SHA-256: any key is accepted, and the
// index stays small.
func StoredOrderKey(k string) string {
	if checkText(k, maxShortStr) == nil {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// checkTime refuses a time that RFC 3339 cannot write, and so the row could
// not be read back.
func checkTime(t time.Time) error {
	if y := t.Year(); y < 0 || y > 9999 {
		return fmt.Errorf("year %d is outside 0 to 9999", y)
	}
	return nil
}

// encodeTable returns t with each value tagged; path names t in errors.
func encodeTable(t amqp.Table, path string, depth int) (map[string]any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("%s: nested deeper than %d", pathText(path), maxDepth)
	}
	if len(t) > frame.MaxTableEntries {
		return nil, fmt.Errorf("%s: %d entries, more than the %d a client decodes", pathText(path), len(t), frame.MaxTableEntries)
	}
	out := make(map[string]any, len(t))
	for k, v := range t {
		at := path + "[" + quote(k) + "]"
		if err := checkText(k, maxShortStr); err != nil {
			return nil, fmt.Errorf("%s: name: %w", pathText(at), err)
		}
		tagged, err := encodeValue(v, at, depth)
		if err != nil {
			return nil, err
		}
		out[k] = tagged
	}
	return out, nil
}

// encodeValue tags v with its type: the types amqp091-go publishes.
func encodeValue(v any, path string, depth int) (map[string]any, error) {
	tag := func(t string, payload any) (map[string]any, error) { return map[string]any{t: payload}, nil }
	switch v := v.(type) {
	case nil:
		return tag("nil", nil)
	case bool:
		return tag("bool", v)
	case uint8:
		return tag("uint8", v)
	case int8:
		return tag("int8", v)
	case int16:
		return tag("int16", v)
	case uint16:
		return tag("uint16", v)
	case int32:
		return tag("int32", v)
	case uint32:
		return tag("uint32", v)
	case int:
		if err := frame.CheckInt(v); err != nil {
			return nil, fmt.Errorf("%s: %w", pathText(path), err)
		}
		return tag("int", v)
	case int64:
		return tag("int64", v)
	case float32:
		if err := finite(float64(v), path); err != nil {
			return nil, err
		}
		// A string keeps -0, which JSON numbers cannot.
		return tag("float32", strconv.FormatFloat(float64(v), 'g', -1, 32))
	case float64:
		if err := finite(v, path); err != nil {
			return nil, err
		}
		return tag("float64", strconv.FormatFloat(v, 'g', -1, 64))
	case amqp.Decimal:
		return tag("decimal", decimal{Scale: v.Scale, Value: v.Value})
	case string:
		if checkText(v, len(v)) != nil { // never too long for itself
			// AMQP strings are bytes; jsonb strings are not.
			return tag("string-base64", []byte(v))
		}
		return tag("string", v)
	case []byte:
		return tag("bytes", v)
	case time.Time:
		if err := checkTime(v); err != nil {
			return nil, fmt.Errorf("%s: %w", pathText(path), err)
		}
		return tag("time", v.UTC().Format(time.RFC3339Nano))
	case amqp.Table:
		t, err := encodeTable(v, path, depth+1)
		if err != nil {
			return nil, err
		}
		return tag("table", t)
	case []any:
		if depth+1 > maxDepth {
			return nil, fmt.Errorf("%s: nested deeper than %d", pathText(path), maxDepth)
		}
		if len(v) > frame.MaxTableEntries {
			return nil, fmt.Errorf("%s: %d elements, more than the %d a client decodes", pathText(path), len(v), frame.MaxTableEntries)
		}
		a := make([]any, len(v))
		for i, e := range v {
			var err error
			if a[i], err = encodeValue(e, path+"["+strconv.Itoa(i)+"]", depth+1); err != nil {
				return nil, err
			}
		}
		return tag("array", a)
	}
	return nil, fmt.Errorf("%s: a value of type %s, which amqp091-go does not publish", pathText(path), sanitize.Text(fmt.Sprintf("%T", v), 100))
}

// finite refuses a NaN or an infinity, on which the broker closes the
// connection (541): such a row could never be published.
func finite(f float64, path string) error {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("%s: %v is not a finite number", pathText(path), f)
	}
	return nil
}

type decimal struct {
	Scale uint8 `json:"scale"`
	Value int32 `json:"value"`
}

// Decode is Encode's inverse: the publishing of a row.
func Decode(props, body []byte) (runtime.Publishing, error) {
	var p properties
	if err := json.Unmarshal(props, &p); err != nil {
		return runtime.Publishing{}, err
	}
	out := runtime.Publishing{
		ContentType: p.ContentType, ContentEncoding: p.ContentEncoding, DeliveryMode: p.DeliveryMode, Priority: p.Priority,
		CorrelationId: p.CorrelationID, ReplyTo: p.ReplyTo, Expiration: p.Expiration, MessageId: p.MessageID,
		Type: p.Type, UserId: p.UserID, AppId: p.AppID, Body: body,
	}
	if p.Timestamp != "" {
		ts, err := time.Parse(time.RFC3339Nano, p.Timestamp)
		if err != nil {
			return runtime.Publishing{}, fmt.Errorf("timestamp: %w", err)
		}
		out.Timestamp = ts
	}
	if p.Headers != nil {
		h, err := decodeTable(p.Headers, 1)
		if err != nil {
			return runtime.Publishing{}, fmt.Errorf("headers: %w", err)
		}
		out.Headers = h
	}
	return out, nil
}

func decodeTable(raw json.RawMessage, depth int) (amqp.Table, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d", maxDepth)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, err
	}
	if fields == nil {
		return nil, errors.New("a table is not null")
	}
	t := make(amqp.Table, len(fields))
	for k, f := range fields {
		v, err := decodeValue(f, depth)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", quote(k), err)
		}
		t[k] = v
	}
	return t, nil
}

func decodeValue(raw json.RawMessage, depth int) (any, error) {
	var tagged map[string]json.RawMessage
	if err := json.Unmarshal(raw, &tagged); err != nil {
		return nil, err
	}
	if len(tagged) == 1 {
		for tag, p := range tagged {
			return decodeTagged(tag, p, depth)
		}
	}
	return nil, fmt.Errorf("a tagged value has one tag, not %d", len(tagged))
}

func decodeTagged(tag string, p json.RawMessage, depth int) (any, error) {
	num := string(p)
	switch tag {
	case "nil":
		if !bytes.Equal(p, []byte("null")) {
			return nil, errors.New("nil: not null")
		}
		return nil, nil
	case "bool":
		var b bool
		err := json.Unmarshal(p, &b)
		return b, err
	case "uint8":
		n, err := strconv.ParseUint(num, 10, 8)
		return uint8(n), err
	case "int8":
		n, err := strconv.ParseInt(num, 10, 8)
		return int8(n), err
	case "int16":
		n, err := strconv.ParseInt(num, 10, 16)
		return int16(n), err
	case "uint16":
		n, err := strconv.ParseUint(num, 10, 16)
		return uint16(n), err
	case "int32":
		n, err := strconv.ParseInt(num, 10, 32)
		return int32(n), err
	case "uint32":
		n, err := strconv.ParseUint(num, 10, 32)
		return uint32(n), err
	case "int":
		n, err := strconv.ParseInt(num, 10, strconv.IntSize)
		return int(n), err
	case "int64":
		return strconv.ParseInt(num, 10, 64)
	case "float32", "float64", "string", "time":
		var s string
		if err := json.Unmarshal(p, &s); err != nil {
			return nil, fmt.Errorf("%s: %w", tag, err)
		}
		switch tag {
		case "float32":
			f, err := strconv.ParseFloat(s, 32)
			return float32(f), err
		case "float64":
			return strconv.ParseFloat(s, 64)
		case "time":
			return time.Parse(time.RFC3339Nano, s)
		}
		return s, nil
	case "string-base64", "bytes":
		var b []byte
		if err := json.Unmarshal(p, &b); err != nil {
			return nil, fmt.Errorf("%s: %w", tag, err)
		}
		if tag == "bytes" {
			return b, nil
		}
		return string(b), nil
	case "decimal":
		var d decimal
		if err := json.Unmarshal(p, &d); err != nil {
			return nil, fmt.Errorf("decimal: %w", err)
		}
		return amqp.Decimal{Scale: d.Scale, Value: d.Value}, nil
	case "table":
		return decodeTable(p, depth+1)
	case "array":
		if depth+1 > maxDepth {
			return nil, fmt.Errorf("nested deeper than %d", maxDepth)
		}
		var elems []json.RawMessage
		if err := json.Unmarshal(p, &elems); err != nil {
			return nil, fmt.Errorf("array: %w", err)
		}
		a := make([]any, len(elems))
		for i, e := range elems {
			v, err := decodeValue(e, depth+1)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			a[i] = v
		}
		return a, nil
	}
	return nil, fmt.Errorf("unknown tag %s", quote(tag))
}

// quote is a table's key (or a tag) as an error quotes it: sanitized and
// bounded, since a row's headers may hold any UTF-8 without NUL, and the
// relay logs the error.
func quote(k string) string { return `"` + sanitize.Text(k, 40) + `"` }

// pathText is a header's path (keys quoted, indexes) as an error names it.
func pathText(path string) string { return sanitize.Text(path, 200) }
