package frame

import (
	"errors"
	"strconv"
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
		count := byte('V') // none: the broker counts it from 1, as a void one
		if t, ok := e.(amqp.Table); ok {
			if c, ok := t["count"]; ok {
				count = fieldType(c)
			}
		}
		if why := XDeathEntry(i, fieldType(e), count); why != "" {
			return errors.New(why)
		}
	}
	return nil
}

// XDeathEntry says why RabbitMQ's dead-lettering cannot read entry i of an
// x-death (CheckXDeath), an entry of AMQP field type entry whose count, when
// the entry is a table, is of field type count ('V' when it has none), or
// returns "". A field type is the type octet the wire carries before a
// value; 0 stands for a decoded value AMQP cannot carry. CheckXDeath reads
// the entries as the client decoded them, the runtime's quarantine filter
// as the broker reads them on the wire: both in these words.
func XDeathEntry(i int, entry, count byte) string {
	switch {
	case entry != 'F':
		return "entry " + strconv.Itoa(i) + " is " + fieldKind(entry) + ", not a table"
	case !XDeathCountType(count):
		return "the count of entry " + strconv.Itoa(i) + " is " + fieldKind(count) + ", not an integer"
	}
	return ""
}

// XDeathUnreadable is the reason given for a message's header x-death when
// CheckXDeath or XDeathEntry says why, in why, RabbitMQ's dead-lettering
// cannot read it.
func XDeathUnreadable(why string) string {
	return "header " + XDeath + ": " + why + ": RabbitMQ's dead-lettering cannot read it"
}

// XDeathCountType reports whether an x-death count of AMQP field type t
// (its type octet, as the wire carries it) is one the broker adds to and
// writes back: an integer of any width, 'L' among them (RabbitMQ reads it
// as 'l'; amqp091-go does not decode it), a timestamp, or void.
func XDeathCountType(t byte) bool {
	switch t {
	case 'b', 'B', 's', 'u', 'I', 'i', 'l', 'L', 'T', 'V':
		return true
	}
	return false
}

// fieldKind names the kind of a value of AMQP field type t, for a reason.
func fieldKind(t byte) string {
	switch t {
	case 'V':
		return "void"
	case 'S':
		return "a string"
	case 'x':
		return "a byte array"
	case 't':
		return "a boolean"
	case 'f', 'd':
		return "a float"
	case 'D':
		return "a decimal"
	case 'F':
		return "a table"
	case 'A':
		return "an array"
	case 'T':
		return "a timestamp"
	case 'b', 'B', 's', 'u', 'I', 'i', 'l', 'L':
		return "an integer"
	}
	return "a value AMQP cannot carry"
}

// fieldType is the AMQP field type of v, a decoded header value: the type
// octet amqp091-go decodes as v's Go type, or writes it as ('l' for a uint
// or uint64, an integer it does not write); 0 for a value AMQP cannot carry.
func fieldType(v any) byte {
	switch v.(type) {
	case nil:
		return 'V'
	case string:
		return 'S'
	case []byte:
		return 'x'
	case bool:
		return 't'
	case float32:
		return 'f'
	case float64:
		return 'd'
	case amqp.Decimal:
		return 'D'
	case amqp.Table:
		return 'F'
	case []any:
		return 'A'
	case time.Time:
		return 'T'
	case int8:
		return 'b'
	case uint8:
		return 'B'
	case int16:
		return 's'
	case uint16:
		return 'u'
	case int32, int:
		return 'I'
	case uint32:
		return 'i'
	case int64, uint, uint64:
		return 'l'
	}
	return 0
}
