package lilytest

import (
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/frame"
)

// received is headers t as the consumer's client decodes them once they have
// crossed the broker, in tables, arrays and byte slices of their own, as
// amqp091-go v1.17 writes and reads them (write.go writeField, read.go
// readField): an int arrives as an int32, a time.Time as whole seconds in
// the local zone (readTimestamp's time.Unix), an empty array as a nil one,
// a nil byte slice as an empty one, and an empty header table as none;
// without BCC, which the broker routes by and takes out. It refuses, as a
// Publisher does before writing (frame.CheckTypes, frame.CheckEntry,
// frame.CheckSentHeaders), what no client sends or the broker takes: a
// value of a type AMQP has no word for, a name over 255 bytes, an int
// outside the int32 range, which the client would truncate, a NaN or an
// infinity, on which the broker closes the connection, and a CC or BCC
// that is not an array, on which it closes the channel. The names in its
// refusal are bounded and sanitized (frame.HeaderName). An x-death the
// broker's dead-lettering cannot read, which a Publisher refuses too, it
// passes: another producer sends one, the broker delivers it, and the
// trial quarantines it as the consumer connection's filter does.
func received(t amqp.Table) (amqp.Table, error) {
	if len(t) == 0 {
		return nil, nil
	}
	if err := frame.CheckTypes(t); err != nil {
		return nil, err
	}
	routing := amqp.Table{}
	for name, v := range t {
		if envelope.Routing(name) {
			routing[name] = v
		}
	}
	if err := frame.CheckSentHeaders(routing); err != nil {
		return nil, err
	}
	out, err := receivedTable(t)
	if err != nil {
		return nil, err
	}
	delete(out, "BCC")
	return out, nil
}

func receivedTable(t amqp.Table) (amqp.Table, error) {
	out := make(amqp.Table, len(t))
	for name, v := range t {
		if err := frame.CheckEntry(name, v); err != nil {
			return nil, err
		}
		w, err := receivedValue(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", frame.HeaderName(name), err)
		}
		out[name] = w
	}
	return out, nil
}

func receivedValue(v any) (any, error) {
	switch v := v.(type) {
	case amqp.Table:
		return receivedTable(v)
	case []any:
		var out []any // an empty array is read as nil
		for i, x := range v {
			if err := frame.CheckValue(x); err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			w, err := receivedValue(x)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out = append(out, w)
		}
		return out, nil
	case []byte:
		return append([]byte{}, v...), nil
	case int: // in the int32 range, CheckValue has checked
		return int32(v), nil
	case time.Time:
		return time.Unix(v.Unix(), 0), nil
	}
	return v, nil
}

// stamp is a timestamp property as the client decodes it: whole seconds,
// as readTimestamp reads them, and none (the zero Time, in no zone) when it
// is the zero instant, which is not sent.
func stamp(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return time.Unix(t.Unix(), 0)
}
