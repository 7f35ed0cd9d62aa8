package guard

import (
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/frame"
	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/wire"
)

// Verdict is what the guard decided about one delivery.
type Verdict int

const (
	Passed    Verdict = iota
	Oversized         // body over the limit: the caller will Nack(requeue=false) so the broker dead-letters it
	Poison            // invalid envelope or metadata beyond bounds
)

// Envelope rules that Limits does not carry.
const (
	maxContentTypeBytes = envelope.MaxContentTypeBytes
	maxVersion          = envelope.MaxVersion
	// timestampSkew is how far ahead of our clock a producer's clock may run.
	timestampSkew = 24 * time.Hour
	// maxReasonBytes bounds a guard reason: it is logged and forwarded in a header.
	maxReasonBytes = 200
	// quoteBytes bounds each piece of delivery text quoted in a reason, so that
	// the fixed words around it still fit in maxReasonBytes.
	quoteBytes = 64
	// valuesPerHeader times MaxHeaders bounds the values in the header table at
	// any depth (containers and their elements). An x-death header with a dozen
	// entries holds about 100 values; the bound keeps one wide array from
	// costing more than a few full tables of work.
	valuesPerHeader = 8
)

// minTimestamp: a timestamp before it is a zeroed or garbled clock, not a send time.
var minTimestamp = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// Check checks d in this order: the x-death header's shape first, then
// body size (before anything else touches the body or the headers, so an
// oversized body is never decoded or quoted), then metadata bounds, then the
// envelope its profile describes, then Lily's own headers and the optional
// properties. An x-death that RabbitMQ's dead-lettering cannot read
// (frame.CheckXDeath) is poison whatever the body's size: no broker writes
// one, and the broker-native path an oversized delivery takes would crash
// the queue (the NACK without requeue dead-letters it, reading x-death), so
// it takes Lily's poison copy to the DLQ, body and all, instead. That check
// reads the one header alone, a map lookup for each of its entries. On Passed env is
// filled (headers and payload shared, not copied) and reason is empty;
// otherwise env is nil and reason is at most maxReasonBytes of printable
// ASCII in which delivery text appears only through sanitize.
//
// Lily's own profile accepts:
//   - message_id: required, 1..MaxIDBytes bytes of 0x21..0x7e;
//   - type: required, 1..128 bytes of printable ASCII (0x20..0x7e);
//   - content_type: required, at most 128 bytes of printable ASCII;
//     kept as its media type: cut at ';', trimmed, lower-cased, non-empty;
//   - header x-lily-version: required, an integer of any Go integer type in
//     1..1_000_000 (a string, float or bool is poison).
//
// A header-mapped profile reads the type, id and version where it says, a
// CloudEvent its attributes (see readEvent), within the same bounds. Every
// profile then takes:
//   - header x-lily-attempt: optional, 1 when absent, else an integer in
//     1..MaxAttempt (anything else was forged or broken: poison);
//   - the time (timestamp, or a CloudEvent's time): optional, else after
//     2000-01-01 and at most 24h after now;
//   - correlation_id: optional, at most MaxIDBytes bytes of 0x21..0x7e.
//
// lim must already be defaulted (all fields > 0).
func (r *Reader) Check(d *amqp.Delivery, maxBody int, lim Limits, now time.Time) (env *Envelope, verdict Verdict, reason string) {
	if err := frame.CheckXDeath(d.Headers[frame.XDeath]); err != nil {
		return poison(frame.XDeathUnreadable(err.Error()))
	}
	if len(d.Body) > maxBody {
		return nil, Oversized, "body of " + strconv.Itoa(len(d.Body)) + " bytes over the limit of " + strconv.Itoa(maxBody)
	}
	if reason := CheckHeaders(d.Headers, lim); reason != "" {
		return poison(reason)
	}
	if _, ok := d.Headers[envelope.HeaderPoisonCopy]; ok {
		return poison("the DLQ copy of a poison message (" + envelope.HeaderPoisonCopy + "): it keeps only the original's sanitized identity and body")
	}
	env, reason = r.read(d, lim)
	if reason != "" {
		return poison(reason)
	}

	attempt, present, reason := intHeader(d.Headers, HeaderAttempt, lim.MaxAttempt)
	if reason != "" {
		return poison(reason)
	}
	if !present {
		attempt = 1
	}
	if ts := env.Timestamp; env.TimestampSet {
		// RFC 3339 writes years 0 to 9999 only; near int64's ends time.Time
		// also wraps (time.Unix), comparing and printing them wrong, while
		// Unix still reads them as sent.
		if y := ts.Year(); y < 0 || y > 9999 {
			return poison("timestamp at Unix second " + strconv.FormatInt(ts.Unix(), 10) + " out of range (years 0 to 9999)")
		}
		if !ts.After(minTimestamp) {
			return poison("timestamp " + ts.UTC().Format(time.RFC3339) + " not after 2000-01-01")
		}
		if ts.After(now.Add(timestampSkew)) {
			return poison("timestamp " + ts.UTC().Format(time.RFC3339) + " more than 24h ahead of " + now.UTC().Format(time.RFC3339))
		}
	}
	if reason := checkID("correlation_id", d.CorrelationId, lim.MaxIDBytes, false); reason != "" {
		return poison(reason)
	}
	env.CorrelationID, env.Attempt, env.DeliveryCount, env.Headers = d.CorrelationId, attempt, deliveryCount(d), d.Headers
	return env, Passed, ""
}

// readProperties reads an envelope of Lily's profile or a header-mapped one:
// the type, id and version where p says, the rest from the properties.
func readProperties(d *amqp.Delivery, p *envelope.Profile, lim Limits) (*Envelope, string) {
	id := ""
	if !p.NoID {
		var what, reason string
		id, what, reason = field(d.MessageId, "message_id", d.Headers, p.IDHeader)
		if reason == "" {
			reason = checkID(what, id, lim.MaxIDBytes, true)
		}
		if reason != "" {
			return nil, reason
		}
	}
	typ, what, reason := field(d.Type, "type", d.Headers, p.TypeHeader)
	if reason == "" {
		reason = checkType(what, typ)
	}
	if reason != "" {
		return nil, reason
	}
	media, reason := mediaType(d.ContentType)
	if reason != "" {
		return nil, reason
	}
	version, base, reason := version(p, typ, d.ContentType, nil, d.Headers)
	if reason != "" {
		return nil, reason
	}
	// amqp091 has no flag for a property's presence, but its readTimestamp
	// (time.Unix) gives a timestamp a Location even at the zero instant,
	// which the zero Time of an absent one lacks.
	env := newEnvelope(Envelope{MessageID: id, Type: base, Version: version, ContentType: media, Timestamp: d.Timestamp, TimestampSet: d.Timestamp != time.Time{}})
	if p.Kind == envelope.Headers {
		// Another producer's ids are its own: with its type beside them
		// they meet neither Lily's ids (no spaces) nor a CloudEvent's
		// "<source> <id>" (one space).
		env.Foreign = &Foreign{}
		if id != "" {
			env.Foreign.Key = headersKeyPrefix + base + " " + id
		}
	}
	return env, ""
}

// field reads an envelope field from a property, or from header when a
// profile names one, which must hold a string (missing, it is ""); where
// names it for a reason.
func field(property, name string, h amqp.Table, header string) (v, where, reason string) {
	if header == "" {
		return property, name, ""
	}
	where = "header " + header
	x, ok := h[header]
	if !ok {
		return "", where, ""
	}
	s, ok := x.(string)
	if !ok {
		return "", where, where + " not a string"
	}
	return s, where, ""
}

// maxDeliveryCount bounds the x-delivery-count read: a quorum queue's counter
// is 32 bits wide.
const maxDeliveryCount = 1<<31 - 1

// deliveryCount reads the broker's x-delivery-count. A quorum queue sets it
// on a redelivery only, so on a first delivery it can only be the producer's
// and counts nothing; a value that is not a count is ignored rather than
// refused: on a classic queue the header is a producer's, and means nothing.
func deliveryCount(d *amqp.Delivery) int {
	n, ok := wire.HeaderInt(d.Headers[HeaderDeliveryCount])
	if !d.Redelivered || !ok || n < 0 || n > maxDeliveryCount {
		return 0
	}
	return int(n)
}

// poison is the one place that enforces the reason's bound, whatever built it.
func poison(reason string) (*Envelope, Verdict, string) {
	return nil, Poison, sanitize.Text(reason, maxReasonBytes)
}

// quote is delivery text as a reason may show it.
func quote(s string) string { return `"` + sanitize.Text(s, quoteBytes) + `"` }

// checkID checks message_id or correlation_id.
func checkID(field, id string, maxBytes int, required bool) string {
	switch {
	case id == "" && required:
		return field + " missing"
	case len(id) > maxBytes:
		return field + " longer than " + strconv.Itoa(maxBytes) + " bytes"
	}
	if !envelope.IDText(id) {
		return field + " " + quote(id) + " not printable ASCII without spaces"
	}
	return ""
}

// checkType checks a wire type, read from where names.
func checkType(where, t string) string {
	switch {
	case t == "":
		return where + " missing"
	case len(t) > envelope.MaxTypeBytes:
		return where + " longer than " + strconv.Itoa(envelope.MaxTypeBytes) + " bytes"
	case !envelope.TypeText(t):
		return where + " " + quote(t) + " not printable ASCII"
	}
	return ""
}

// mediaType checks content_type and returns its media type. It allocates only
// when the media type has upper-case letters.
func mediaType(ct string) (string, string) {
	switch {
	case ct == "":
		return "", "content_type missing"
	case len(ct) > maxContentTypeBytes:
		return "", "content_type longer than " + strconv.Itoa(maxContentTypeBytes) + " bytes"
	}
	for i := 0; i < len(ct); i++ {
		if !sanitize.Printable(ct[i]) {
			return "", "content_type " + quote(ct) + " not printable ASCII"
		}
	}
	media, _, _ := strings.Cut(ct, ";")
	media = strings.ToLower(strings.TrimSpace(media))
	if media == "" {
		return "", "content_type " + quote(ct) + " has no media type"
	}
	return media, ""
}

// intHeader reads an optional integer header that must lie in 1..maxValue.
func intHeader(h amqp.Table, key string, maxValue int) (n int, present bool, reason string) {
	v, ok := h[key]
	if !ok {
		return 0, false, ""
	}
	i, ok := wire.HeaderInt(v)
	if !ok {
		return 0, true, "header " + key + " not an integer"
	}
	if i < 1 || i > int64(maxValue) {
		return 0, true, "header " + key + " " + strconv.FormatInt(i, 10) + " out of range 1.." + strconv.Itoa(maxValue)
	}
	return int(i), true, ""
}

// CheckHeaders checks the header table against lim and names the first bound
// broken, or returns "": for Check, and for a handoff's copy, whose headers
// meet these bounds at its next attempt. The producer's headers are bounded
// by lim; those a message gains on its way through a retry or a re-drive
// (reserved) are bounded apart, so that a message within the bounds at its
// first attempt stays within them at every later one. It stops at the first
// bound broken, so a hostile table costs at most about
// (MaxHeaders*valuesPerHeader + reservedValues) steps and MaxDepth+1 nested
// calls.
func CheckHeaders(h amqp.Table, lim Limits) string {
	if len(h) > lim.MaxHeaders+reservedHeaders {
		return "too many headers: " + strconv.Itoa(len(h)) + " > " + strconv.Itoa(lim.MaxHeaders+reservedHeaders)
	}
	theirs := lim
	theirs.MaxHeaderBytes = reservedBytes
	producer := headerWalk{lim: lim, maxValues: lim.MaxHeaders * valuesPerHeader}
	gained := headerWalk{lim: theirs, maxValues: reservedValues}
	own := 0
	for k, v := range h {
		w := &gained
		if !reserved(k, v) {
			own++
			w = &producer
		}
		w.values++ // the header itself, a value at depth 0
		if what := w.entry(k, v, 0); what != "" {
			return "header " + quote(k) + ": " + what
		}
	}
	// One pass over the table: the counts are whole only now.
	switch {
	case own > lim.MaxHeaders:
		return "too many headers: " + strconv.Itoa(own) + " of the producer's > " + strconv.Itoa(lim.MaxHeaders)
	case producer.values > producer.maxValues:
		return "more than " + strconv.Itoa(producer.maxValues) + " values at any depth"
	case gained.values > gained.maxValues:
		return "more than " + strconv.Itoa(gained.maxValues) + " values at any depth"
	}
	return ""
}

// The bounds of the reserved headers, together: room for Lily's failure
// facts and the broker's x-death of a few dead-letterings.
const (
	reservedBytes  = 8192
	reservedValues = 256
)

// reservedHeaders is how many names reserved knows.
const reservedHeaders = 22

// reserved reports whether a header, k with value v, is one a message gains
// on its way through a retry or a re-drive: Lily's own (but the version,
// which its producer writes), the broker's records of a dead-lettering, and
// the W3C trace context a telemetry hook writes on a copy. A fixed list of
// names, so that the headers it lets past the producer's bounds are few.
//
// A copy writes most of them afresh (the attempt, the failure facts, the
// handoff id) or leaves them behind for the broker to write again (its
// records), but carries the trace context and the re-drive marks as they
// were, whoever wrote them. Those are reserved only within the sizes their
// writers give them: a larger one is the producer's, charged to its bounds
// at every attempt alike, so that it cannot fill the room a copy's failure
// facts take at the next.
func reserved(k string, v any) bool {
	switch k {
	case envelope.HeaderAttempt, envelope.HeaderFailureReason, envelope.HeaderFailureKind,
		envelope.HeaderFailureAttempt, envelope.HeaderFailureQueue, envelope.HeaderFailureTime,
		envelope.HeaderFailureType, envelope.HeaderFailureVersion, envelope.HeaderHandoffID,
		"x-death", "x-first-death-queue", "x-first-death-reason", "x-first-death-exchange",
		"x-last-death-queue", "x-last-death-reason", "x-last-death-exchange",
		HeaderDeliveryCount, "x-acquired-count":
		return true
	case "traceparent":
		return within(v, maxTraceparent)
	case "tracestate":
		return within(v, maxTracestate)
	case envelope.HeaderRedrivenFrom:
		return within(v, frame.MaxShortStr) // a DLQ's name
	case envelope.HeaderRedriven:
		_, ok := wire.HeaderInt(v)
		return ok
	}
	return false
}

// The W3C trace context's sizes: a traceparent of version 00, and the
// tracestate every platform is to propagate whole.
const (
	maxTraceparent = 55
	maxTracestate  = envelope.MaxTracestate
)

// within reports whether v is a string of at most n bytes.
func within(v any, n int) bool {
	s, ok := v.(string)
	return ok && len(s) <= n
}

// headerWalk is the running count of one CheckHeaders walk.
type headerWalk struct {
	lim       Limits
	values    int // values admitted at any depth
	maxValues int
	bytes     int // key and value bytes so far
}

// entry checks one key and its value, found in a table at depth (the header
// table is depth 0).
func (w *headerWalk) entry(k string, v any, depth int) string {
	if len(k) > w.lim.MaxHeaderKeyBytes {
		return "key longer than " + strconv.Itoa(w.lim.MaxHeaderKeyBytes) + " bytes"
	}
	if what := w.add(len(k)); what != "" {
		return what
	}
	return w.value(v, depth)
}

// value checks one value found in a table or array at depth.
func (w *headerWalk) value(v any, depth int) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return w.sized(len(v))
	case []byte:
		return w.sized(len(v))
	case bool, int8, uint8, int16, uint16, int32, uint32, int64, uint64, int, uint,
		float32, float64, amqp.Decimal, time.Time:
		return w.add(8)
	case amqp.Table:
		if what := w.nest(len(v), depth); what != "" {
			return what
		}
		for k, x := range v {
			if what := w.entry(k, x, depth+1); what != "" {
				return what
			}
		}
		return ""
	case []any:
		if what := w.nest(len(v), depth); what != "" {
			return what
		}
		for _, x := range v {
			if what := w.value(x, depth+1); what != "" {
				return what
			}
		}
		return ""
	}
	// amqp091 decodes nothing else; such a table was built in process and
	// could not be published either.
	return "value of a type AMQP cannot carry"
}

// nest admits a table or array of n values inside a container at depth, before
// any of its values is looked at.
func (w *headerWalk) nest(n, depth int) string {
	if depth+1 > w.lim.MaxDepth {
		return "nested deeper than " + strconv.Itoa(w.lim.MaxDepth)
	}
	w.values += n
	if w.values > w.maxValues {
		return "more than " + strconv.Itoa(w.maxValues) + " values at any depth"
	}
	return ""
}

// sized admits a string or byte-array value of n bytes.
func (w *headerWalk) sized(n int) string {
	if n > w.lim.MaxValueBytes {
		return "value longer than " + strconv.Itoa(w.lim.MaxValueBytes) + " bytes"
	}
	return w.add(n)
}

// add counts n more key or value bytes.
func (w *headerWalk) add(n int) string {
	w.bytes += n
	if w.bytes > w.lim.MaxHeaderBytes {
		return "more than " + strconv.Itoa(w.lim.MaxHeaderBytes) + " bytes of keys and values"
	}
	return ""
}
