package guard

import (
	"bytes"
	"reflect"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/wire"
)

// CloudEvents content modes, as the AMQP binding of CloudEvents 1.0 names
// them.
const (
	structuredMedia = "application/cloudevents+json"
	batchMedia      = "application/cloudevents-batch+json"
	// EventPrefix starts an attribute's header in binary mode; the binding
	// accepts eventPrefixOld from earlier producers.
	EventPrefix    = envelope.EventPrefix
	eventPrefixOld = envelope.EventPrefixOld
	specVersion    = "1.0"
)

// eventHeader returns attribute name of a binary-mode event, under either
// prefix; binaryEvent has refused an event whose two prefixes disagree
// first (see twinAttribute), so which one it finds does not matter.
func eventHeader(h amqp.Table, name string) (any, bool) {
	if v, ok := h[EventPrefix+name]; ok {
		return v, true
	}
	v, ok := h[eventPrefixOld+name]
	return v, ok
}

// event is what the guard reads of a CloudEvent, in either mode.
type event struct {
	specVersion, id, source, typ string
	time                         time.Time
	timeSet                      bool   // time may be set to the zero instant
	contentType                  string // the data's content type, as written
	payload                      []byte // a structured event's data
	// version is the version attribute's value, when the profile names one.
	version        any
	versionPresent bool
	// attributes are a structured event's context attributes, for handlers
	// to read as headers; nil in binary mode, where they are headers.
	attributes map[string]any
}

// twinAttribute is the reason for a binary-mode event that carries one
// attribute under both of the binding's prefixes with two values: which of
// them is the event's id, type or time, the one a handler reads through
// Header too, no one could say, and an inbox keyed on the one Lily took
// could hold two events as one, or one as two. The same value, of the same
// AMQP type, under both is one attribute (a producer may write both for
// older readers). Of several, the reason names the least by name, so it
// does not hang on the map's order. One pass over the headers, which
// CheckHeaders has bounded, and a map lookup for each under eventPrefixOld:
// the key is built on the stack (a twin's key is as long as the key
// CheckHeaders let through), so the pass allocates nothing.
func twinAttribute(h amqp.Table) string {
	var twin string
	var buf [envelope.MaxHeaderKeyBytes]byte
	for k, old := range h {
		name, ok := strings.CutPrefix(k, eventPrefixOld)
		if !ok || twin != "" && name >= twin {
			continue
		}
		key := append(append(buf[:0], EventPrefix...), name...)
		if v, ok := h[string(key)]; ok && !sameValue(v, old) {
			twin = name
		}
	}
	if twin == "" {
		return ""
	}
	return "CloudEvents attribute " + quote(twin) + " differs between its " + EventPrefix + " and " + eventPrefixOld + " headers"
}

// sameValue reports whether two header values are the same value of the
// same AMQP type. It never compares with == what == would panic on.
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case nil, bool, int8, uint8, int16, uint16, int32, uint32, int64, float32, float64, string, amqp.Decimal:
		return a == b
	case []byte:
		y, ok := b.([]byte)
		return ok && bytes.Equal(x, y)
	case time.Time:
		y, ok := b.(time.Time)
		return ok && x.Equal(y)
	}
	// A table or an array, which CheckHeaders has bounded; only a delivery
	// that carries one under both prefixes gets here.
	return reflect.DeepEqual(a, b)
}

// binaryEvent reads the attributes of a binary-mode event from d's headers,
// under either prefix but not two values under both (twinAttribute); its
// data is the body, which must not be empty.
func binaryEvent(d *amqp.Delivery, p *envelope.Profile) (event, string) {
	e := event{contentType: d.ContentType}
	if reason := twinAttribute(d.Headers); reason != "" {
		return e, reason
	}
	for _, a := range []struct {
		name     string
		to       *string
		required bool
	}{{"specversion", &e.specVersion, true}, {"id", &e.id, true}, {"source", &e.source, true}, {"type", &e.typ, true}} {
		v, ok := eventHeader(d.Headers, a.name)
		if !ok {
			return e, "CloudEvents header " + EventPrefix + a.name + " missing"
		}
		s, ok := v.(string)
		if !ok {
			return e, "CloudEvents header " + EventPrefix + a.name + " not a string"
		}
		*a.to = s
	}
	if len(d.Body) == 0 {
		return e, "CloudEvent has no data: its body is empty"
	}
	if v, ok := eventHeader(d.Headers, "time"); ok {
		switch t := v.(type) {
		case time.Time:
			e.time = t
		case string:
			parsed, ok := wire.ParseTime(t)
			if !ok {
				return e, "CloudEvents time " + quote(t) + " not an RFC 3339 time"
			}
			e.time = parsed
		default:
			return e, "CloudEvents time neither a timestamp nor a string"
		}
		e.timeSet = true
	}
	if a := p.Version.Attribute; a != "" {
		e.version, e.versionPresent = eventHeader(d.Headers, a)
	}
	return e, ""
}

// The members of a structured event the guard reads, by index.
const (
	memberSpecVersion = iota
	memberID
	memberSource
	memberType
	memberTime
	memberContentType
	memberSchema
	memberSubject
	memberData
	memberDataBase64
	memberVersion // the profile's version attribute, when it names one
)

var eventMembers = []string{"specversion", "id", "source", "type", "time", "datacontenttype", "dataschema", "subject", "data", "data_base64"}

// newEventFields returns the members of a structured event to read: its
// context attributes and data, and the version attribute when there is one.
func newEventFields(versionAttribute string) *wire.JSONFields {
	fields := make([]wire.JSONField, 0, len(eventMembers)+1)
	for i, name := range eventMembers {
		fields = append(fields, wire.JSONField{Name: name, Required: i <= memberType})
	}
	if versionAttribute != "" {
		fields = append(fields, wire.JSONField{Name: versionAttribute})
	}
	return wire.NewJSONFields(fields...)
}

// structuredEvent reads a structured-mode event from d's body: its context
// attributes, each at most lim.MaxValueBytes as a header value would be, and
// its data member, which must not be missing or null, as the payload, not
// copied.
func (r *Reader) structuredEvent(d *amqp.Delivery, lim Limits) (event, string) {
	e := event{contentType: "application/json", attributes: make(map[string]any, 8)}
	jr := wire.NewJSONReader(d.Body)
	o := jr.Object(r.eventFields)
	for o.Next(jr) {
		i := o.Member()
		var err error
		switch {
		case i == memberData:
			e.payload, err = jr.Raw()
		case i == memberDataBase64:
			return e, "CloudEvent carries data_base64: Lily reads JSON data only"
		case i == memberVersion:
			var raw []byte
			if raw, err = jr.Raw(); err == nil {
				if len(raw) > lim.MaxValueBytes {
					return e, memberTooLong(r.cloudEvents.profile.Version.Attribute, lim)
				}
				e.version, e.versionPresent = versionMember(raw), true
				e.attributes[EventPrefix+r.cloudEvents.profile.Version.Attribute] = e.version
			}
		default:
			var s string
			s, err = jr.String()
			if err == nil && len(s) > lim.MaxValueBytes {
				return e, memberTooLong(eventMembers[i], lim)
			}
			if err == nil {
				e.set(i, s)
			}
		}
		if err != nil {
			return e, "CloudEvent member " + eventMemberName(i) + ": " + eventProblem(err)
		}
	}
	if err := jr.End(o.End()); err != nil {
		return e, "CloudEvent not readable: " + eventProblem(err)
	}
	// CloudEvents makes data optional, and a null member is an absent one;
	// every payload Lily decodes is JSON, so an event without data has
	// none to hand an extractor.
	if e.payload == nil {
		return e, "CloudEvent has no data: member data missing or null"
	}
	// Present and empty is not absent: binary mode refuses it too.
	if v, ok := e.attributes[EventPrefix+eventMembers[memberTime]]; ok {
		text, _ := v.(string)
		t, ok := wire.ParseTime(text)
		if !ok {
			return e, "CloudEvents time " + quote(text) + " not an RFC 3339 time"
		}
		e.time, e.timeSet = t, true
	}
	return e, ""
}

// eventProblem words an error of the reader of a structured event: a
// wire.FieldError without a path says "payload: " before its problem, but
// the event is not the payload, whose data it has not read.
func eventProblem(err error) string {
	if fe, ok := err.(*wire.FieldError); ok && fe.Path == "" {
		return fe.Problem
	}
	return err.Error()
}

// memberTooLong is the reason for a structured event's attribute past the
// bound of a header value.
func memberTooLong(name string, lim Limits) string {
	return "CloudEvent member " + name + " longer than " + strconv.Itoa(lim.MaxValueBytes) + " bytes"
}

// set keeps a string attribute of a structured event.
func (e *event) set(member int, s string) {
	e.attributes[EventPrefix+eventMembers[member]] = s
	switch member {
	case memberSpecVersion:
		e.specVersion = s
	case memberID:
		e.id = s
	case memberSource:
		e.source = s
	case memberType:
		e.typ = s
	case memberContentType:
		e.contentType = s
	}
}

// versionMember is a version attribute's JSON value as a header would hold
// it: a string's text, an integer, or something that is not a version.
func versionMember(raw []byte) any {
	r := wire.NewJSONReader(raw)
	if raw[0] == '"' {
		if s, err := r.String(); err == nil {
			return s
		}
	}
	if n, err := r.Int(); err == nil {
		return n
	}
	return false
}

func eventMemberName(i int) string {
	if i < len(eventMembers) {
		return eventMembers[i]
	}
	return "version attribute"
}

// readEvent reads a CloudEvent in either mode and checks what every event
// needs: specversion 1.0, an id and a source that make the inbox's key.
func (r *Reader) readEvent(d *amqp.Delivery, p *envelope.Profile, structured bool, lim Limits) (*Envelope, string) {
	var e event
	var reason string
	if structured {
		e, reason = r.structuredEvent(d, lim)
	} else {
		e, reason = binaryEvent(d, p)
	}
	if reason != "" {
		return nil, reason
	}
	if e.specVersion != specVersion {
		return nil, "CloudEvents specversion " + quote(e.specVersion) + " not supported (" + specVersion + ")"
	}
	if reason := checkID("CloudEvents id", e.id, lim.MaxIDBytes, true); reason != "" {
		return nil, reason
	}
	if reason := checkID("CloudEvents source", e.source, lim.MaxIDBytes, true); reason != "" {
		return nil, reason
	}
	if reason := checkType("CloudEvents type", e.typ); reason != "" {
		return nil, reason
	}
	media, reason := mediaType(e.contentType)
	if reason != "" {
		return nil, reason
	}
	version, typ, reason := version(p, e.typ, e.contentType, func() (any, bool) { return e.version, e.versionPresent }, d.Headers)
	if reason != "" {
		return nil, reason
	}
	return newEnvelope(Envelope{
		MessageID: e.id, Type: typ, Version: version, ContentType: media, Timestamp: e.time, TimestampSet: e.timeSet,
		Foreign: &Foreign{Key: e.source + " " + e.id, Structured: structured, Data: e.payload, Attributes: e.attributes},
	}), ""
}

// Header returns one header of the delivery, where a CloudEvent's
// attributes read under either of the binding's prefixes, in either content
// mode: a structured event's from its body (before any header of that name,
// which is not the event's), a binary one's from either prefix's header.
func (env *Envelope) Header(key string) (any, bool) {
	name, event := strings.CutPrefix(key, EventPrefix)
	if !event {
		name, event = strings.CutPrefix(key, eventPrefixOld)
	}
	switch {
	case !event:
		v, ok := env.Headers[key]
		return v, ok
	case env.Foreign != nil && env.Foreign.Structured:
		v, ok := env.Foreign.Attributes[EventPrefix+name]
		return v, ok
	}
	return eventHeader(env.Headers, name)
}
