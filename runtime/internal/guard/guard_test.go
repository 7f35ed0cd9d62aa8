package guard

import (
	"math"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"

	"github.com/lily-mq/lily/internal/sanitize"
)

var guardNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const guardMaxBody = 1 << 20

// okDelivery is an ordinary first delivery that passes the guard.
func okDelivery() *amqp.Delivery {
	return &amqp.Delivery{
		MessageId:     "01J9ZK3M4XQ7-order-42",
		Type:          "orders.created",
		ContentType:   "application/json",
		Timestamp:     guardNow.Add(-time.Minute),
		CorrelationId: "req-7f3a",
		Headers: amqp.Table{
			HeaderVersion: int32(2),
			HeaderAttempt: int32(1),
			"tenant":      "acme",
		},
		Body: []byte(`{"id":42}`),
	}
}

// xDeath is the x-death header as RabbitMQ writes it after a message was
// rejected from the queue and then expired from a retry bucket, with the
// types amqp091 decodes them to.
func xDeath() []any {
	return []any{
		amqp.Table{
			"count":               int64(1),
			"exchange":            "",
			"original-expiration": "5000",
			"queue":               "orders.retry.5s",
			"reason":              "expired",
			"routing-keys":        []any{"orders.retry.5s"},
			"time":                guardNow.Add(-5 * time.Second).Truncate(time.Second),
		},
		amqp.Table{
			"count":        int64(1),
			"exchange":     "orders",
			"queue":        "orders",
			"reason":       "rejected",
			"routing-keys": []any{"orders.created", "orders.all"},
			"time":         guardNow.Add(-10 * time.Second).Truncate(time.Second),
		},
	}
}

// redelivered is okDelivery on its second attempt, with RabbitMQ's death headers.
func redelivered() *amqp.Delivery {
	d := okDelivery()
	d.Headers[HeaderAttempt] = int32(2)
	d.Headers["x-death"] = xDeath()
	d.Headers["x-first-death-exchange"] = "orders"
	d.Headers["x-first-death-queue"] = "orders"
	d.Headers["x-first-death-reason"] = "rejected"
	d.Headers["x-last-death-exchange"] = ""
	d.Headers["x-last-death-queue"] = "orders.retry.5s"
	d.Headers["x-last-death-reason"] = "expired"
	return d
}

// nested returns v wrapped n times in tables (or arrays when arrays is set).
func nested(n int, arrays bool, v any) any {
	for range n {
		if arrays {
			v = []any{v}
		} else {
			v = amqp.Table{"t": v}
		}
	}
	return v
}

// manyHeaders returns a table of n small headers.
func manyHeaders(n int) amqp.Table {
	h := amqp.Table{HeaderVersion: int32(1)}
	for i := range n - 1 {
		h["h"+string(rune('a'+i%26))+strings.Repeat("x", i/26)] = int32(i)
	}
	return h
}

// withReserved is h with every header a message may gain on its way through
// retries and a re-drive, as Lily and RabbitMQ write them: bounded apart
// from the producer's.
func withReserved(h amqp.Table) amqp.Table {
	for k, v := range map[string]any{
		HeaderAttempt: int64(3), HeaderFailureReason: "retryable failure on attempt 2 of 5: db busy",
		HeaderFailureKind: "retryable", HeaderFailureAttempt: int64(2), HeaderFailureQueue: "orders",
		HeaderFailureTime: guardNow, HeaderFailureType: "orders.created", HeaderFailureVersion: int64(1),
		HeaderHandoffID: "0123456789abcdef0123456789abcdef", envelope.HeaderRedriven: int64(1),
		envelope.HeaderRedrivenFrom: "orders.dlq", "x-death": xDeath(), "x-first-death-queue": "orders", "x-first-death-reason": "rejected",
		"x-first-death-exchange": "orders", "x-last-death-queue": "orders.retry.5s", "x-last-death-reason": "expired",
		"x-last-death-exchange": "", HeaderDeliveryCount: int64(2), "x-acquired-count": int64(2),
		"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "lily=1",
	} {
		h[k] = v
	}
	return h
}

// Every name reserved knows, and only those: reservedHeaders counts them.
func TestReservedHeaders(t *testing.T) {
	h := withReserved(amqp.Table{})
	for k, v := range h {
		if !reserved(k, v) {
			t.Errorf("%s is not reserved", k)
		}
	}
	if len(h) != reservedHeaders {
		t.Errorf("%d names reserved, reservedHeaders says %d", len(h), reservedHeaders)
	}
	for _, k := range []string{HeaderVersion, "tenant", "x-death-", "x-lily-failure-other", "x-first-death-other"} {
		if reserved(k, "v") {
			t.Errorf("%s is reserved", k)
		}
	}
	// A copy carries these as they were: past their writers' sizes they are
	// the producer's, or they would take the room the copy's failure facts
	// need at its next attempt.
	for k, v := range map[string]any{
		"traceparent": strings.Repeat("t", 56), "tracestate": strings.Repeat("s", 513),
		envelope.HeaderRedrivenFrom: strings.Repeat("q", 256), envelope.HeaderRedriven: "1",
	} {
		if reserved(k, v) {
			t.Errorf("%s of %.20q... is reserved", k, v)
		}
	}
	if reserved("traceparent", []byte(h["traceparent"].(string))) {
		t.Error("a traceparent of bytes is reserved")
	}
}

// unwalkable is a value amqp091 cannot carry: the walk reports it if it ever
// reaches it, which proves where the walk stopped.
type unwalkable struct{}

func TestGuard(t *testing.T) {
	lim := DefaultLimits
	tests := []struct {
		name   string
		mutate func(d *amqp.Delivery)
		want   Verdict
		reason string // a part of the reason
		check  func(t *testing.T, env *Envelope)
	}{
		{name: "ordinary", want: Passed, check: func(t *testing.T, env *Envelope) {
			d := okDelivery()
			want := Envelope{
				MessageID: d.MessageId, Type: d.Type, Version: 2, ContentType: "application/json",
				Timestamp: d.Timestamp, TimestampSet: true, CorrelationID: d.CorrelationId, Attempt: 1,
			}
			got := *env
			got.Headers, got.held = nil, nil
			if !reflect.DeepEqual(got, want) {
				t.Errorf("envelope = %+v, want %+v", got, want)
			}
			if v, ok := env.Headers["tenant"]; !ok || v != "acme" {
				t.Errorf(`Header("tenant") = %v, %v`, v, ok)
			}
		}},

		// Body size comes first.
		{name: "body exactly at the limit", want: Passed,
			mutate: func(d *amqp.Delivery) { d.Body = make([]byte, guardMaxBody) }},
		{name: "body one byte over", want: Oversized, reason: "body of 1048577 bytes over the limit of 1048576",
			mutate: func(d *amqp.Delivery) { d.Body = make([]byte, guardMaxBody+1) }},
		{name: "oversized body with hostile metadata", want: Oversized, reason: "body of",
			mutate: func(d *amqp.Delivery) {
				d.Body = make([]byte, 20<<20)
				d.Headers = manyHeaders(2000)
				d.Headers["deep"] = nested(60, false, "x")
				d.MessageId = "\x1b[2J\xff"
				d.Type = ""
			}},

		// An x-death RabbitMQ's dead-lettering cannot read comes before
		// the body: NACKed for the broker to dead-letter, as an oversized
		// body is, it would crash the queue.
		{name: "oversized body with an x-death entry that is not a table", want: Poison, reason: "header x-death: entry 0 is a string, not a table",
			mutate: func(d *amqp.Delivery) {
				d.Body = make([]byte, guardMaxBody+1)
				d.Headers["x-death"] = []any{"x"}
			}},
		{name: "oversized body with an x-death count that is not a number", want: Poison, reason: "header x-death: the count of entry 2 is a string, not an integer",
			mutate: func(d *amqp.Delivery) {
				d.Body = make([]byte, guardMaxBody+1)
				d.Headers["x-death"] = append(xDeath(), amqp.Table{"queue": "orders", "reason": "rejected", "count": "many"})
			}},
		{name: "oversized body with the broker's x-death", want: Oversized, reason: "body of",
			mutate: func(d *amqp.Delivery) {
				d.Body = make([]byte, guardMaxBody+1)
				d.Headers["x-death"] = xDeath()
			}},
		{name: "an x-death count that is a float", want: Poison, reason: "header x-death: the count of entry 0 is a float",
			mutate: func(d *amqp.Delivery) { d.Headers["x-death"] = []any{amqp.Table{"count": 1.5}} }},
		{name: "an x-death that is a string, which the broker replaces", want: Passed,
			mutate: func(d *amqp.Delivery) { d.Headers["x-death"] = "x" }},

		// Metadata bounds.
		{name: "2,000 headers", want: Poison, reason: "too many headers: 2000 > 86",
			mutate: func(d *amqp.Delivery) { d.Headers = manyHeaders(2000) }},
		{name: "64 headers", want: Passed,
			mutate: func(d *amqp.Delivery) { d.Headers = manyHeaders(64) }},
		{name: "65 headers of the producer's, with the reserved", want: Poison, reason: "too many headers: 65 of the producer's > 64",
			mutate: func(d *amqp.Delivery) { d.Headers = manyHeaders(65); d.Headers["x-death"] = xDeath() }},
		{name: "64 headers of the producer's, and every reserved one", want: Passed, check: wantAttempt(3),
			mutate: func(d *amqp.Delivery) { d.Headers = withReserved(manyHeaders(64)) }},
		{name: "the producer's bytes at their bound, and every reserved header", want: Passed,
			mutate: func(d *amqp.Delivery) {
				for i := range 4 {
					d.Headers["v"+string(rune('0'+i))] = strings.Repeat("v", 4000)
				}
				d.Headers = withReserved(d.Headers)
			}},
		{name: "reserved headers past their own bytes", want: Poison, reason: "more than 8192 bytes of keys and values",
			mutate: func(d *amqp.Delivery) {
				d.Headers = withReserved(d.Headers)
				for _, k := range []string{HeaderFailureReason, HeaderFailureQueue, HeaderHandoffID} {
					d.Headers[k] = strings.Repeat("r", 3000)
				}
			}},
		{name: "a trace context past W3C's sizes, with the producer's 64", want: Poison, reason: "too many headers: 65 of the producer's > 64",
			mutate: func(d *amqp.Delivery) {
				d.Headers = manyHeaders(64)
				d.Headers["tracestate"] = strings.Repeat("s", 513)
			}},
		{name: "reserved headers past their own values", want: Poison, reason: `header "x-first-death-queue": more than 256 values at any depth`,
			mutate: func(d *amqp.Delivery) { d.Headers["x-first-death-queue"] = append(make([]any, 300), unwalkable{}) }},
		{name: "100 KB header value", want: Poison, reason: `header "big": value longer than 4096 bytes`,
			mutate: func(d *amqp.Delivery) { d.Headers["big"] = strings.Repeat("v", 100<<10) }},
		{name: "100 KB byte-array value", want: Poison, reason: `header "big": value longer than 4096 bytes`,
			mutate: func(d *amqp.Delivery) { d.Headers["big"] = make([]byte, 100<<10) }},
		{name: "value at the limit", want: Passed,
			mutate: func(d *amqp.Delivery) { d.Headers["big"] = strings.Repeat("v", 4096) }},
		{name: "long key", want: Poison, reason: `header "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk...": key longer than 128 bytes`,
			mutate: func(d *amqp.Delivery) { d.Headers[strings.Repeat("k", 129)] = "v" }},
		{name: "hostile key is sanitized", want: Poison, reason: `header "\x1b[31m`,
			mutate: func(d *amqp.Delivery) { d.Headers["\x1b[31m"+strings.Repeat("\xff", 200)] = "v" }},
		{name: "tables nested 60 deep", want: Poison, reason: `header "deep": nested deeper than 4`,
			mutate: func(d *amqp.Delivery) { d.Headers["deep"] = nested(60, false, unwalkable{}) }},
		{name: "arrays nested 60 deep", want: Poison, reason: `header "deep": nested deeper than 4`,
			mutate: func(d *amqp.Delivery) { d.Headers["deep"] = nested(60, true, unwalkable{}) }},
		{name: "tables and arrays nested 5 deep", want: Poison, reason: "nested deeper than 4",
			mutate: func(d *amqp.Delivery) { d.Headers["deep"] = nested(3, true, nested(2, false, "x")) }},
		{name: "nested 4 deep", want: Passed,
			mutate: func(d *amqp.Delivery) { d.Headers["deep"] = nested(2, true, nested(2, false, "x")) }},
		{name: "value too long deep inside", want: Poison, reason: `header "deep": value longer than 4096 bytes`,
			mutate: func(d *amqp.Delivery) { d.Headers["deep"] = nested(4, false, strings.Repeat("v", 5000)) }},
		{name: "key too long deep inside", want: Poison, reason: `header "deep": key longer than 128 bytes`,
			mutate: func(d *amqp.Delivery) {
				d.Headers["deep"] = nested(2, false, amqp.Table{strings.Repeat("k", 129): int8(1)})
			}},
		{name: "wide array", want: Poison, reason: `header "wide": more than 512 values at any depth`,
			mutate: func(d *amqp.Delivery) { d.Headers["wide"] = append(make([]any, 1_000_000), unwalkable{}) }},
		{name: "values spread over arrays", want: Poison, reason: "more than 512 values at any depth",
			mutate: func(d *amqp.Delivery) {
				for i := range 6 {
					d.Headers["a"+string(rune('0'+i))] = make([]any, 100)
				}
			}},
		{name: "too many bytes in total", want: Poison, reason: "more than 16384 bytes of keys and values",
			mutate: func(d *amqp.Delivery) {
				for i := range 5 {
					d.Headers["v"+string(rune('0'+i))] = strings.Repeat("v", 4000)
				}
			}},
		{name: "nested keys count towards the total", want: Poison, reason: "more than 16384 bytes of keys and values",
			mutate: func(d *amqp.Delivery) {
				tab := amqp.Table{}
				for i := range 200 {
					tab[strings.Repeat("k", 100)+string(rune('a'+i%26))+strings.Repeat("x", i/26)] = nil
				}
				d.Headers["t"] = tab
			}},
		{name: "value of a type AMQP cannot carry", want: Poison, reason: `header "odd": value of a type AMQP cannot carry`,
			mutate: func(d *amqp.Delivery) { d.Headers["odd"] = map[string]any{"a": 1} }},
		{name: "every type amqp091 decodes", want: Passed,
			mutate: func(d *amqp.Delivery) {
				d.Headers["all"] = amqp.Table{
					"t": true, "b": int8(-1), "B": uint8(1), "s": int16(-1), "u": uint16(1), "I": int32(-1),
					"i": uint32(1), "l": int64(-1), "f": float32(1), "d": float64(1),
					"D": amqp.Decimal{Scale: 2, Value: 12345}, "S": "s", "A": []any{}, "T": guardNow,
					"F": amqp.Table{}, "x": []byte("x"), "V": nil,
				}
			}},
		{name: "x-death as RabbitMQ writes it", want: Passed,
			mutate: func(d *amqp.Delivery) { *d = *redelivered() },
			check: func(t *testing.T, env *Envelope) {
				if env.Attempt != 2 {
					t.Errorf("attempt = %d, want 2", env.Attempt)
				}
				if _, ok := env.Headers["x-death"]; !ok {
					t.Error("x-death header not visible")
				}
			}},
		{name: "nil headers", want: Poison, reason: "header x-lily-version missing",
			mutate: func(d *amqp.Delivery) { d.Headers = nil }},

		// message_id.
		{name: "message_id missing", want: Poison, reason: "message_id missing",
			mutate: func(d *amqp.Delivery) { d.MessageId = "" }},
		{name: "message_id too long", want: Poison, reason: "message_id longer than 128 bytes",
			mutate: func(d *amqp.Delivery) { d.MessageId = strings.Repeat("\x1b", 100_000) }},
		{name: "message_id at the limit", want: Passed,
			mutate: func(d *amqp.Delivery) { d.MessageId = strings.Repeat("~", 128) }},
		{name: "message_id with ANSI escape", want: Poison, reason: `message_id "\x1b[31mred\x1b[0m" not printable ASCII`,
			mutate: func(d *amqp.Delivery) { d.MessageId = "\x1b[31mred\x1b[0m" }},
		{name: "message_id with invalid UTF-8", want: Poison, reason: `message_id "id-\xff\xfe" not printable ASCII`,
			mutate: func(d *amqp.Delivery) { d.MessageId = "id-\xff\xfe" }},
		{name: "message_id with a space", want: Poison, reason: `message_id "order 42" not printable ASCII without spaces`,
			mutate: func(d *amqp.Delivery) { d.MessageId = "order 42" }},
		{name: "message_id with a non-ASCII rune", want: Poison, reason: `message_id "sipari\xc5\x9f" not printable ASCII`,
			mutate: func(d *amqp.Delivery) { d.MessageId = "sipariş" }},

		// type.
		{name: "type missing", want: Poison, reason: "type missing",
			mutate: func(d *amqp.Delivery) { d.Type = "" }},
		{name: "type too long", want: Poison, reason: "type longer than 128 bytes",
			mutate: func(d *amqp.Delivery) { d.Type = "a" + strings.Repeat("b", 128) }},
		{name: "type at the limit", want: Passed,
			mutate: func(d *amqp.Delivery) { d.Type = "A" + strings.Repeat("z9_.-", 127/5) + "zz" }},
		{name: "type with ANSI escape", want: Poison, reason: `type "\x1b[2Jorders" not printable ASCII`,
			mutate: func(d *amqp.Delivery) { d.Type = "\x1b[2Jorders" }},
		{name: "type with invalid UTF-8", want: Poison, reason: `type "orders\xc3(" not printable ASCII`,
			mutate: func(d *amqp.Delivery) { d.Type = "orders\xc3(" }},
		{name: "type with DEL", want: Poison, reason: "not printable ASCII",
			mutate: func(d *amqp.Delivery) { d.Type = "orders\x7f" }},
		// A wire type is any printable string: other producers name theirs so.
		{name: "type of a Java class", want: Passed,
			mutate: func(d *amqp.Delivery) { d.Type = "com.acme.payments.PaymentAuthorized$V2" }},
		{name: "type with a space", want: Passed,
			mutate: func(d *amqp.Delivery) { d.Type = "orders created" }},
		{name: "type of one letter", want: Passed,
			mutate: func(d *amqp.Delivery) { d.Type = "Z" }},

		// content_type.
		{name: "content type missing", want: Poison, reason: "content_type missing",
			mutate: func(d *amqp.Delivery) { d.ContentType = "" }},
		{name: "content type with parameters and capitals", want: Passed,
			mutate: func(d *amqp.Delivery) { d.ContentType = "Application/JSON; charset=utf-8" },
			check: func(t *testing.T, env *Envelope) {
				if env.ContentType != "application/json" {
					t.Errorf("content type = %q, want application/json", env.ContentType)
				}
			}},
		{name: "content type with spaces", want: Passed,
			mutate: func(d *amqp.Delivery) { d.ContentType = "  text/plain  ;format=flowed" },
			check: func(t *testing.T, env *Envelope) {
				if env.ContentType != "text/plain" {
					t.Errorf("content type = %q, want text/plain", env.ContentType)
				}
			}},
		{name: "content type without media type", want: Poison, reason: `content_type " ; charset=utf-8" has no media type`,
			mutate: func(d *amqp.Delivery) { d.ContentType = " ; charset=utf-8" }},
		{name: "content type with a control char", want: Poison, reason: `content_type "application/json\x00" not printable ASCII`,
			mutate: func(d *amqp.Delivery) { d.ContentType = "application/json\x00" }},
		{name: "content type too long", want: Poison, reason: "content_type longer than 128 bytes",
			mutate: func(d *amqp.Delivery) { d.ContentType = "application/" + strings.Repeat("x", 117) }},

		// x-lily-version.
		{name: "version missing", want: Poison, reason: "header x-lily-version missing",
			mutate: func(d *amqp.Delivery) { delete(d.Headers, HeaderVersion) }},
		{name: "version as string", want: Poison, reason: "header x-lily-version not an integer",
			mutate: func(d *amqp.Delivery) { d.Headers[HeaderVersion] = "1" }},
		{name: "version as float", want: Poison, reason: "header x-lily-version not an integer",
			mutate: func(d *amqp.Delivery) { d.Headers[HeaderVersion] = float64(1) }},
		{name: "version as bool", want: Poison, reason: "header x-lily-version not an integer",
			mutate: func(d *amqp.Delivery) { d.Headers[HeaderVersion] = true }},
		{name: "version void", want: Poison, reason: "header x-lily-version not an integer",
			mutate: func(d *amqp.Delivery) { d.Headers[HeaderVersion] = nil }},
		{name: "version 0", want: Poison, reason: "header x-lily-version 0 out of range 1..1000000",
			mutate: func(d *amqp.Delivery) { d.Headers[HeaderVersion] = int32(0) }},
		{name: "version -1", want: Poison, reason: "header x-lily-version -1 out of range 1..1000000",
			mutate: func(d *amqp.Delivery) { d.Headers[HeaderVersion] = int8(-1) }},
		{name: "version 1,000,001", want: Poison, reason: "header x-lily-version 1000001 out of range",
			mutate: func(d *amqp.Delivery) { d.Headers[HeaderVersion] = uint32(1_000_001) }},
		{name: "version int64 max", want: Poison, reason: "header x-lily-version 9223372036854775807 out of range",
			mutate: func(d *amqp.Delivery) { d.Headers[HeaderVersion] = int64(math.MaxInt64) }},
		{name: "version uint64 max", want: Poison, reason: "header x-lily-version not an integer",
			mutate: func(d *amqp.Delivery) { d.Headers[HeaderVersion] = uint64(math.MaxUint64) }},
		{name: "version 1,000,000", want: Passed,
			mutate: func(d *amqp.Delivery) { d.Headers[HeaderVersion] = int64(1_000_000) },
			check:  wantVersion(1_000_000)},

		// x-lily-attempt.
		{name: "attempt absent", want: Passed,
			mutate: func(d *amqp.Delivery) { delete(d.Headers, HeaderAttempt) },
			check:  wantAttempt(1)},
		{name: "attempt as string", want: Poison, reason: "header x-lily-attempt not an integer",
			mutate: func(d *amqp.Delivery) { d.Headers[HeaderAttempt] = "1" }},
		{name: "attempt as float", want: Poison, reason: "header x-lily-attempt not an integer",
			mutate: func(d *amqp.Delivery) { d.Headers[HeaderAttempt] = float32(2) }},
		{name: "attempt void", want: Poison, reason: "header x-lily-attempt not an integer",
			mutate: func(d *amqp.Delivery) { d.Headers[HeaderAttempt] = nil }},
		{name: "attempt 0", want: Poison, reason: "header x-lily-attempt 0 out of range 1..1000",
			mutate: func(d *amqp.Delivery) { d.Headers[HeaderAttempt] = int32(0) }},
		{name: "attempt -1", want: Poison, reason: "header x-lily-attempt -1 out of range 1..1000",
			mutate: func(d *amqp.Delivery) { d.Headers[HeaderAttempt] = int16(-1) }},
		{name: "attempt 1001", want: Poison, reason: "header x-lily-attempt 1001 out of range 1..1000",
			mutate: func(d *amqp.Delivery) { d.Headers[HeaderAttempt] = uint16(1001) }},
		{name: "attempt int64 max", want: Poison, reason: "header x-lily-attempt 9223372036854775807 out of range",
			mutate: func(d *amqp.Delivery) { d.Headers[HeaderAttempt] = int64(math.MaxInt64) }},
		{name: "attempt 1000", want: Passed,
			mutate: func(d *amqp.Delivery) { d.Headers[HeaderAttempt] = int32(1000) },
			check:  wantAttempt(1000)},
		{name: "attempt as uint8", want: Passed,
			mutate: func(d *amqp.Delivery) { d.Headers[HeaderAttempt] = uint8(3) },
			check:  wantAttempt(3)},

		// timestamp.
		{name: "no timestamp", want: Passed,
			mutate: func(d *amqp.Delivery) { d.Timestamp = time.Time{} }},
		{name: "timestamp 1970", want: Poison, reason: "timestamp 1970-01-01T00:00:00Z not after 2000-01-01",
			mutate: func(d *amqp.Delivery) { d.Timestamp = time.Unix(0, 0) }},
		{name: "timestamp 2000-01-01", want: Poison, reason: "not after 2000-01-01",
			mutate: func(d *amqp.Delivery) { d.Timestamp = minTimestamp }},
		// The wire's 18446744011573954816, which amqp091 reads by time.Unix
		// as the zero instant.
		{name: "timestamp at the zero instant", want: Poison, reason: "timestamp 0001-01-01T00:00:00Z not after 2000-01-01",
			mutate: func(d *amqp.Delivery) { d.Timestamp = time.Unix(-62135596800, 0) }},
		{name: "timestamp far future", want: Poison, reason: "timestamp 3000-01-01T00:00:00Z more than 24h ahead",
			mutate: func(d *amqp.Delivery) { d.Timestamp = time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC) }},
		{name: "timestamp from a broken clock", want: Poison, reason: "timestamp at Unix second 9223372036854775807 out of range (years 0 to 9999)",
			mutate: func(d *amqp.Delivery) { d.Timestamp = time.Unix(math.MaxInt64, 0) }},
		{name: "timestamp from a clock broken the other way", want: Poison, reason: "timestamp at Unix second -9223372036854775808 out of range (years 0 to 9999)",
			mutate: func(d *amqp.Delivery) { d.Timestamp = time.Unix(math.MinInt64, 0) }},
		{name: "timestamp 24h ahead", want: Passed,
			mutate: func(d *amqp.Delivery) { d.Timestamp = guardNow.Add(24 * time.Hour) }},
		{name: "timestamp 24h and 1s ahead", want: Poison, reason: "more than 24h ahead",
			mutate: func(d *amqp.Delivery) { d.Timestamp = guardNow.Add(24*time.Hour + time.Second) }},

		// correlation_id.
		{name: "no correlation id", want: Passed,
			mutate: func(d *amqp.Delivery) { d.CorrelationId = "" }},
		{name: "correlation id too long", want: Poison, reason: "correlation_id longer than 128 bytes",
			mutate: func(d *amqp.Delivery) { d.CorrelationId = strings.Repeat("c", 129) }},
		{name: "correlation id with ANSI escape", want: Poison, reason: `correlation_id "\x1b]0;pwned\x07" not printable ASCII`,
			mutate: func(d *amqp.Delivery) { d.CorrelationId = "\x1b]0;pwned\x07" }},

		// x-delivery-count: the broker's, read when it is a count, ignored
		// otherwise (on a classic queue it is a producer's and means nothing).
		{name: "no delivery count", want: Passed, check: wantDeliveryCount(0)},
		{name: "a quorum queue's delivery count", want: Passed, check: wantDeliveryCount(7),
			mutate: func(d *amqp.Delivery) { d.Redelivered, d.Headers[HeaderDeliveryCount] = true, int64(7) }},
		{name: "a producer's delivery count on a first delivery", want: Passed, check: wantDeliveryCount(0),
			mutate: func(d *amqp.Delivery) { d.Headers[HeaderDeliveryCount] = int64(7) }},
		{name: "a delivery count that is no count", want: Passed, check: wantDeliveryCount(0),
			mutate: func(d *amqp.Delivery) { d.Redelivered, d.Headers[HeaderDeliveryCount] = true, "7" }},
		{name: "a negative delivery count", want: Passed, check: wantDeliveryCount(0),
			mutate: func(d *amqp.Delivery) { d.Redelivered, d.Headers[HeaderDeliveryCount] = true, int32(-3) }},
		{name: "a delivery count past 32 bits", want: Passed, check: wantDeliveryCount(0),
			mutate: func(d *amqp.Delivery) { d.Redelivered, d.Headers[HeaderDeliveryCount] = true, int64(1)<<40 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := okDelivery()
			if tt.mutate != nil {
				tt.mutate(d)
			}
			env, verdict, reason := Lily.Check(d, guardMaxBody, lim, guardNow)
			if verdict != tt.want {
				t.Fatalf("verdict = %d (%q), want %d", verdict, reason, tt.want)
			}
			checkReason(t, reason)
			if verdict != Passed {
				if env != nil {
					t.Errorf("envelope %+v with verdict %d", env, verdict)
				}
				if !strings.Contains(reason, tt.reason) {
					t.Errorf("reason %q does not contain %q", reason, tt.reason)
				}
				return
			}
			if env == nil || reason != "" {
				t.Fatalf("passed with envelope %v, reason %q", env, reason)
			}
			if reflect.ValueOf(env.Headers).UnsafePointer() != reflect.ValueOf(d.Headers).UnsafePointer() {
				t.Error("envelope headers are not the delivery's own table")
			}
			if tt.check != nil {
				tt.check(t, env)
			}
		})
	}
}

func wantVersion(v int) func(*testing.T, *Envelope) {
	return func(t *testing.T, env *Envelope) {
		if env.Version != v {
			t.Errorf("version = %d, want %d", env.Version, v)
		}
	}
}

func wantDeliveryCount(n int) func(*testing.T, *Envelope) {
	return func(t *testing.T, env *Envelope) {
		if env.DeliveryCount != n {
			t.Errorf("delivery count = %d, want %d", env.DeliveryCount, n)
		}
	}
}

func wantAttempt(a int) func(*testing.T, *Envelope) {
	return func(t *testing.T, env *Envelope) {
		if env.Attempt != a {
			t.Errorf("attempt = %d, want %d", env.Attempt, a)
		}
	}
}

// checkReason fails t unless reason is safe to log and forward.
func checkReason(t *testing.T, reason string) {
	t.Helper()
	if len(reason) > maxReasonBytes {
		t.Errorf("reason of %d bytes: %q", len(reason), reason)
	}
	for i := 0; i < len(reason); i++ {
		if !sanitize.Printable(reason[i]) {
			t.Fatalf("reason %q has byte %#x", reason, reason[i])
		}
	}
}

// The passing path allocates the envelope and nothing else.
func TestGuardPassingAllocations(t *testing.T) {
	for name, d := range map[string]*amqp.Delivery{"ordinary": okDelivery(), "redelivered with x-death": redelivered()} {
		t.Run(name, func(t *testing.T) {
			allocs := testing.AllocsPerRun(1000, func() {
				env, verdict, _ := Lily.Check(d, guardMaxBody, DefaultLimits, guardNow)
				if verdict != Passed {
					t.Fatal("not passed")
				}
				sinkEnvelope = env
			})
			if allocs != 1 {
				t.Errorf("%v allocations per passing delivery, want 1 (the envelope)", allocs)
			}
		})
	}
}

var sinkEnvelope *Envelope

func BenchmarkGuard(b *testing.B) {
	oversized := okDelivery()
	oversized.Body = make([]byte, guardMaxBody+1)
	hostileHeaders := okDelivery()
	hostileHeaders.Headers = manyHeaders(2000)
	deep := okDelivery()
	deep.Headers["deep"] = nested(60, false, "x")
	wide := okDelivery()
	wide.Headers["wide"] = make([]any, 1_000_000)
	for _, bc := range []struct {
		name string
		d    *amqp.Delivery
	}{
		{"ordinary", okDelivery()},
		{"redelivered with x-death", redelivered()},
		{"oversized", oversized},
		{"2000 headers", hostileHeaders},
		{"nested 60 deep", deep},
		{"array of a million", wide},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sinkEnvelope, _, _ = Lily.Check(bc.d, guardMaxBody, DefaultLimits, guardNow)
			}
		})
	}
}

// Small limits, so that fuzzed deliveries reach every bound.
var fuzzLimits = Limits{
	MaxHeaders:        4,
	MaxHeaderKeyBytes: 16,
	MaxValueBytes:     32,
	MaxDepth:          2,
	MaxHeaderBytes:    96,
	MaxIDBytes:        24,
	MaxAttempt:        5,
}

const fuzzMaxBody = 256

// fuzzInt turns a fuzzed integer into a header value of the kind that kind picks;
// nil means the header is absent.
func fuzzInt(kind byte, n int64) any {
	switch kind % 11 {
	case 0:
		return nil
	case 1:
		return int8(n)
	case 2:
		return uint8(n)
	case 3:
		return int16(n)
	case 4:
		return uint16(n)
	case 5:
		return int32(n)
	case 6:
		return uint32(n)
	case 7:
		return n
	case 8:
		return uint64(n)
	case 9:
		return "1"
	default:
		return float64(n)
	}
}

// fuzzValue turns fuzzed bytes into a user header value, nested as kind picks.
func fuzzValue(kind byte, b []byte) any {
	switch kind % 6 {
	case 0:
		return string(b)
	case 1:
		return b
	case 2:
		return []any{string(b), int32(len(b))}
	case 3:
		return amqp.Table{"k": []any{b}}
	case 4:
		return nested(3, false, string(b))
	default:
		return make([]any, len(b))
	}
}

var (
	fuzzTypeRE = regexp.MustCompile(`^[ -~]{1,128}$`)
	fuzzIDRE   = regexp.MustCompile(`^[!-~]{1,24}$`)
)

// tableFacts is what a full, unhurried walk finds in a header value.
type tableFacts struct {
	depth, values, bytes, longestKey, longestValue int
}

// walk visits v, a value that is at depth if it is a table or an array (the
// header table is depth 0).
func (f *tableFacts) walk(v any, depth int) {
	switch v := v.(type) {
	case string:
		f.bytes += len(v)
		f.longestValue = max(f.longestValue, len(v))
	case []byte:
		f.bytes += len(v)
		f.longestValue = max(f.longestValue, len(v))
	case amqp.Table:
		f.depth = max(f.depth, depth)
		for k, x := range v {
			f.values++
			f.bytes += len(k)
			f.longestKey = max(f.longestKey, len(k))
			f.walk(x, depth+1)
		}
	case []any:
		f.depth = max(f.depth, depth)
		for _, x := range v {
			f.values++
			f.walk(x, depth+1)
		}
	case nil:
	default:
		f.bytes += 8
	}
}

// fuzzOracle decides a fuzzed delivery the plain, slow way. stamped says
// whether the delivery carries a timestamp, of unixSeconds on the wire: the
// zero instant is a timestamp too, and time.Time wraps past its range.
func fuzzOracle(d *amqp.Delivery, stamped bool, unixSeconds int64, now time.Time) Verdict {
	lim := fuzzLimits
	if entries, ok := d.Headers["x-death"].([]any); ok {
		for _, e := range entries {
			t, ok := e.(amqp.Table)
			if !ok {
				return Poison
			}
			if c, ok := t["count"]; ok && c != nil {
				if _, ok := c.(time.Time); !ok && !reflect.ValueOf(c).CanInt() && !reflect.ValueOf(c).CanUint() {
					return Poison
				}
			}
		}
	}
	if len(d.Body) > fuzzMaxBody {
		return Oversized
	}
	// The producer's headers and those a retry adds are bounded apart.
	producer, gained := amqp.Table{}, amqp.Table{}
	for k, v := range d.Headers {
		if reserved(k, v) {
			gained[k] = v
		} else {
			producer[k] = v
		}
	}
	var facts, gainedFacts tableFacts
	facts.walk(producer, 0)
	gainedFacts.walk(gained, 0)
	if len(producer) > lim.MaxHeaders || facts.depth > lim.MaxDepth || facts.values > lim.MaxHeaders*valuesPerHeader ||
		facts.bytes > lim.MaxHeaderBytes || facts.longestKey > lim.MaxHeaderKeyBytes || facts.longestValue > lim.MaxValueBytes {
		return Poison
	}
	if gainedFacts.depth > lim.MaxDepth || gainedFacts.values > reservedValues || gainedFacts.bytes > reservedBytes ||
		gainedFacts.longestKey > lim.MaxHeaderKeyBytes || gainedFacts.longestValue > lim.MaxValueBytes {
		return Poison
	}
	if !fuzzIDRE.MatchString(d.MessageId) || !fuzzTypeRE.MatchString(d.Type) {
		return Poison
	}
	media, _, _ := strings.Cut(d.ContentType, ";")
	if len(d.ContentType) > 128 || strings.IndexFunc(d.ContentType, func(r rune) bool { return r < ' ' || r > '~' }) >= 0 ||
		strings.TrimSpace(media) == "" {
		return Poison
	}
	inRange := func(key string, hi int64, required bool) bool {
		v, ok := d.Headers[key]
		if !ok {
			return !required
		}
		rv := reflect.ValueOf(v)
		switch {
		case rv.CanInt():
			return rv.Int() >= 1 && rv.Int() <= hi
		case rv.CanUint():
			return rv.Uint() >= 1 && rv.Uint() <= uint64(hi)
		}
		return false
	}
	if !inRange(HeaderVersion, 1_000_000, true) || !inRange(HeaderAttempt, int64(lim.MaxAttempt), false) {
		return Poison
	}
	if stamped && (unixSeconds <= 946684800 || unixSeconds > now.Unix()+24*60*60) {
		return Poison
	}
	if d.CorrelationId != "" && !fuzzIDRE.MatchString(d.CorrelationId) {
		return Poison
	}
	return Passed
}

func FuzzGuard(f *testing.F) {
	f.Fuzz(func(t *testing.T, id, typ, contentType, correlationID, key string, value []byte, valueKind byte,
		versionKind byte, version int64, attemptKind byte, attempt int64, unixSeconds int64, bodyLen uint16) {
		headers := amqp.Table{key: fuzzValue(valueKind, value)}
		if v := fuzzInt(versionKind, version); v != nil {
			headers[HeaderVersion] = v
		}
		if a := fuzzInt(attemptKind, attempt); a != nil {
			headers[HeaderAttempt] = a
		}
		d := &amqp.Delivery{
			MessageId:     id,
			Type:          typ,
			ContentType:   contentType,
			CorrelationId: correlationID,
			Headers:       headers,
			Body:          make([]byte, int(bodyLen)%(2*fuzzMaxBody)),
		}
		if unixSeconds != 0 {
			d.Timestamp = time.Unix(unixSeconds, 0)
		}

		env, verdict, reason := Lily.Check(d, fuzzMaxBody, fuzzLimits, guardNow)
		checkReason(t, reason)
		if _, again, _ := Lily.Check(d, fuzzMaxBody, fuzzLimits, guardNow); again != verdict {
			t.Fatalf("verdict %d, then %d", verdict, again)
		}
		if want := fuzzOracle(d, unixSeconds != 0, unixSeconds, guardNow); verdict != want {
			t.Fatalf("verdict %d (%q), oracle says %d", verdict, reason, want)
		}
		if verdict != Passed {
			if env != nil || reason == "" {
				t.Fatalf("verdict %d with envelope %v, reason %q", verdict, env, reason)
			}
			return
		}
		if reason != "" {
			t.Fatalf("passed with reason %q", reason)
		}
		media, _, _ := strings.Cut(contentType, ";")
		wantAttempt := int64(1)
		if a, ok := headers[HeaderAttempt]; ok {
			wantAttempt = reflect.ValueOf(a).Convert(reflect.TypeFor[int64]()).Int()
		}
		switch {
		case env.MessageID != id || !fuzzIDRE.MatchString(env.MessageID):
			t.Fatalf("message id %q from %q", env.MessageID, id)
		case env.Type != typ || !fuzzTypeRE.MatchString(env.Type):
			t.Fatalf("type %q from %q", env.Type, typ)
		case env.ContentType != strings.ToLower(strings.TrimSpace(media)):
			t.Fatalf("content type %q from %q", env.ContentType, contentType)
		case int64(env.Version) != reflect.ValueOf(headers[HeaderVersion]).Convert(reflect.TypeFor[int64]()).Int():
			t.Fatalf("version %d from %v", env.Version, headers[HeaderVersion])
		case env.Version < 1 || env.Version > 1_000_000:
			t.Fatalf("version %d out of range", env.Version)
		case int64(env.Attempt) != wantAttempt || env.Attempt < 1 || env.Attempt > fuzzLimits.MaxAttempt:
			t.Fatalf("attempt %d from %v", env.Attempt, headers[HeaderAttempt])
		case !env.Timestamp.Equal(d.Timestamp) || env.CorrelationID != correlationID:
			t.Fatalf("timestamp %v / correlation id %q not carried over", env.Timestamp, env.CorrelationID)
		}
	})
}
