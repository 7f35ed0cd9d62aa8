package frame_test

import (
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/frame"
)

// brokerXDeath is the x-death RabbitMQ 3.10.8 wrote, as amqp091-go decodes
// it, on a message published with a per-message TTL and a CC header,
// rejected from a queue into a retry bucket and expired back from it twice,
// then published into a quorum queue with a delivery limit of 1 and
// returned to it twice (measured on the test broker).
func brokerXDeath() []any {
	at := time.Date(2026, 12, 6, 17, 35, 34, 0, time.Local)
	return []any{
		amqp.Table{"count": int64(1), "exchange": "", "queue": "own.quorum", "reason": "delivery_limit",
			"routing-keys": []any{"own.quorum"}, "time": at.Add(time.Second)},
		amqp.Table{"count": int64(2), "exchange": "", "original-expiration": "600000", "queue": "own", "reason": "rejected",
			"routing-keys": []any{"own", "nowhere"}, "time": at},
		amqp.Table{"count": int64(2), "exchange": "", "queue": "own.bucket", "reason": "expired",
			"routing-keys": []any{"own.bucket"}, "time": at},
	}
}

// CheckXDeath takes every x-death the broker writes, and the shapes it
// reads without harm, and refuses those on which its dead-lettering
// crashes, saying which entry and why.
func TestCheckXDeath(t *testing.T) {
	entry := func(count any) amqp.Table {
		return amqp.Table{"queue": "q", "reason": "rejected", "exchange": "", "count": count}
	}
	for _, c := range []struct {
		name  string
		value any
		want  string // "" for accepted
	}{
		{"the broker's own", brokerXDeath(), ""},
		{"none", nil, ""},
		// Measured harmless on 3.10.8: the broker resets what is not an
		// array, counts an entry without a count (or a void one) from 1,
		// adds to an integer of any width or a timestamp, and wraps a
		// count past the long's range.
		{"a string", "x", ""},
		{"a table", amqp.Table{"count": "x"}, ""},
		{"an empty array", []any{}, ""},
		{"an entry without a count", []any{amqp.Table{"queue": "q", "reason": "rejected"}}, ""},
		{"an empty entry", []any{entry(int64(3)), amqp.Table{}}, ""},
		{"a void count", []any{entry(nil)}, ""},
		{"a byte count", []any{entry(int8(-3))}, ""},
		{"an unsigned count", []any{entry(uint32(7))}, ""},
		{"a timestamp count", []any{entry(time.Unix(5, 0))}, ""},
		{"the largest count", []any{entry(int64(1<<63 - 1))}, ""},

		// Measured on 3.10.8: function_clause in
		// rabbit_dead_letter:'-queue_and_reason_matcher/2-inlined-0-'.
		{"an entry that is a string", []any{"x"}, "entry 0 is a string, not a table"},
		{"a table, then a string", []any{entry(int64(1)), "x"}, "entry 1 is a string, not a table"},
		{"an entry that is an array", []any{[]any{entry(int64(1))}}, "entry 0 is an array, not a table"},
		{"an entry that is void", []any{nil}, "entry 0 is void, not a table"},
		{"an entry that is an integer", []any{int64(1)}, "entry 0 is an integer, not a table"},
		// Measured: badarith in increment_xdeath_event_count.
		{"a string count", []any{entry("many")}, "the count of entry 0 is a string, not an integer"},
		{"a boolean count", []any{entry(true)}, "the count of entry 0 is a boolean, not an integer"},
		{"a decimal count", []any{entry(amqp.Decimal{Scale: 1, Value: 10})}, "the count of entry 0 is a decimal, not an integer"},
		{"a table count", []any{entry(amqp.Table{})}, "the count of entry 0 is a table, not an integer"},
		{"an array count", []any{entry([]any{int64(1)})}, "the count of entry 0 is an array, not an integer"},
		{"a byte-array count", []any{entry([]byte("1"))}, "the count of entry 0 is a byte array, not an integer"},
		// Measured: dead-lettered, but the copy cannot be read (badarg in
		// rabbit_binary_generator, 541 to its reader).
		{"a float count", []any{entry(1.5)}, "the count of entry 0 is a float, not an integer"},
		{"a float32 count", []any{entry(float32(2))}, "the count of entry 0 is a float, not an integer"},
		// Not the entry the broker would add to: no broker writes it either.
		{"another queue's string count", []any{entry(int64(1)), amqp.Table{"queue": "elsewhere", "reason": "expired", "count": "x"}},
			"the count of entry 1 is a string, not an integer"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := frame.CheckXDeath(c.value)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case c.want != "" && (err == nil || err.Error() != c.want):
				t.Errorf("err = %v, want %q", err, c.want)
			}
		})
	}
}

// XDeathCountType takes the wire types CheckXDeath takes for a count, and
// RabbitMQ's 'L'; every other type octet it refuses.
func TestXDeathCountType(t *testing.T) {
	var taken []string
	for b := range 256 {
		if frame.XDeathCountType(byte(b)) {
			taken = append(taken, string(rune(b)))
		}
	}
	if got := strings.Join(taken, ""); got != "BILTVbilsu" {
		t.Errorf("count types %q, want the integers, the timestamp and void", got)
	}
}
