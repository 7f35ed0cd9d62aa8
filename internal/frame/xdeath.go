package frame

import (
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// XDeath is the header in which RabbitMQ records a message's
// dead-letterings: an array of tables, one for each queue and reason, each
// with its count (of type long), queue, reason and exchange (long strings),
// routing-keys (an array of long strings), time (a timestamp), and
// original-expiration (a long string) when the message had one.
const XDeath = "x-death"

// CheckXDeath says why RabbitMQ's dead-lettering cannot read v, a message's
// x-death header, or returns nil. When the broker dead-letters a message
// (rabbit_dead_letter:update_x_death_header, 3.10.8) it reads an x-death
// that is an array as the tables it writes there: it groups the entries by
// their queue and reason, and adds one to the count of the entry of its own
// queue and reason. An element that is not a table crashes it
// (function_clause), as does such a count that is no number (badarith); a
// count that is a float it adds to, and writes the sum as a long it cannot
// encode, so that every read of the copy closes the reader's connection
// (541 INTERNAL_ERROR). A crash there ends the classic queue's process: the
// message is not dead-lettered, the transient messages in the queue are
// lost and its consumers cancelled, and a persistent message comes back to
// crash it again at its next dead-lettering (all measured on 3.10.8).
//
// So every element must be a table, and a count in it an integer of any
// width, a timestamp (its seconds, to the broker), or void (no count, to
// the broker). Every entry's count is checked, not only the one the broker
// would add to: no broker writes another. An x-death that is not an array
// the broker replaces with its own, with a warning, so it is not refused;
// nor is an entry without a count, queue or reason, which the broker counts
// from 1. Every x-death a broker writes passes.
//
// Its work is one map lookup for each element of the array.
func CheckXDeath(v any) error {
	entries, ok := v.([]any)
	if !ok {
		return nil
	}
	for i, e := range entries {
		t, ok := e.(amqp.Table)
		if !ok {
			return fmt.Errorf("entry %d is %s, not a table", i, valueKind(e))
		}
		if c, ok := t["count"]; ok && !xDeathCount(c) {
			return fmt.Errorf("the count of entry %d is %s, not an integer", i, valueKind(c))
		}
	}
	return nil
}

// xDeathCount reports whether c, a decoded count, is one the broker adds to
// and writes back.
func xDeathCount(c any) bool {
	switch c.(type) {
	case nil, int8, uint8, int16, uint16, int32, uint32, int64, int, uint, uint64, time.Time:
		return true
	}
	return false
}

// XDeathCountType reports whether an x-death count of AMQP field type t
// (its type octet, as the wire carries it) passes CheckXDeath: an integer
// of any width, 'L' among them (RabbitMQ reads it as 'l'; amqp091-go does
// not decode it), a timestamp, or void.
func XDeathCountType(t byte) bool {
	switch t {
	case 'b', 'B', 's', 'u', 'I', 'i', 'l', 'L', 'T', 'V':
		return true
	}
	return false
}

// valueKind names the kind of a decoded header value, for a reason.
func valueKind(v any) string {
	switch v.(type) {
	case nil:
		return "void"
	case string:
		return "a string"
	case []byte:
		return "a byte array"
	case bool:
		return "a boolean"
	case float32, float64:
		return "a float"
	case amqp.Decimal:
		return "a decimal"
	case amqp.Table:
		return "a table"
	case []any:
		return "an array"
	case time.Time:
		return "a timestamp"
	case int8, uint8, int16, uint16, int32, uint32, int64, int, uint, uint64:
		return "an integer"
	}
	return "a value AMQP cannot carry"
}
