package outboxcodec

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime"
)

// Every value type amqp091-go publishes comes back from the stored form
// with its Go type and value.
func TestEveryHeaderTypeComesBackAsWritten(t *testing.T) {
	ist := time.FixedZone("IST", 3*60*60)
	// Amsterdam's mean time until 1937: an offset with seconds.
	lmt := time.FixedZone("AMT", 1*60*60+19*60+32)
	headers := amqp.Table{
		"nil": nil, "true": true, "false": false,
		"uint8": uint8(255), "int8": int8(math.MinInt8), "int16": int16(math.MinInt16), "uint16": uint16(math.MaxUint16),
		"int32": int32(math.MinInt32), "uint32": uint32(math.MaxUint32), "int": int(-7),
		"int64": int64(math.MaxInt64), "int64-min": int64(math.MinInt64),
		"float32": float32(0.1), "float64": 0.1, "-0": math.Copysign(0, -1), "tiny": math.SmallestNonzeroFloat64,
		"decimal": amqp.Decimal{Scale: 255, Value: math.MinInt32},
		"string":  "plain ünïcode <&>", "empty": "", "binary string": "a\x00b\xff",
		"bytes": []byte{0, 255, 10}, "no bytes": []byte(nil), "empty bytes": []byte{},
		"time":        time.Date(2025, 1, 2, 3, 4, 5, 123456789, ist),
		"time in LMT": time.Date(1930, 6, 1, 12, 0, 0, 0, lmt),
		"table":       amqp.Table{"x": amqp.Table{"y": []any{int16(1), amqp.Table{}, []any{nil, "z"}}}},
		"empty table": amqp.Table{}, "empty array": []any{},
		"": "an empty name",
	}
	m := runtime.Message{Exchange: "x", RoutingKey: "k", Publishing: runtime.Publishing{
		Headers: headers, ContentType: "application/json", DeliveryMode: 2, Priority: 9, MessageId: "m-1",
		Timestamp: time.Date(1930, 6, 1, 12, 0, 0, 6, lmt), Body: []byte("body"),
	}}
	props, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(props, m.Body)
	if err != nil {
		t.Fatal(err)
	}
	// cmp compares times by Equal: the same instant, which comes back in UTC.
	if diff := cmp.Diff(m.Publishing, got); diff != "" {
		t.Errorf("Decode(Encode(m)) (-want +got):\n%s", diff)
	}
	if f := got.Headers["-0"].(float64); !math.Signbit(f) {
		t.Error("-0 lost its sign")
	}
	nan, err := decodeTagged("float64", []byte(`"NaN"`), 1)
	if f, ok := nan.(float64); err != nil || !ok || !math.IsNaN(f) {
		t.Errorf("NaN came back as %v (%v)", nan, err)
	}

	none, err := Encode(runtime.Message{RoutingKey: "q"})
	if err != nil {
		t.Fatal(err)
	}
	if back, err := Decode(none, nil); err != nil || back.Headers != nil {
		t.Errorf("nil headers came back as %#v (%v)", back.Headers, err)
	}
}

// What Write refuses, it refuses with an error that names the message's
// part and stays short, whatever the value.
func TestWriteRefusesWhatItCannotStore(t *testing.T) {
	long := strings.Repeat("k", 10_000)
	// With the headers' own table, one level more than maxDepth.
	deep := amqp.Table{}
	for range maxDepth - 1 {
		deep = amqp.Table{"d": deep}
	}
	deepArray := []any{}
	for range maxDepth - 1 {
		deepArray = []any{deepArray}
	}
	wideTable := amqp.Table{}
	for i := range 8193 {
		wideTable[strconv.Itoa(i)] = true
	}
	type custom struct{ A, B string }
	// Zero pages, never touched: no memory taken.
	body := make([]byte, maxBody+1)
	cases := []struct {
		name string
		m    runtime.Message
		want string
	}{
		{"no destination", runtime.Message{}, "needs an exchange or"},
		{"long exchange", runtime.Message{Exchange: long}, "exchange: 10000 bytes, more than 255"},
		{"long routing key", runtime.Message{RoutingKey: long}, "routing key: 10000 bytes"},
		{"routing key not UTF-8", runtime.Message{RoutingKey: "q\xff"}, "routing key: not valid UTF-8"},
		{"NUL in a message id", runtime.Message{RoutingKey: "q", Publishing: runtime.Publishing{MessageId: "a\x00"}}, "message_id: holds a NUL byte"},
		{"long type", runtime.Message{RoutingKey: "q", Publishing: runtime.Publishing{Type: long}}, "type: 10000 bytes"},
		{"timestamp past 9999", runtime.Message{RoutingKey: "q", Publishing: runtime.Publishing{Timestamp: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}}, "timestamp: year 10000"},
		{"expiration not a number", runtime.Message{RoutingKey: "q", Publishing: runtime.Publishing{Expiration: "1s"}}, "expiration: not a whole number of milliseconds"},
		{"delivery mode 3", runtime.Message{RoutingKey: "q", Publishing: runtime.Publishing{DeliveryMode: 3}}, "delivery_mode: 3, not 1 (transient), 2 (persistent) or 0 (none)"},
		{"delivery mode 255", runtime.Message{RoutingKey: "q", Publishing: runtime.Publishing{DeliveryMode: 255}}, "delivery_mode: 255, not"},
		{"reply_to the direct reply-to pseudo-queue", runtime.Message{RoutingKey: "q", Publishing: runtime.Publishing{ReplyTo: "amq.rabbitmq.reply-to"}}, `reply_to: "amq.rabbitmq.reply-to" is taken only from a channel that consumes it`},
		{"map instead of a table", headers("h", map[string]any{"a": 1}), `headers["h"]: a value of type map[string]interface {}`},
		{"struct deep inside", headers("h", amqp.Table{long[:255]: []any{1, custom{}}}), `headers["h"]["` + long[:37] + `..."][1]: a value of type outboxcodec.custom`},
		{"uint64", headers("h", uint64(1)), "a value of type uint64"},
		{"int past int32", headers("n", int(5_000_000_000)), `headers["n"]: the int 5000000000 is outside the int32 range, and an int is sent as 32 bits: use int64`},
		{"int past int32 deep inside", headers("h", amqp.Table{"t": []any{int(math.MinInt32) - 1}}), `headers["h"]["t"][0]: the int -2147483649 is outside`},
		{"long header name", headers(long, "v"), "name: 10000 bytes"},
		{"header name not UTF-8", headers("\xff", "v"), "name: not valid UTF-8"},
		{"nested name with NUL", headers("h", amqp.Table{"\x00": 1}), "name: holds a NUL byte"},
		{"tables too deep", headers("h", deep), "nested deeper than 32"},
		{"arrays too deep", headers("h", deepArray), "nested deeper than 32"},
		{"NaN", headers("h", []any{math.NaN()}), `headers["h"][0]: NaN is not a finite number`},
		{"an infinity", headers("h", amqp.Table{"f": float32(math.Inf(-1))}), `headers["h"]["f"]: -Inf is not a finite number`},
		{"CC not an array", headers("CC", "q2"), `headers: CC: not an array of routing keys`},
		{"x-death no broker writes", headers("x-death", []any{"x"}), `headers: x-death: entry 0 is a string, not a table`},
		{"CC on a direct reply", runtime.Message{RoutingKey: "amq.rabbitmq.reply-to.g1h2AA1yZXBseUA", Publishing: runtime.Publishing{Headers: amqp.Table{"CC": []any{"audit"}}}}, "headers: CC or BCC on a reply to a direct reply-to address"},
		{"table too wide", headers("h", wideTable), `headers["h"]: 8193 entries, more than the 8192 a client decodes`},
		{"headers too wide for the publish id", runtime.Message{RoutingKey: "q", Publishing: runtime.Publishing{Headers: wideTable}}, `headers: 8193 headers and the publish id`},
		{"array too wide", headers("h", make([]any, 8193)), `headers["h"]: 8193 elements, more than the 8192`},
		{"headers larger than a frame", headers("h", strings.Repeat("x", 200_000)), "properties and headers: 200025 bytes, more than 121848"},
		{"body over RabbitMQ's largest", runtime.Message{RoutingKey: "q", Publishing: runtime.Publishing{Body: body}}, "body: 536870913 bytes, more than the 536870912 (512 MiB) RabbitMQ takes at most"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Encode(c.m)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("encode = %v, want %q", err, c.want)
			}
			if len(err.Error()) > 400 {
				t.Errorf("the error is %d bytes long", len(err.Error()))
			}
		})
	}
	// Just within the bounds: stored.
	within := amqp.Table{}
	for range maxDepth - 2 {
		within = amqp.Table{"d": within}
	}
	if _, err := Encode(runtime.Message{Exchange: long[:255], RoutingKey: long[:255], OrderKey: long,
		Publishing: runtime.Publishing{Headers: amqp.Table{long[:255]: within}}}); err != nil {
		t.Errorf("a message at the bounds: %v", err)
	}
	// As wide as a client decodes, and a CC of routing keys: stored.
	if _, err := Encode(runtime.Message{RoutingKey: "q", Publishing: runtime.Publishing{Headers: amqp.Table{"h": make([]any, 8192), "CC": []any{"q2"}}}}); err != nil {
		t.Errorf("8192 elements and a CC: %v", err)
	}
	// A reply-to address, or another name, as the reply_to: stored.
	for _, r := range []string{"amq.rabbitmq.reply-to.g1h2AA1yZXBseUA.aSZ4+Xw10wM9gs+xPWCdKg==", "AMQ.RABBITMQ.REPLY-TO", "replies"} {
		if _, err := Encode(runtime.Message{RoutingKey: "q", Publishing: runtime.Publishing{ReplyTo: r}}); err != nil {
			t.Errorf("reply_to %q: %v", r, err)
		}
	}
	// No delivery mode, transient and persistent: stored.
	for _, mode := range []uint8{0, amqp.Transient, amqp.Persistent} {
		if _, err := Encode(runtime.Message{RoutingKey: "q", Publishing: runtime.Publishing{DeliveryMode: mode}}); err != nil {
			t.Errorf("delivery mode %d: %v", mode, err)
		}
	}
	// A body of 512 MiB: stored.
	if _, err := Encode(runtime.Message{RoutingKey: "q", Publishing: runtime.Publishing{Body: body[:maxBody]}}); err != nil {
		t.Errorf("a body of 512 MiB: %v", err)
	}
	// A content header of 121,848 bytes: the properties' 14, the table's
	// length, and one header of a 1-byte name and a string.
	if _, err := Encode(headers("h", strings.Repeat("x", 121_848-14-4-2-5))); err != nil {
		t.Errorf("headers as large as allowed: %v", err)
	}
}

// Any order key is stored: one that is long or not text, as its SHA-256.
func TestAnyOrderKeyIsStored(t *testing.T) {
	long := strings.Repeat("k", 300)
	for k, want := range map[string]string{
		"":                       "",
		"order-1":                "order-1",
		strings.Repeat("é", 127): strings.Repeat("é", 127),
		long:                     "sha256:",
		long + "2":               "sha256:",
		"a\xffb":                 "sha256:",
		"a\x00b":                 "sha256:",
	} {
		got := StoredOrderKey(k)
		if want == "sha256:" && (!strings.HasPrefix(got, want) || len(got) != 7+64) || want != "sha256:" && got != want {
			t.Errorf("StoredOrderKey(%q) = %q", sanitize.Text(k, 20), got)
		}
	}
	if StoredOrderKey(long) == StoredOrderKey(long+"2") || StoredOrderKey(long) != StoredOrderKey(strings.Repeat("k", 300)) {
		t.Error("long keys are not told apart by their content")
	}
}

func headers(name string, v any) runtime.Message {
	return runtime.Message{RoutingKey: "q", Publishing: runtime.Publishing{Headers: amqp.Table{name: v}}}
}

// A stored form that was changed by hand is an error, not a panic or a
// value of another type.
func TestDecodeRefusesWhatEncodeDoesNotWrite(t *testing.T) {
	for _, props := range []string{
		`{"headers": {"h": {"int8": 300}}}`,
		`{"headers": {"h": {"int8": 1, "int16": 1}}}`,
		`{"headers": {"h": {"complex": "1i"}}}`,
		`{"headers": {"h": {"decimal": {"scale": 256, "value": 1}}}}`,
		`{"headers": {"h": {"nil": 1}}}`,
		`{"headers": {"h": {"time": "yesterday"}}}`,
		`{"headers": {"h": 5}}`,
		`{"headers": null}`,
		`{"timestamp": "soon"}`,
	} {
		if _, err := Decode([]byte(props), nil); err == nil {
			t.Errorf("Decode(%s) succeeded", props)
		}
	}
}

// An error names a header by its path, which holds the caller's keys, and
// Decode's by the stored keys and tags: what the relay logs of it, and
// last_error keeps, is printable ASCII whatever the keys hold, and bounded.
func TestErrorsQuoteKeysSanitized(t *testing.T) {
	const hostile = "k\nERROR forged=1 \x1b[31m\u009b\u202e\u200b\u2028"
	long := strings.Repeat(hostile, 100)
	var errs []error
	for _, m := range []runtime.Message{
		headers(hostile, complex(1, 1)),
		headers(hostile, math.NaN()),
		headers(long, amqp.Table{hostile: struct{}{}}),
		headers(hostile+"\x00", 1),
	} {
		_, err := Encode(m)
		errs = append(errs, err)
	}
	for _, props := range []string{
		`{"headers": {"k\n\u001b[31m\u202e\u2028": {"int8": 300}}}`,
		`{"headers": {"h": {"\n\u001b[31m\u202e\u2028": 1}}}`,
	} {
		_, err := Decode([]byte(props), nil)
		errs = append(errs, err)
	}
	for _, err := range errs {
		if err == nil {
			t.Fatal("no error")
		}
		if s := err.Error(); len(s) > 400 || strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r > 0x7e }) {
			t.Errorf("the error quotes %d bytes, not all printable ASCII: %.300q", len(s), s)
		}
	}
}
