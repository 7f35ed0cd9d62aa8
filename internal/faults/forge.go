package faults

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Messages no client library sends, which RabbitMQ accepts and delivers all
// the same: for the tests that a consumer survives them.

// PublishForged publishes msg to queue with one more header, key, whose
// encoding is written byte for byte: the field type typ, then value (at
// least four bytes), as no client library would write it (amqp091-go has no
// 'L' type, say). The message travels through a proxy that rewrites its
// content header, and the publish is confirmed.
func PublishForged(brokerURL, queue string, msg amqp.Publishing, key string, typ byte, value []byte) error {
	if len(value) < 4 || len(key) > 255 {
		return errors.New("faults: a forged header needs a value of at least 4 bytes and a short key")
	}
	// A byte array of the same encoded length stands in for the forged value
	// on its way to the proxy: one type byte, four length bytes, the rest.
	stand := make([]byte, len(value)-4)
	_, _ = rand.Read(stand)
	field := func(typ byte, value []byte) []byte {
		b := append([]byte{byte(len(key))}, key...)
		return append(append(b, typ), value...)
	}
	placeholder := field('x', append(binary.BigEndian.AppendUint32(nil, uint32(len(stand))), stand...))
	forged := field(typ, value)
	p, url, err := ListenFor(brokerURL)
	if err != nil {
		return err
	}
	defer p.Close()
	var replaced atomic.Bool // the proxy's goroutine sets it
	p.Rewrite(func(f Frame, raw []byte) []byte {
		if f.Dir == ToBroker && f.Type == 2 && bytes.Contains(raw, placeholder) {
			replaced.Store(true)
			return bytes.Replace(raw, placeholder, forged, 1)
		}
		return raw
	})
	headers := amqp.Table{}
	for k, v := range msg.Headers {
		headers[k] = v
	}
	headers[key] = stand
	msg.Headers = headers
	if err := publishConfirmed(url, queue, msg); err != nil {
		return err
	}
	if !replaced.Load() {
		return errors.New("faults: the forged header was not written")
	}
	return nil
}

// PublishFirst publishes msg to queue with entries, raw header table
// entries (each a name's length and name, a field type and its value, as
// the wire carries them), written byte for byte ahead of those amqp091-go
// writes for msg.Headers, which must not be empty: a header named twice,
// say, which no client library writes from a map. RabbitMQ keeps every
// entry, and reads the first of a name; amqp091-go keeps the last. The
// message travels through a proxy that rewrites its content header, and the
// publish is confirmed.
func PublishFirst(brokerURL, queue string, msg amqp.Publishing, entries []byte) error {
	if len(msg.Headers) == 0 {
		return errors.New("faults: PublishFirst needs headers to write its entries ahead of")
	}
	p, url, err := ListenFor(brokerURL)
	if err != nil {
		return err
	}
	defer p.Close()
	var replaced atomic.Bool // the proxy's goroutine sets it
	p.Rewrite(func(f Frame, raw []byte) []byte {
		if f.Dir != ToBroker || f.Type != 2 || replaced.Load() {
			return raw
		}
		out, ok := headFirst(raw, entries)
		if !ok {
			return raw
		}
		replaced.Store(true)
		return out
	})
	if err := publishConfirmed(url, queue, msg); err != nil {
		return err
	}
	if !replaced.Load() {
		return errors.New("faults: the entries were not written")
	}
	return nil
}

// headFirst is the content header frame raw with entries written at the
// start of its header table.
func headFirst(raw, entries []byte) ([]byte, bool) {
	const flagsAt = 7 + 12 // the frame's header, then class, weight and body size
	if len(raw) < flagsAt+2 {
		return nil, false
	}
	flags := binary.BigEndian.Uint16(raw[flagsAt:])
	if flags&0x2000 == 0 {
		return nil, false
	}
	at := flagsAt + 2
	// Only the content type and encoding, short strings, come first.
	for _, bit := range [...]uint16{0x8000, 0x4000} {
		if flags&bit != 0 {
			at += 1 + int(raw[at])
		}
	}
	n := binary.BigEndian.Uint32(raw[at:])
	out := append([]byte(nil), raw[:at]...)
	out = binary.BigEndian.AppendUint32(out, n+uint32(len(entries)))
	out = append(out, entries...)
	out = append(out, raw[at+4:]...)
	binary.BigEndian.PutUint32(out[3:7], uint32(len(out)-8))
	return out, true
}

// DeadLetterInto delivers msg to queue the way RabbitMQ's dead-lettering
// does: published to a side queue that dead-letters into queue, and rejected
// there, so that it arrives with the broker's x-death header added. A header
// table just under the frame size so grows past it on the way.
func DeadLetterInto(brokerURL, queue string, msg amqp.Publishing) error {
	side := queue + ".faults-dead-letter-into"
	return OnChannel(brokerURL, func(ch *amqp.Channel) error {
		if _, err := ch.QueueDeclare(side, true, false, false, false, amqp.Table{
			"x-dead-letter-exchange": "", "x-dead-letter-routing-key": queue,
		}); err != nil {
			return err
		}
		defer func() { _, _ = ch.QueueDelete(side, false, false, false) }()
		if err := ch.Confirm(false); err != nil {
			return err
		}
		if err := confirm(ch, side, msg); err != nil {
			return err
		}
		// The header grows only on the way out: here it still decodes.
		d, ok, err := ch.Get(side, false)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("faults: the message did not reach " + side)
		}
		return d.Reject(false)
	})
}

func publishConfirmed(url, queue string, msg amqp.Publishing) error {
	return OnChannel(url, func(ch *amqp.Channel) error {
		if err := ch.Confirm(false); err != nil {
			return err
		}
		return confirm(ch, queue, msg)
	})
}

// confirm publishes msg to queue, mandatory, and waits for its confirm.
func confirm(ch *amqp.Channel, queue string, msg amqp.Publishing) error {
	dc, err := ch.PublishWithDeferredConfirm("", queue, true, false, msg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if acked, err := dc.WaitContext(ctx); err != nil || !acked {
		return fmt.Errorf("faults: publish to %s not confirmed: %v", queue, err)
	}
	return nil
}
