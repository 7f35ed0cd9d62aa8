package guard

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
)

// Build writes version version of message m in m's envelope profile, as the
// reader reads it back: Lily's producers send what its consumers accept
// because one package does both. The publishing is persistent, its body
// application/json, its timestamp now to the second (as AMQP keeps it).
//
// A profile with ids carries messageID where it reads the id, and in the
// AMQP message_id too, where the broker's tools, an outbox's relay and a
// ledger look for it; a profile without ids (NoID) carries it nowhere. A
// CloudEvent is written in binary content mode, its source m.Profile.Source,
// which must not be empty: its readers would refuse the event.
//
// It panics on what no reader would accept, or would misread: a version
// outside 1..1,000,000, a version other than a fixed-version profile's own,
// a CloudEvent without a source or with one the reader refuses (more than
// 128 bytes, or not printable ASCII without spaces), a type as it travels
// (with a version suffix) that is empty, longer than 128 bytes or not
// printable ASCII, a message id envelope.CheckID refuses in a profile with
// ids. Generated producers never ask for one (they check the id
// and return its error); a hand-written caller learns of it at once rather
// than from a DLQ.
func Build(m envelope.Message, version int, messageID string, body []byte, now time.Time) amqp.Publishing {
	p := m.Profile
	if p.Kind == "" {
		p.Kind = envelope.Lily
	}
	if err := checkProfile(p); err != nil {
		panic("lily: NewPublishing: " + err.Error())
	}
	switch {
	case m.Type == "":
		panic("lily: NewPublishing: a message needs a type")
	case version < 1 || version > maxVersion:
		panic(fmt.Sprintf("lily: NewPublishing: version %d out of range 1..%d", version, maxVersion))
	case p.Version.Fixed != 0 && version != p.Version.Fixed:
		panic(fmt.Sprintf("lily: NewPublishing: version %d of %s, whose profile sends none and is read as version %d", version, m.Type, p.Version.Fixed))
	case p.Kind == envelope.CloudEvents && p.Source == "":
		panic("lily: NewPublishing: a CloudEvent needs a source")
	case p.Kind == envelope.CloudEvents:
		if reason := checkID("CloudEvents source", p.Source, DefaultLimits.MaxIDBytes, true); reason != "" {
			panic("lily: NewPublishing: " + reason)
		}
	}
	if !p.NoID || p.Kind == envelope.CloudEvents {
		if err := envelope.CheckID(messageID); err != nil {
			panic("lily: NewPublishing: " + strings.TrimPrefix(err.Error(), "lily: "))
		}
	}
	now = now.UTC().Truncate(time.Second)
	pub := amqp.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		Timestamp:    now,
		Headers:      amqp.Table{},
		Body:         body,
	}
	if !p.NoID {
		pub.MessageId = messageID
	}
	typ, n := m.Type, strconv.Itoa(version)
	if v := p.Version; v.Fixed == 0 && v.TypeSuffix != "" {
		typ += v.TypeSuffix + n
	}
	if reason := checkType("type", typ); reason != "" {
		panic("lily: NewPublishing: " + reason)
	}
	// The places version() reads, in its order.
	switch v := p.Version; {
	case v.Fixed != 0:
		// The producer sends none: every message is version v.Fixed.
	case v.TypeSuffix != "":
		// The type carries it.
	case v.ContentTypeParameter != "":
		pub.ContentType += "; " + v.ContentTypeParameter + "=" + n
	case v.Attribute != "":
		pub.Headers[EventPrefix+v.Attribute] = int64(version)
	case v.Header != "":
		pub.Headers[v.Header] = int64(version)
	default:
		pub.Headers[HeaderVersion] = int64(version)
	}
	if p.Kind == envelope.CloudEvents {
		// The data's content type, datacontenttype, is the AMQP content_type.
		pub.Headers[EventPrefix+"specversion"] = specVersion
		pub.Headers[EventPrefix+"id"] = messageID
		pub.Headers[EventPrefix+"source"] = p.Source
		pub.Headers[EventPrefix+"type"] = typ
		pub.Headers[EventPrefix+"time"] = now.Format(time.RFC3339)
		return pub
	}
	if p.TypeHeader != "" {
		pub.Headers[p.TypeHeader] = typ
	} else {
		pub.Type = typ
	}
	if p.IDHeader != "" {
		pub.Headers[p.IDHeader] = messageID
	}
	return pub
}
