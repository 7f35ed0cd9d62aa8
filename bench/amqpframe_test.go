package main

import (
	"encoding/binary"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// properties encodes a content header's property flags and list, as
// RabbitMQ sends them, and returns where the message id's value starts.
func properties(p amqp.Publishing) ([]byte, int, error) {
	var flags uint16
	var list []byte
	idAt := -1
	add := func(bit uint16, v []byte) {
		flags |= bit
		list = append(list, v...)
	}
	if p.ContentType != "" {
		add(0x8000, shortstr(p.ContentType))
	}
	if p.ContentEncoding != "" {
		add(0x4000, shortstr(p.ContentEncoding))
	}
	if len(p.Headers) > 0 {
		t, err := table(p.Headers)
		if err != nil {
			return nil, 0, err
		}
		add(0x2000, t)
	}
	if p.DeliveryMode != 0 {
		add(0x1000, []byte{p.DeliveryMode})
	}
	if p.MessageId != "" {
		idAt = 2 + len(list) + 1
		add(0x0080, shortstr(p.MessageId))
	}
	if !p.Timestamp.IsZero() {
		add(0x0040, u64(uint64(p.Timestamp.Unix())))
	}
	if p.Type != "" {
		add(0x0020, shortstr(p.Type))
	}
	if p.CorrelationId != "" || p.ReplyTo != "" || p.Expiration != "" || p.Priority != 0 || p.UserId != "" || p.AppId != "" {
		return nil, 0, errors.New("replay: a property the recording does not encode")
	}
	return append(u16(flags), list...), idAt, nil
}

// table encodes a field table of the value types the bench's envelope uses.
func table(t amqp.Table) ([]byte, error) {
	var b []byte
	for k, v := range t {
		b = append(b, shortstr(k)...)
		switch v := v.(type) {
		case string:
			b = append(append(b, 'S'), longstr([]byte(v))...)
		case int64:
			b = append(append(b, 'l'), u64(uint64(v))...)
		case int32:
			b = append(append(b, 'I'), u32(uint32(v))...)
		default:
			return nil, fmt.Errorf("replay: header %s of type %T", k, v)
		}
	}
	return longstr(b), nil
}

// op is a method's class and id in one number.
func op(class, id uint16) uint32 { return uint32(class)<<16 | uint32(id) }

func frame(typ byte, channel uint16, payload []byte) []byte {
	b := append([]byte{typ}, u16(channel)...)
	b = append(b, u32(uint32(len(payload)))...)
	return append(append(b, payload...), 0xCE)
}

func method(channel, class, id uint16, args ...[]byte) []byte {
	return frame(1, channel, concat(append([][]byte{u16(class), u16(id)}, args...)))
}

// shortstrAt reads the short string at offset at of args ("" if it runs
// past the end).
func shortstrAt(args []byte, at int) string {
	if at >= len(args) || at+1+int(args[at]) > len(args) {
		return ""
	}
	return string(args[at+1 : at+1+int(args[at])])
}

func shortstr(s string) []byte { return append([]byte{byte(len(s))}, s...) }
func longstr(b []byte) []byte  { return append(u32(uint32(len(b))), b...) }
func u64(n uint64) []byte      { return binary.BigEndian.AppendUint64(nil, n) }
func u32(n uint32) []byte      { return binary.BigEndian.AppendUint32(nil, n) }
func u16(n uint16) []byte      { return binary.BigEndian.AppendUint16(nil, n) }

func concat(parts [][]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}
