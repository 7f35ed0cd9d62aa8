package frame

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// CheckDestination says why a message to exchange with key could go
// nowhere: the default exchange routes by a queue's name.
func CheckDestination(exchange, key string) error {
	if exchange == "" && key == "" {
		return errors.New("a message needs an exchange or, for the default exchange, a routing key naming a queue")
	}
	return nil
}

// CheckPublish says why msg cannot be published to exchange with key, before
// anything is written: what a runtime.Publisher checks before it writes,
// and what a caller may check first to tell such a message from a failed
// send (cmd/lilydlq). The client refuses some of it only once the
// publish's method frame is out, so the rest of the connection's framing
// would be lost, and the broker refuses a bad expiration by closing the
// channel: either way every publish in flight beside it would fail.
//
// Of the expirations the broker takes, a Publisher sends only the plain
// form, digits within 32 bits: RabbitMQ 3.10.8 also takes a sign and up to
// ten years, as another producer may send them (CheckProperties).
func CheckPublish(exchange, key string, msg amqp.Publishing) error {
	if err := cmp.Or(shortStr("exchange", exchange), shortStr("routing key", key), CheckProperties(msg)); err != nil {
		return err
	}
	if _, err := strconv.ParseUint(msg.Expiration, 10, 32); msg.Expiration != "" && err != nil {
		return errors.New("expiration: not plain milliseconds, digits alone within 32 bits, the only form a Publisher sends")
	}
	if err := CheckHeaders(msg.Headers); err != nil {
		return fmt.Errorf("headers: %w", err)
	}
	return CheckDirectReply(exchange, key, msg.Headers)
}

// CheckProperties says why the client, or the broker, would refuse msg's
// properties at publish, beside its headers, so that no delivery carries
// them: one over 255 bytes, which the client does not write, or an
// expiration the broker does not read as milliseconds (brokerExpiration),
// a delivery mode other than 0, 1 and 2 (CheckDeliveryMode), or a reply_to
// of the bare direct reply-to pseudo-queue, on any of which the broker
// closes the channel.
func CheckProperties(msg amqp.Publishing) error {
	if err := CheckDeliveryMode(msg.DeliveryMode); err != nil {
		return err
	}
	for _, f := range []struct{ name, value string }{
		{"content_type", msg.ContentType}, {"content_encoding", msg.ContentEncoding},
		{"correlation_id", msg.CorrelationId}, {"reply_to", msg.ReplyTo}, {"expiration", msg.Expiration},
		{"message_id", msg.MessageId}, {"type", msg.Type}, {"user_id", msg.UserId}, {"app_id", msg.AppId},
	} {
		if err := shortStr(f.name, f.value); err != nil {
			return err
		}
	}
	if msg.Expiration != "" && !brokerExpiration(msg.Expiration) {
		return errors.New("expiration: not a whole number of milliseconds up to ten years, as the broker reads one")
	}
	if msg.ReplyTo == replyToPseudoQueue {
		return errReplyToPseudoQueue
	}
	return nil
}

// CheckDeliveryMode says why the broker would refuse delivery mode m: it
// takes none (0: the property is not sent), 1 (transient) and 2
// (persistent), and closes the channel on any other (406 "invalid message:
// {delivery_mode_unknown,3}", 3.10.8), so that every publish in flight on
// it beside the message goes unconfirmed.
func CheckDeliveryMode(m uint8) error {
	if m > amqp.Persistent {
		return fmt.Errorf("delivery_mode: %d, not 1 (transient), 2 (persistent) or 0 (none): the broker would close the channel (406)", m)
	}
	return nil
}

// maxExpiration is the longest per-message TTL RabbitMQ takes, in
// milliseconds: ten years (3.10.8 refuses one millisecond more).
const maxExpiration = 10 * 365 * 24 * 3600 * 1000

// brokerExpiration says whether RabbitMQ takes expiration e at publish,
// rather than close the channel (406), as 3.10.8 reads it (Erlang's
// string:to_integer): one sign at most, decimal digits and nothing else,
// from 0 to maxExpiration. It delivers e as it was written: "+5000" as
// "+5000".
func brokerExpiration(e string) bool {
	negative := strings.HasPrefix(e, "-")
	if negative || strings.HasPrefix(e, "+") {
		e = e[1:]
	}
	n, err := strconv.ParseUint(e, 10, 64)
	return err == nil && n <= maxExpiration && (!negative || n == 0)
}

// replyToPseudoQueue, as a publish's reply_to, asks the broker to put in
// its place the address of the publishing channel's direct reply-to
// consumer. A Publisher's channel consumes nothing, so the broker closes it
// (406 "fast reply consumer does not exist", 3.10.8). A reply_to that is
// already an address, amq.rabbitmq.reply-to.<token>, it takes as it is.
const replyToPseudoQueue = "amq.rabbitmq.reply-to"

var errReplyToPseudoQueue = errors.New(`reply_to: "amq.rabbitmq.reply-to" is taken only from a channel that consumes it, and a Lily publisher's consumes nothing: the broker would close the channel (406)`)

// shortStr says why field's value is too long for an AMQP short string.
func shortStr(field, value string) error {
	if len(value) > MaxShortStr {
		return fmt.Errorf("%s: %d bytes, more than %d", field, len(value), MaxShortStr)
	}
	return nil
}

// CheckHeaders says why AMQP, or the broker, would refuse headers t: a value
// of a type AMQP has no word for, an int the client would truncate to 32
// bits, a name too long, a NaN or an infinity, or
// CC or BCC (sender-selected distribution) other than an array, on which
// the broker closes the channel (406). It also refuses tables and arrays
// deeper or wider than the client decodes: the broker takes them, but a
// Return of the message would close the connection.
func CheckHeaders(t amqp.Table) error {
	if err := CheckTypes(t); err != nil {
		return err
	}
	if err := CheckSentHeaders(t); err != nil {
		return err
	}
	return checkTable(t, 0)
}

// checkTable says which name in table t, found at depth, or in a table
// within it, is too long for AMQP, or which value is a NaN or an infinity,
// on which the broker closes the connection (541), or an int the client
// would truncate, or where the client's bounds are passed. It allocates nothing unless one is: every handoff
// passes here.
func checkTable(t amqp.Table, depth int) error {
	if err := bounds(depth, len(t)); err != nil {
		return err
	}
	for name, v := range t {
		if err := CheckEntry(name, v); err != nil {
			return err
		}
		if err := checkWithin(v, depth); err != nil {
			return fmt.Errorf("%s: %w", HeaderName(name), err)
		}
	}
	return nil
}

// checkWithin checks the tables and arrays within v, a value at depth.
func checkWithin(v any, depth int) error {
	switch v := v.(type) {
	case amqp.Table:
		return checkTable(v, depth+1)
	case []any:
		if err := bounds(depth+1, len(v)); err != nil {
			return err
		}
		for i, item := range v {
			if err := CheckValue(item); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
			if err := checkWithin(item, depth+1); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
		}
	}
	return nil
}

// bounds says why a table or array at depth with n entries is past what
// the client decodes.
func bounds(depth, n int) error {
	switch {
	case depth > MaxTableDepth:
		return fmt.Errorf("tables or arrays nested deeper than %d", MaxTableDepth)
	case n > MaxTableEntries:
		return fmt.Errorf("%d entries, more than the %d a client decodes", n, MaxTableEntries)
	}
	return nil
}
