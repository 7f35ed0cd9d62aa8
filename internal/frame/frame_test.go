package frame_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/frame"
	"github.com/lily-mq/lily/internal/services"
)

// oversized is a publish of every property and every header type amqp091-go
// writes, with a filler that takes its content header past a frame.
func oversized() amqp.Publishing {
	return amqp.Publishing{
		ContentType: "application/json", ContentEncoding: "gzip", DeliveryMode: amqp.Persistent, Priority: 3,
		CorrelationId: "c", ReplyTo: "r", Expiration: "60000", MessageId: "m", Timestamp: time.Unix(1, 0),
		Type: "t", UserId: "guest", AppId: "a",
		Headers: amqp.Table{
			"nil": nil, "bool": true, "byte": byte(1), "int8": int8(-1), "int16": int16(2), "uint16": uint16(3),
			"int": 4, "int32": int32(5), "uint32": uint32(6), "float32": float32(7), "decimal": amqp.Decimal{Scale: 1, Value: 8},
			"int64": int64(9), "float64": 10.5, "string": "eleven", "bytes": []byte("twelve"), "time": time.Unix(13, 0),
			"array":  []any{"a", int32(1), []any{nil, amqp.Table{"k": "v"}}},
			"table":  amqp.Table{"inner": amqp.Table{"x": int64(1)}, "list": []any{}},
			"filler": strings.Repeat("x", frame.Size),
		},
	}
}

// The broker names the size of a content header it refuses: ContentHeader
// must say the same, for every property and every type of header value.
func TestContentHeaderIsWhatTheBrokerReads(t *testing.T) {
	conn, err := amqp.Dial(services.RabbitMQ(t))
	if err != nil {
		t.Fatalf("RabbitMQ is not reachable (start it: rabbitmq-server -detached): %v", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	p := oversized()
	if err := ch.Publish("", "lily.frame.nowhere", false, false, p); err != nil {
		t.Fatal(err)
	}
	var why *amqp.Error
	select {
	case why = <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("the broker kept the connection after a content header larger than a frame")
	}
	if why == nil || why.Code != amqp.FrameError {
		t.Fatalf("the connection closed with %v; want a frame error", why)
	}
	m := regexp.MustCompile(`frame_too_large,(\d+),(\d+)`).FindStringSubmatch(why.Reason)
	if m == nil {
		t.Fatalf("the broker's reason names no size: %q", why.Reason)
	}
	read, _ := strconv.Atoi(m[1])
	most, _ := strconv.Atoi(m[2])
	if got := frame.ContentHeader(p); got != read {
		t.Errorf("ContentHeader = %d; the broker read %d", got, read)
	}
	if most != frame.Size-frame.Overhead {
		t.Errorf("the broker's most is %d; want Size - Overhead = %d", most, frame.Size-frame.Overhead)
	}
}

// The arithmetic, without a broker: the properties alone, and one header.
func TestContentHeaderCounts(t *testing.T) {
	for _, c := range []struct {
		name string
		p    amqp.Publishing
		want int
	}{
		{"nothing", amqp.Publishing{}, 14},
		{"a message id and a mode", amqp.Publishing{MessageId: "abc", DeliveryMode: 2}, 14 + 4 + 1},
		{"a string header", amqp.Publishing{Headers: amqp.Table{"k": "vv"}}, 14 + 4 + 2 + 1 + 4 + 2},
		{"an empty table is not written", amqp.Publishing{Headers: amqp.Table{}}, 14},
		{"a type Validate refuses", amqp.Publishing{Headers: amqp.Table{"k": []string{"x"}}}, 14 + 4 + 2},
	} {
		if got := frame.ContentHeader(c.p); got != c.want {
			t.Errorf("%s: %d; want %d", c.name, got, c.want)
		}
	}
}

// Only a reply through the default exchange to a reply-to token goes
// without mandatory: the bare pseudo-queue name is no address, and another
// exchange routes a token like any key.
func TestDirectReply(t *testing.T) {
	for _, c := range []struct {
		exchange, key string
		want          bool
	}{
		{"", "amq.rabbitmq.reply-to.g1h2AA1yZXBseUA.aSZ4+Xw10wM9gs+xPWCdKg==", true},
		{"", "amq.rabbitmq.reply-to.", true},
		{"", "amq.rabbitmq.reply-to", false},
		{"", "orders", false},
		{"amq.direct", "amq.rabbitmq.reply-to.g1h2AA1yZXBseUA", false},
	} {
		if got := frame.DirectReply(c.exchange, c.key); got != c.want {
			t.Errorf("DirectReply(%q, %q) = %v, want %v", c.exchange, c.key, got, c.want)
		}
	}
}
