package lilytest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/services"
)

// sentAt is a producer's send time: within a second, in a zone not the
// test's own.
var sentAt = time.Date(2024, 5, 1, 12, 0, 0, 750_000_000, time.FixedZone("UTC+3", 3*3600))

// wireCases are header values as a producer writes them and as a consumer's
// client reads them back from the broker.
func wireCases() []struct {
	name      string
	sent, got any
} {
	return []struct {
		name      string
		sent, got any
	}{
		{"bool", true, true},
		{"byte", byte(200), byte(200)},
		{"int8", int8(-5), int8(-5)},
		{"int16", int16(-300), int16(-300)},
		{"uint16", uint16(60_000), uint16(60_000)},
		{"int", 70_000, int32(70_000)},
		{"negative int", -70_000, int32(-70_000)},
		{"int32", int32(math.MinInt32), int32(math.MinInt32)},
		{"uint32", uint32(math.MaxUint32), uint32(math.MaxUint32)},
		{"int64", int64(1) << 40, int64(1) << 40},
		{"float32", float32(1.5), float32(1.5)},
		{"float64", 2.25, 2.25},
		{"decimal", amqp.Decimal{Scale: 2, Value: -12345}, amqp.Decimal{Scale: 2, Value: -12345}},
		{"string", "acme", "acme"},
		{"bytes", []byte("raw"), []byte("raw")},
		{"nil bytes", []byte(nil), []byte{}},
		{"void", nil, nil},
		{"time", sentAt, time.Unix(sentAt.Unix(), 0)},
		{"time before 1970", time.Date(1969, 7, 20, 20, 17, 40, 500, time.UTC), time.Unix(time.Date(1969, 7, 20, 20, 17, 40, 0, time.UTC).Unix(), 0)},
		{"array", []any{7, sentAt, []any{}}, []any{int32(7), time.Unix(sentAt.Unix(), 0), []any(nil)}},
		{"empty array", []any{}, []any(nil)},
		{"table", amqp.Table{"n": 7, "at": sentAt, "t": amqp.Table{}}, amqp.Table{"n": int32(7), "at": time.Unix(sentAt.Unix(), 0), "t": amqp.Table{}}},
	}
}

// routingCases are header tables with CC or BCC (sender-selected
// distribution) as a producer writes them and as the broker delivers them:
// it keeps CC and takes BCC out, though the copies they name are delivered.
func routingCases() []struct {
	name      string
	sent, got amqp.Table
} {
	none := []any{"lilytest-no-such-queue"}
	return []struct {
		name      string
		sent, got amqp.Table
	}{
		{"CC", amqp.Table{"CC": none}, amqp.Table{"CC": none}},
		{"BCC", amqp.Table{"BCC": none, "n": 7}, amqp.Table{"n": int32(7)}},
		{"BCC alone", amqp.Table{"BCC": []any{}}, amqp.Table{}},
	}
}

// A header reaches the handler as the consumer's client decodes it, not as
// the Go value the test wrote.
func TestReceivedAsTheClientDecodes(t *testing.T) {
	for _, c := range wireCases() {
		got, err := received(amqp.Table{"v": c.sent})
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !reflect.DeepEqual(got["v"], c.got) {
			t.Errorf("%s: received %T %#v, want %T %#v", c.name, got["v"], got["v"], c.got, c.got)
		}
	}
	if got, err := received(amqp.Table{}); got != nil || err != nil {
		t.Errorf("an empty header table: %#v, %v; want none, as it is not sent", got, err)
	}
	for _, c := range routingCases() {
		if got, err := received(c.sent); err != nil || !reflect.DeepEqual(got, c.got) {
			t.Errorf("%s: received %#v, %v; want %#v", c.name, got, err, c.got)
		}
	}
	if got := stamp(sentAt); !reflect.DeepEqual(got, time.Unix(sentAt.Unix(), 0)) {
		t.Errorf("timestamp %v, want whole seconds in the local zone", got)
	}
	if got := stamp(time.Time{}); !got.IsZero() {
		t.Errorf("a zero timestamp is not sent; got %v", got)
	}
}

// What no client sends is refused, as a Publisher refuses it, not changed.
func TestReceivedRefusesWhatNoClientSends(t *testing.T) {
	for name, c := range map[string]struct {
		headers amqp.Table
		want    string
	}{
		"int over 32 bits": {amqp.Table{"n": math.MaxInt32 + 1}, "n: the int 2147483648 is outside the int32 range"},
		"int in an array":  {amqp.Table{"a": []any{1, math.MinInt32 - 1}}, "a: [1]: the int -2147483649 is outside"},
		"uint64":           {amqp.Table{"t": amqp.Table{"n": uint64(1)}}, "uint64 not supported"},
		"plain map":        {amqp.Table{"m": map[string]any{}}, "not supported"},
		"NaN":              {amqp.Table{"f": math.NaN()}, "f: NaN is not a finite number"},
		"infinity":         {amqp.Table{"f": float32(math.Inf(-1))}, "f: -Inf is not a finite number"},
		"long name":        {amqp.Table{strings.Repeat("k", 256): "v"}, "a name of 256 bytes, more than 255"},
		// The broker closes the channel (406 unacceptable_type_in_header).
		"CC not an array":  {amqp.Table{"CC": "q"}, "CC: not an array"},
		"BCC not an array": {amqp.Table{"BCC": amqp.Table{}}, "BCC: not an array"},
	} {
		if _, err := received(c.headers); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

// exclusiveQueue dials the broker and declares a queue of the test's own
// on the channel it returns; the queue goes with the connection, which is
// closed when the test ends.
func exclusiveQueue(t *testing.T) (*amqp.Connection, *amqp.Channel, string) {
	conn, err := amqp.Dial(services.RabbitMQ(t))
	if err != nil {
		t.Fatalf("dial: %v (start RabbitMQ, or set LILY_AMQP_URL)", err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	q := "lilytest-wire." + hex.EncodeToString(suffix)
	if _, err := ch.QueueDeclare(q, false, true, true, false, nil); err != nil {
		t.Fatal(err)
	}
	return conn, ch, q
}

// get reads the next message of queue q, waiting for it.
func get(t *testing.T, ch *amqp.Channel, q, name string) amqp.Delivery {
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		d, ok, err := ch.Get(q, true)
		if err != nil {
			t.Fatalf("%s: get: %v", name, err)
		}
		if ok {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not delivered", name)
		}
	}
}

// The cases above are what the broker delivers: each published with
// amqp091-go to a queue of the test's own and read back.
func TestBrokerDeliversWhatReceivedSays(t *testing.T) {
	_, ch, q := exclusiveQueue(t)
	cases := map[string]amqp.Table{}
	for _, c := range wireCases() {
		cases[c.name] = amqp.Table{"v": c.sent}
	}
	for _, c := range routingCases() {
		cases[c.name] = c.sent
	}
	for name, headers := range cases {
		p := amqp.Publishing{Headers: headers, Timestamp: sentAt}
		want, err := delivery(p, q, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = ch.PublishWithContext(ctx, "", q, false, false, p)
		cancel()
		if err != nil {
			t.Fatalf("%s: publish: %v", name, err)
		}
		got := get(t, ch, q, name)
		if !reflect.DeepEqual(got.Headers, want.Headers) {
			t.Errorf("%s: the broker delivers %#v, lilytest %#v", name, got.Headers, want.Headers)
		}
		if !reflect.DeepEqual(got.Timestamp, want.Timestamp) {
			t.Errorf("%s: the broker delivers timestamp %#v, lilytest %#v", name, got.Timestamp, want.Timestamp)
		}
	}
}

// The broker takes an expiration, and delivers it as written, where
// delivery takes it; it refuses, closing the channel, one delivery refuses
// (internal/frame's expirations, and CheckProperties, say why).
func TestBrokerTakesWhatDeliveryTakes(t *testing.T) {
	conn, ch, q := exclusiveQueue(t)
	for _, expiration := range []string{
		// Each it takes long enough to be read back.
		"60000", "+60000", "4294967296", "315360000000", "+315360000000",
		"315360000001", "-5", "+", "+-5", " 5", "5.0", "soon",
	} {
		_, err := delivery(amqp.Publishing{Expiration: expiration}, q, nil)
		pub, perr := conn.Channel()
		if perr != nil {
			t.Fatal(perr)
		}
		closed := pub.NotifyClose(make(chan *amqp.Error, 1))
		if perr := pub.Confirm(false); perr != nil {
			t.Fatal(perr)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		confirm, perr := pub.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, amqp.Publishing{Expiration: expiration})
		cancel()
		if perr != nil {
			t.Fatalf("expiration %q: publish: %v", expiration, perr)
		}
		var taken bool
		select {
		case <-confirm.Done():
			taken = confirm.Acked()
		case <-closed:
		case <-time.After(time.Minute):
			t.Fatalf("expiration %q: neither confirmed nor refused", expiration)
		}
		if taken != (err == nil) {
			t.Errorf("expiration %q: the broker takes it %v; delivery: %v", expiration, taken, err)
		}
		if taken {
			_ = pub.Close()
			if d := get(t, ch, q, expiration); d.Expiration != expiration {
				t.Errorf("expiration %q delivered as %q", expiration, d.Expiration)
			}
		}
	}
}
