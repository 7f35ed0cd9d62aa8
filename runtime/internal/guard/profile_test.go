package guard

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
)

// The profiles of the tests: a CloudEvents emitter that puts the version at
// the end of its types, a Spring AMQP service, and Lily's own producers.
var (
	eventsProfile = envelope.Profile{Kind: envelope.CloudEvents, Version: envelope.Version{TypeSuffix: ".v"}}
	springProfile = envelope.Profile{Kind: envelope.Headers, TypeHeader: "__TypeId__", Version: envelope.Version{Fixed: 1}}
)

func reader(t testing.TB, msgs ...envelope.Message) *Reader {
	t.Helper()
	r, err := NewReader(msgs)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// mixed reads the three producers' messages from one queue.
func mixed(t testing.TB) *Reader {
	return reader(t,
		envelope.Message{Type: "com.acme.payment.authorized", Profile: eventsProfile},
		envelope.Message{Type: "com.acme.orders.OrderShipped", Profile: springProfile},
		envelope.Message{Type: "orders.created"},
	)
}

// binaryEventDelivery is a CloudEvent in binary content mode, as the AMQP binding
// has an emitter publish it.
func binaryEventDelivery() *amqp.Delivery {
	return &amqp.Delivery{
		ContentType: "application/json",
		Headers: amqp.Table{
			"cloudEvents_specversion": "1.0",
			"cloudEvents_id":          "evt-1",
			"cloudEvents_source":      "https://payments.acme.example/api",
			"cloudEvents_type":        "com.acme.payment.authorized.v2",
			"cloudEvents_time":        "2026-03-01T11:58:00Z",
			"cloudEvents_subject":     "order-42",
		},
		Body: []byte(`{"payment_id":"p-1"}`),
	}
}

// structuredEventDelivery is the same event in structured content mode.
func structuredEventDelivery() *amqp.Delivery {
	return &amqp.Delivery{
		ContentType: "application/cloudevents+json; charset=utf-8",
		Body: []byte(`{"specversion":"1.0","id":"evt-1","source":"https://payments.acme.example/api",` +
			`"type":"com.acme.payment.authorized.v2","time":"2026-03-01T11:58:00Z","subject":"order-42",` +
			`"datacontenttype":"application/json","traceparent":"00-abc","data":{"payment_id":"p-1"}}`),
	}
}

// springDelivery is what Spring AMQP's Jackson converter publishes: the Java
// class in __TypeId__, no message_id unless it is asked for one.
func springDelivery() *amqp.Delivery {
	return &amqp.Delivery{
		ContentType:     "application/json",
		ContentEncoding: "UTF-8",
		MessageId:       "6f1c2a7e-0b2d-4f1e-9a3c-1d2e3f4a5b6c",
		Headers:         amqp.Table{"__TypeId__": "com.acme.orders.OrderShipped"},
		Body:            []byte(`{"orderId":"42"}`),
	}
}

func TestProfilesRead(t *testing.T) {
	r := mixed(t)
	check := func(t *testing.T, d *amqp.Delivery) *Envelope {
		t.Helper()
		env, verdict, reason := r.Check(d, guardMaxBody, DefaultLimits, guardNow)
		if verdict != Passed {
			t.Fatalf("verdict %d: %s", verdict, reason)
		}
		return env
	}
	source := "https://payments.acme.example/api"
	for name, d := range map[string]*amqp.Delivery{"binary": binaryEventDelivery(), "structured": structuredEventDelivery()} {
		t.Run("CloudEvent "+name, func(t *testing.T) {
			env := check(t, d)
			if env.Type != "com.acme.payment.authorized" || env.Version != 2 || env.MessageID != "evt-1" ||
				env.Key() != source+" evt-1" || env.ContentType != "application/json" || string(env.Payload(d.Body)) != `{"payment_id":"p-1"}` ||
				!env.Timestamp.Equal(time.Date(2026, 3, 1, 11, 58, 0, 0, time.UTC)) || env.Attempt != 1 {
				t.Errorf("envelope %+v", env)
			}
			// Either mode, a handler reads the attributes as headers.
			for key, want := range map[string]string{"cloudEvents_subject": "order-42", "cloudEvents_source": source, "cloudEvents_id": "evt-1"} {
				if v, ok := env.Header(key); !ok || v != want {
					t.Errorf("Header(%s) = %v, %v; want %s", key, v, ok, want)
				}
			}
		})
	}
	t.Run("CloudEvent with the binding's old prefix", func(t *testing.T) {
		d := binaryEventDelivery()
		for k, v := range d.Headers {
			delete(d.Headers, k)
			d.Headers["cloudEvents:"+strings.TrimPrefix(k, "cloudEvents_")] = v
		}
		env := check(t, d)
		if env.Key() != source+" evt-1" || env.Version != 2 {
			t.Errorf("envelope %+v", env)
		}
		for _, key := range []string{"cloudEvents_subject", "cloudEvents:subject"} {
			if v, ok := env.Header(key); !ok || v != "order-42" {
				t.Errorf("Header(%s) = %v, %v", key, v, ok)
			}
		}
	})
	t.Run("a structured event's attribute, not a stray header", func(t *testing.T) {
		d := structuredEventDelivery()
		d.Headers = amqp.Table{"cloudEvents_id": "forged", "cloudEvents:id": "forged", "cloudEvents:subject": "forged"}
		env := check(t, d)
		for key, want := range map[string]string{"cloudEvents_id": "evt-1", "cloudEvents:id": "evt-1", "cloudEvents:subject": "order-42"} {
			if v, _ := env.Header(key); v != want {
				t.Errorf("Header(%s) = %v; want %s", key, v, want)
			}
		}
	})
	t.Run("Spring", func(t *testing.T) {
		env := check(t, springDelivery())
		// Another producer's id is keyed with its type: it meets no one
		// else's.
		if env.Type != "com.acme.orders.OrderShipped" || env.Version != 1 || env.MessageID != "6f1c2a7e-0b2d-4f1e-9a3c-1d2e3f4a5b6c" ||
			env.Key() != "headers com.acme.orders.OrderShipped 6f1c2a7e-0b2d-4f1e-9a3c-1d2e3f4a5b6c" {
			t.Errorf("envelope %+v", env)
		}
	})
	t.Run("Lily", func(t *testing.T) {
		env := check(t, okDelivery())
		if env.Type != "orders.created" || env.Version != 2 || env.Key() != okDelivery().MessageId {
			t.Errorf("envelope %+v", env)
		}
	})
	t.Run("a retry copy", func(t *testing.T) {
		d := structuredEventDelivery()
		d.Headers = amqp.Table{HeaderAttempt: int32(3), HeaderFailureReason: "handler failed"}
		if env := check(t, d); env.Attempt != 3 {
			t.Errorf("attempt %d", env.Attempt)
		}
	})
}

func TestVersionSources(t *testing.T) {
	withVersion := func(v envelope.Version) *Reader {
		return reader(t, envelope.Message{Type: "t", Profile: envelope.Profile{Kind: envelope.Headers, Version: v}})
	}
	delivery := func(typ, ct string, h amqp.Table) *amqp.Delivery {
		return &amqp.Delivery{MessageId: "m-1", Type: typ, ContentType: ct, Headers: h, Body: []byte(`{}`)}
	}
	withAttribute := reader(t, envelope.Message{Type: "t", Profile: envelope.Profile{Kind: envelope.CloudEvents, Version: envelope.Version{Attribute: "dataversion"}}})
	// event is a binary event with headers h, or with members a structured
	// one whose body ends in them.
	event := func(h amqp.Table, members string) *amqp.Delivery {
		if members != "" {
			return &amqp.Delivery{ContentType: "application/cloudevents+json",
				Body: []byte(`{"specversion":"1.0","id":"e","source":"s","type":"t","data":{}` + members + `}`)}
		}
		headers := amqp.Table{"cloudEvents_specversion": "1.0", "cloudEvents_id": "e", "cloudEvents_source": "s", "cloudEvents_type": "t"}
		for k, v := range h {
			headers[k] = v
		}
		return &amqp.Delivery{ContentType: "application/json", Headers: headers, Body: []byte(`{}`)}
	}
	tests := []struct {
		name    string
		r       *Reader
		d       *amqp.Delivery
		version int
		typ     string
		reason  string
	}{
		{"header integer", withVersion(envelope.Version{Header: "version"}), delivery("t", "application/json", amqp.Table{"version": int16(3)}), 3, "t", ""},
		{"header text", withVersion(envelope.Version{Header: "version"}), delivery("t", "application/json", amqp.Table{"version": "12"}), 12, "t", ""},
		{"header missing", withVersion(envelope.Version{Header: "version"}), delivery("t", "application/json", nil), 0, "", "header version missing"},
		{"header not digits", withVersion(envelope.Version{Header: "version"}), delivery("t", "application/json", amqp.Table{"version": "v2"}), 0, "", `header version "v2" not a version`},
		{"header zero", withVersion(envelope.Version{Header: "version"}), delivery("t", "application/json", amqp.Table{"version": "0"}), 0, "", "out of range"},
		{"header too large", withVersion(envelope.Version{Header: "version"}), delivery("t", "application/json", amqp.Table{"version": int64(1) << 40}), 0, "", "out of range"},
		{"content type parameter", withVersion(envelope.Version{ContentTypeParameter: "version"}), delivery("t", "application/json; charset=utf-8; Version=\"2\"", nil), 2, "t", ""},
		{"content type parameter missing", withVersion(envelope.Version{ContentTypeParameter: "version"}), delivery("t", "application/json", nil), 0, "", "content type parameter version missing"},
		{"content type parameter after a quoted ';'", withVersion(envelope.Version{ContentTypeParameter: "version"}), delivery("t", `application/json; x="a;version=3"; version=2`, nil), 2, "t", ""},
		{"content type parameter given twice", withVersion(envelope.Version{ContentTypeParameter: "version"}), delivery("t", "application/json; version=1; VERSION=2", nil), 0, "", "content type parameter version given twice"},
		{"type suffix", withVersion(envelope.Version{TypeSuffix: ".v"}), delivery("t.v7", "application/json", nil), 7, "t", ""},
		{"type suffix missing", withVersion(envelope.Version{TypeSuffix: ".v"}), delivery("t", "application/json", nil), 0, "", `does not end in ".v"`},
		{"type suffix without digits", withVersion(envelope.Version{TypeSuffix: ".v"}), delivery("t.vx", "application/json", nil), 0, "", `does not end in ".v"`},
		{"fixed", withVersion(envelope.Version{Fixed: 4}), delivery("t", "application/json", nil), 4, "t", ""},
		{"binary attribute", withAttribute, event(amqp.Table{"cloudEvents_dataversion": "3"}, ""), 3, "t", ""},
		{"binary attribute missing", withAttribute, event(nil, ""), 0, "", "attribute dataversion missing"},
		{"structured attribute", withAttribute, event(nil, `,"dataversion":2`), 2, "t", ""},
		{"structured attribute text", withAttribute, event(nil, `,"dataversion":"5"`), 5, "t", ""},
		{"structured attribute an object", withAttribute, event(nil, `,"dataversion":{"v":1}`), 0, "", "attribute dataversion not an integer"},
		{"structured attribute broken", withAttribute, event(nil, `,"dataversion":`), 0, "", "CloudEvent member version attribute"},
		{"structured attribute an unfinished array", withAttribute, event(nil, `,"dataversion":[1,`), 0, "", "CloudEvent member version attribute"},
		{"structured attribute past a header value's bound", withAttribute, event(nil, `,"dataversion":"`+strings.Repeat("1", 4097)+`"`), 0, "", "CloudEvent member dataversion longer than 4096 bytes"},
		{"Lily's header keeps refusing text", withVersion(envelope.Version{}), delivery("t", "application/json", amqp.Table{HeaderVersion: "2"}), 0, "", "header x-lily-version not an integer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, verdict, reason := tt.r.Check(tt.d, guardMaxBody, DefaultLimits, guardNow)
			checkReason(t, reason)
			if tt.reason != "" {
				if verdict != Poison || !strings.Contains(reason, tt.reason) {
					t.Fatalf("verdict %d, reason %q; want poison with %q", verdict, reason, tt.reason)
				}
				return
			}
			if verdict != Passed || env.Version != tt.version || env.Type != tt.typ {
				t.Fatalf("verdict %d (%q), envelope %+v; want version %d of %q", verdict, reason, env, tt.version, tt.typ)
			}
			// In either content mode a handler reads the version attribute
			// as a header, as it came.
			if tt.r == withAttribute {
				if v, ok := env.Header("cloudEvents_dataversion"); !ok || fmt.Sprint(v) != strconv.Itoa(tt.version) {
					t.Errorf(`Header("cloudEvents_dataversion") = %v, %v`, v, ok)
				}
			}
		})
	}
}

// Every foreign envelope that lacks a field or carries a malformed one is
// poison with a bounded reason that says which.
func TestForeignEnvelopesPoison(t *testing.T) {
	r := mixed(t)
	binary := func(mutate func(h amqp.Table)) *amqp.Delivery {
		d := binaryEventDelivery()
		mutate(d.Headers)
		return d
	}
	structured := func(body string) *amqp.Delivery {
		d := structuredEventDelivery()
		d.Body = []byte(body)
		return d
	}
	tests := []struct {
		name   string
		d      *amqp.Delivery
		reason string
	}{
		{"binary without id", binary(func(h amqp.Table) { delete(h, "cloudEvents_id") }), "CloudEvents header cloudEvents_id missing"},
		{"binary without source", binary(func(h amqp.Table) { delete(h, "cloudEvents_source") }), "cloudEvents_source missing"},
		{"binary id not a string", binary(func(h amqp.Table) { h["cloudEvents_id"] = int32(7) }), "cloudEvents_id not a string"},
		{"binary spec version 0.3", binary(func(h amqp.Table) { h["cloudEvents_specversion"] = "0.3" }), `specversion "0.3" not supported`},
		{"binary id with a control", binary(func(h amqp.Table) { h["cloudEvents_id"] = "evt\x1b[2J" }), "CloudEvents id"},
		{"binary time garbled", binary(func(h amqp.Table) { h["cloudEvents_time"] = "yesterday" }), `time "yesterday" not an RFC 3339 time`},
		{"binary time far ahead", binary(func(h amqp.Table) { h["cloudEvents_time"] = "2027-01-01T00:00:00Z" }), "more than 24h ahead"},
		// A time present at the zero instant is a time, not an absent one.
		{"binary time at the zero instant", binary(func(h amqp.Table) { h["cloudEvents_time"] = "0001-01-01T00:00:00Z" }), "timestamp 0001-01-01T00:00:00Z not after 2000-01-01"},
		{"binary time at the zero instant from year 0", binary(func(h amqp.Table) { h["cloudEvents_time"] = "0000-12-31T23:00:00-01:00" }), "timestamp 0001-01-01T00:00:00Z not after 2000-01-01"},
		{"binary time a timestamp at the zero instant", binary(func(h amqp.Table) { h["cloudEvents_time"] = time.Unix(-62135596800, 0) }), "timestamp 0001-01-01T00:00:00Z not after 2000-01-01"},
		{"binary type without version", binary(func(h amqp.Table) { h["cloudEvents_type"] = "com.acme.payment.authorized" }), `does not end in ".v"`},
		{"structured without source", structured(`{"specversion":"1.0","id":"e","type":"t.v1","data":{}}`), "CloudEvent not readable"},
		// The event's problem, not the payload's: the data is not read yet.
		{"structured id a number", structured(`{"specversion":"1.0","id":7,"source":"s","type":"t.v1","data":{}}`), "CloudEvent member id: unexpected JSON number"},
		{"structured specversion a number", structured(`{"specversion":1,"id":"e","source":"s","type":"t.v1","data":{}}`), "CloudEvent member specversion: unexpected JSON number"},
		{"structured data_base64", structured(`{"specversion":"1.0","id":"e","source":"s","type":"t.v1","data_base64":"e30="}`), "data_base64"},
		{"structured broken JSON", structured(`{"specversion":"1.0","id":"e",`), "CloudEvent not readable: invalid JSON at byte 30: unexpected end of JSON input"},
		{"structured repeated member", structured(`{"specversion":"1.0","id":"e","id":"f","source":"s","type":"t.v1"}`), "repeated"},
		{"structured not an object", structured(`["specversion"]`), "CloudEvent not readable: unexpected JSON array"},
		{"structured subject past a header value's bound", structured(`{"specversion":"1.0","id":"e","source":"s","type":"t.v1","subject":"` + strings.Repeat("s", 4097) + `","data":{}}`),
			"CloudEvent member subject longer than 4096 bytes"},
		{"structured time at the zero instant", structured(`{"specversion":"1.0","id":"e","source":"s","type":"t.v1","time":"0001-01-01T00:00:00Z","data":{}}`), "timestamp 0001-01-01T00:00:00Z not after 2000-01-01"},
		{"structured time at the zero instant from year 0", structured(`{"specversion":"1.0","id":"e","source":"s","type":"t.v1","time":"0000-12-31T23:00:00-01:00","data":{}}`), "timestamp 0001-01-01T00:00:00Z not after 2000-01-01"},
		{"structured time empty", structured(`{"specversion":"1.0","id":"e","source":"s","type":"t.v1","time":"","data":{}}`), `time "" not an RFC 3339 time`},
		{"structured time with a fraction past it", structured(`{"specversion":"1.0","id":"e","source":"s","type":"t.v1","time":"2026-03-01T11:58:00.` + strings.Repeat("0", 5000) + `Z","data":{}}`),
			"CloudEvent member time longer than 4096 bytes"},
		// CloudEvents makes data optional; Lily's extractors read a JSON
		// payload, so an event without one is poison, before any scope.
		{"structured without data", structured(`{"specversion":"1.0","id":"nd","source":"s","type":"com.acme.payment.authorized.v1"}`), "CloudEvent has no data: member data missing or null"},
		{"structured data null", structured(`{"specversion":"1.0","id":"nd","source":"s","type":"com.acme.payment.authorized.v1","data": null}`), "CloudEvent has no data: member data missing or null"},
		{"binary with an empty body", &amqp.Delivery{ContentType: "application/json", Headers: binaryEventDelivery().Headers}, "CloudEvent has no data: its body is empty"},
		{"batch", &amqp.Delivery{ContentType: "application/cloudevents-batch+json", Body: []byte(`[]`)}, "CloudEvents batch mode (application/cloudevents-batch+json) is not supported"},
		{"Spring type not a string", &amqp.Delivery{MessageId: "m", ContentType: "application/json", Headers: amqp.Table{"__TypeId__": int32(1)}}, "header __TypeId__ not a string"},
		{"Spring without message_id", &amqp.Delivery{ContentType: "application/json", Headers: amqp.Table{"__TypeId__": "T"}}, "message_id missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, verdict, reason := r.Check(tt.d, guardMaxBody, DefaultLimits, guardNow)
			checkReason(t, reason)
			if verdict != Poison || env != nil || !strings.Contains(reason, tt.reason) {
				t.Fatalf("verdict %d, envelope %v, reason %q; want poison with %q", verdict, env, reason, tt.reason)
			}
		})
	}
}

// A queue of foreign producers alone refuses what none of them sends, and
// says what it looked for.
func TestNoProfileFits(t *testing.T) {
	r := reader(t, envelope.Message{Type: "a", Profile: eventsProfile}, envelope.Message{Type: "b", Profile: springProfile})
	_, verdict, reason := r.Check(okDelivery(), guardMaxBody, DefaultLimits, guardNow)
	want := "no envelope profile of the queue fits: want a CloudEvents specversion header or content type application/cloudevents+json or header __TypeId__"
	if verdict != Poison || reason != want {
		t.Fatalf("verdict %d, reason %q; want %q", verdict, reason, want)
	}
}

// A Spring message that carries its type in the type property, not in
// __TypeId__, is refused for the header it lacks, whatever other profiles
// the queue reads: not for the x-lily-version that Lily's profile, the only
// one whose marks it bears, missed. A delivery that bears another
// profile's marks keeps the first profile's reason.
func TestTypeInTheTypePropertyOfAHeaderProfile(t *testing.T) {
	spring := springDelivery()
	delete(spring.Headers, "__TypeId__")
	spring.Type = "com.acme.orders.OrderShipped"
	const want = `header __TypeId__ missing: the type property names "com.acme.orders.OrderShipped", a message read from that header`
	for name, r := range map[string]*Reader{
		"mixed":           mixed(t),
		"Spring and Lily": reader(t, envelope.Message{Type: "com.acme.orders.OrderShipped", Profile: springProfile}, envelope.Message{Type: "orders.created"}),
		"Spring alone":    reader(t, envelope.Message{Type: "com.acme.orders.OrderShipped", Profile: springProfile}),
	} {
		_, verdict, reason := r.Check(spring, guardMaxBody, DefaultLimits, guardNow)
		if verdict != Poison || reason != want {
			t.Errorf("%s: verdict %d, reason %q; want %q", name, verdict, reason, want)
		}
	}
	// With Lily's version header it reads as Lily's, of a type Lily's
	// profile does not carry: the header it lacks says more.
	spring.Headers[HeaderVersion] = int32(1)
	if _, verdict, reason := mixed(t).Check(spring, guardMaxBody, DefaultLimits, guardNow); verdict != Poison || reason != want {
		t.Errorf("with x-lily-version: verdict %d, reason %q; want %q", verdict, reason, want)
	}
	marked := binaryEventDelivery()
	marked.Body, marked.Type = nil, spring.Type
	if _, verdict, reason := mixed(t).Check(marked, guardMaxBody, DefaultLimits, guardNow); verdict != Poison || reason != "CloudEvent has no data: its body is empty" {
		t.Errorf("a CloudEvent: verdict %d, reason %q", verdict, reason)
	}
}

// A delivery read by a profile that does not carry its type has been
// misread: a Lily message that merely has a header named like another
// producer's type header is read by the type property, and a foreign one
// that names a Lily message's type is poison, not that message.
func TestProfileMustCarryTheType(t *testing.T) {
	r := reader(t,
		envelope.Message{Type: "payment", Inbox: envelope.InboxRequired},
		envelope.Message{Type: "audit.noted", Profile: envelope.Profile{Kind: envelope.Headers, TypeHeader: "event", NoID: true, Version: envelope.Version{Fixed: 1}}},
	)
	lily := &amqp.Delivery{MessageId: "m-1", Type: "payment", ContentType: "application/json",
		Headers: amqp.Table{HeaderVersion: int32(1), "event": "checkout"}, Body: []byte(`{}`)}
	env, verdict, reason := r.Check(lily, guardMaxBody, DefaultLimits, guardNow)
	if verdict != Passed || env.Type != "payment" || env.Key() != "m-1" {
		t.Fatalf("a Lily message with an event header: verdict %d (%q), envelope %+v", verdict, reason, env)
	}
	forged := &amqp.Delivery{ContentType: "application/json", Headers: amqp.Table{"event": "payment"}, Body: []byte(`{}`)}
	_, verdict, reason = r.Check(forged, guardMaxBody, DefaultLimits, guardNow)
	if verdict != Poison || !strings.Contains(reason, `type "payment" read by a profile that does not carry it`) {
		t.Fatalf("a foreign message naming a Lily type: verdict %d, reason %q", verdict, reason)
	}
	// A type of no message, in a profile's marks: dispatch calls it
	// unsupported.
	other := &amqp.Delivery{ContentType: "application/json", Headers: amqp.Table{"event": "audit.erased"}, Body: []byte(`{}`)}
	if env, verdict, reason := r.Check(other, guardMaxBody, DefaultLimits, guardNow); verdict != Passed || env.Type != "audit.erased" {
		t.Fatalf("an unknown type: verdict %d (%q), envelope %+v", verdict, reason, env)
	}
}

// A header-mapped profile without ids reads messages that have none.
func TestProfileWithoutID(t *testing.T) {
	r := reader(t, envelope.Message{Type: "T", Profile: envelope.Profile{Kind: envelope.Headers, TypeHeader: "__TypeId__", NoID: true, Version: envelope.Version{Fixed: 1}}})
	env, verdict, reason := r.Check(&amqp.Delivery{ContentType: "application/json", Headers: amqp.Table{"__TypeId__": "T"}}, guardMaxBody, DefaultLimits, guardNow)
	if verdict != Passed || env.MessageID != "" || env.Key() != "" {
		t.Fatalf("verdict %d (%q), envelope %+v", verdict, reason, env)
	}
}

func TestNewReaderRefuses(t *testing.T) {
	other := envelope.Profile{Kind: envelope.CloudEvents, Version: envelope.Version{Attribute: "dataversion"}}
	tests := []struct {
		name string
		msgs []envelope.Message
		want string
	}{
		{"two CloudEvents profiles", []envelope.Message{{Type: "a", Profile: eventsProfile}, {Type: "b", Profile: other}}, "both are CloudEvents"},
		{"two readers of the type property", []envelope.Message{{Type: "a"}, {Type: "b", Profile: envelope.Profile{Kind: envelope.Headers, Version: envelope.Version{Fixed: 1}}}}, "both read the type property"},
		{"two readers of one type header", []envelope.Message{{Type: "a", Profile: springProfile}, {Type: "b", Profile: envelope.Profile{Kind: envelope.Headers, TypeHeader: "__TypeId__"}}}, "read the type from header __TypeId__"},
		{"two version sources", []envelope.Message{{Type: "a", Profile: envelope.Profile{Kind: envelope.Headers, Version: envelope.Version{Header: "v", Fixed: 1}}}}, "more than one place"},
		{"a CloudEvent with a type header", []envelope.Message{{Type: "a", Profile: envelope.Profile{Kind: envelope.CloudEvents, TypeHeader: "t"}}}, "reads its type, id and version from the event's attributes"},
		{"an attribute outside CloudEvents", []envelope.Message{{Type: "a", Profile: envelope.Profile{Kind: envelope.Headers, Version: envelope.Version{Attribute: "v"}}}}, "needs a CloudEvents profile"},
		{"an unknown kind", []envelope.Message{{Type: "a", Profile: envelope.Profile{Kind: "avro"}}}, `unknown envelope kind "avro"`},
		{"a version attribute that is the event's own", []envelope.Message{{Type: "a", Profile: envelope.Profile{Kind: envelope.CloudEvents, Version: envelope.Version{Attribute: "subject"}}}}, `version attribute "subject" is a CloudEvent's own`},
		{"a source outside CloudEvents", []envelope.Message{{Type: "a", Profile: envelope.Profile{Kind: envelope.Headers, Source: "s"}}}, "a source needs a CloudEvents profile"},
		{"a version header of Lily's", []envelope.Message{{Type: "a", Profile: envelope.Profile{Kind: envelope.Headers, Version: envelope.Version{Header: "x-lily-attempt"}}}}, "header x-lily-attempt is not one a copy carries"},
		{"a type header of the broker's", []envelope.Message{{Type: "a", Profile: envelope.Profile{Kind: envelope.Headers, TypeHeader: "x-first-death-queue", Version: envelope.Version{Fixed: 1}}}}, "header x-first-death-queue is not one a copy carries"},
		{"an id header that routes", []envelope.Message{{Type: "a", Profile: envelope.Profile{Kind: envelope.Headers, IDHeader: "CC", Version: envelope.Version{Fixed: 1}}}}, "header CC is not one a copy carries"},
		{"a type suffix of digits", []envelope.Message{{Type: "a", Profile: envelope.Profile{Kind: envelope.Headers, Version: envelope.Version{TypeSuffix: "1"}}}}, `type suffix "1" is digits alone`},
		{"a type suffix not ASCII", []envelope.Message{{Type: "a", Profile: envelope.Profile{Kind: envelope.Headers, Version: envelope.Version{TypeSuffix: "·v"}}}}, "type suffix"},
		{"a parameter that splits", []envelope.Message{{Type: "a", Profile: envelope.Profile{Kind: envelope.Headers, Version: envelope.Version{ContentTypeParameter: "v=x"}}}}, `content type parameter "v=x" is not a token`},
		{"a parameter too long", []envelope.Message{{Type: "a", Profile: envelope.Profile{Kind: envelope.Headers, Version: envelope.Version{ContentTypeParameter: strings.Repeat("v", 65)}}}}, "not a token of at most 64 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewReader(tt.msgs)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewReader: %v; want %q", err, tt.want)
			}
		})
	}
	// The same profile for two messages is one profile.
	if _, err := NewReader([]envelope.Message{{Type: "a", Profile: eventsProfile}, {Type: "b", Profile: eventsProfile}}); err != nil {
		t.Fatal(err)
	}
}

// FuzzStructuredEvent: whatever the body of a structured CloudEvent, the
// guard answers with an envelope whose payload lies within the body, or poison
// with a bounded reason; it never panics.
func FuzzStructuredEvent(f *testing.F) {
	f.Add(structuredEventDelivery().Body, false)
	f.Add([]byte(`{"specversion":"1.0","id":"e","source":"s","type":"t.v1","dataversion":"2","data":[1,{"a":null}]}`), true)
	f.Add([]byte(`{"data":{"data":{"data":{}}}}`), false)
	f.Add([]byte(`{"dataversion":}`), true)
	f.Add([]byte(`{"specversion":"1.0","id":"e","source":"s","type":"t","dataversion":[1,}`), true)
	var readers []*Reader
	for _, p := range []envelope.Profile{eventsProfile, {Kind: envelope.CloudEvents, Version: envelope.Version{Attribute: "dataversion"}}} {
		r, err := NewReader([]envelope.Message{{Type: "t", Profile: p}})
		if err != nil {
			f.Fatal(err)
		}
		readers = append(readers, r)
	}
	f.Fuzz(func(t *testing.T, body []byte, attribute bool) {
		r := readers[0]
		if attribute {
			r = readers[1]
		}
		d := &amqp.Delivery{ContentType: "application/cloudevents+json", Body: body}
		env, verdict, reason := r.Check(d, guardMaxBody, DefaultLimits, guardNow)
		if passedOrPoison(t, env, verdict, reason) && (env.Key() == "" || len(env.Payload(body)) > len(body)) {
			t.Fatalf("envelope %+v from %q", env, body)
		}
	})
}

// passedOrPoison fails t unless the guard answered either way as it should:
// an envelope, or poison with a bounded reason and none. It reports whether
// the delivery passed.
func passedOrPoison(t *testing.T, env *Envelope, verdict Verdict, reason string) bool {
	t.Helper()
	checkReason(t, reason)
	switch verdict {
	case Passed:
		if env == nil {
			t.Fatalf("passed without an envelope, reason %q", reason)
		}
		return true
	case Poison:
		if env != nil || reason == "" {
			t.Fatalf("poison with envelope %v, reason %q", env, reason)
		}
		return false
	}
	t.Fatalf("verdict %d", verdict)
	return false
}

// FuzzForeignHeaders: whatever a binary CloudEvent's or a header-mapped
// producer's headers and properties hold, and whatever their types, the
// guard answers the same twice: an envelope whose id, type and version keep
// every reader's bounds, or poison with a bounded reason; it never panics.
func FuzzForeignHeaders(f *testing.F) {
	f.Add("1.0", "evt-1", "https://payments.acme.example/api", "com.acme.payment.authorized.v2", "2026-03-01T11:58:00Z", "", "application/json", byte(0), byte(0))
	f.Add("", "", "", "com.acme.orders.OrderShipped", "", "6f1c2a7e", "application/json", byte(1), byte(2))
	f.Add("1.0", "e\x1b", "s", "t.v99999999999", "yesterday", "m 1", "text/plain; v=1", byte(3), byte(4))
	r := mixed(f)
	f.Fuzz(func(t *testing.T, spec, id, source, typ, at, messageID, contentType string, kind, where byte) {
		// value holds s as one of the types a header may arrive in.
		value := func(s string, k byte) any {
			switch k % 5 {
			case 0:
				return s
			case 1:
				return []byte(s)
			case 2:
				return int64(len(s))
			case 3:
				return nil
			}
			return amqp.Table{"v": s}
		}
		h := amqp.Table{}
		if where%2 == 0 {
			prefix := []string{"cloudEvents_", "cloudEvents:"}[where/2%2]
			h[prefix+"specversion"] = value(spec, kind)
			h[prefix+"id"] = value(id, kind>>1)
			h[prefix+"source"] = value(source, kind>>2)
			h[prefix+"type"] = value(typ, kind>>3)
			h[prefix+"time"] = value(at, kind>>4)
		} else {
			h["__TypeId__"] = value(typ, kind)
		}
		d := &amqp.Delivery{MessageId: messageID, ContentType: contentType, Headers: h, Body: []byte(`{}`)}
		env, verdict, reason := r.Check(d, guardMaxBody, DefaultLimits, guardNow)
		if _, again, _ := r.Check(d, guardMaxBody, DefaultLimits, guardNow); again != verdict {
			t.Fatalf("verdict %d, then %d", verdict, again)
		}
		if passedOrPoison(t, env, verdict, reason) && (env.Key() == "" || env.Version < 1 || env.Version > maxVersion ||
			len(env.Type) == 0 || len(env.Type) > envelope.MaxTypeBytes || len(env.MessageID) > envelope.MaxIDBytes || !envelope.IDText(env.MessageID) ||
			len(env.Key()) > MaxKeyBytes || !envelope.TypeText(env.Key())) {
			t.Fatalf("envelope %+v from %v", env, h)
		}
	})
}

// The longest key of each profile's envelope fits MaxKeyBytes, the
// header-mapped one's exactly: it is printable, and a record shows it whole.
func TestLongestKeysFitMaxKeyBytes(t *testing.T) {
	typ, id := strings.Repeat("T", envelope.MaxTypeBytes), strings.Repeat("i", envelope.MaxIDBytes)
	source := strings.Repeat("s", envelope.MaxIDBytes)
	r := reader(t,
		envelope.Message{Type: "t", Profile: eventsProfile},
		envelope.Message{Type: typ, Profile: springProfile},
		envelope.Message{Type: "orders.created"},
	)
	event := binaryEventDelivery()
	event.Headers["cloudEvents_id"], event.Headers["cloudEvents_source"], event.Headers["cloudEvents_type"] = id, source, "t.v1"
	for _, tc := range []struct {
		d    *amqp.Delivery
		want string
	}{
		{event, source + " " + id},
		{&amqp.Delivery{ContentType: "application/json", MessageId: id, Headers: amqp.Table{"__TypeId__": typ}}, "headers " + typ + " " + id},
		{&amqp.Delivery{ContentType: "application/json", MessageId: id, Type: "orders.created", Headers: amqp.Table{HeaderVersion: int32(1)}}, id},
	} {
		env, verdict, reason := r.Check(tc.d, guardMaxBody, DefaultLimits, guardNow)
		if verdict != Passed {
			t.Fatalf("%q: verdict %d: %s", tc.want, verdict, reason)
		}
		if env.Key() != tc.want || len(env.Key()) > MaxKeyBytes || !envelope.TypeText(env.Key()) {
			t.Errorf("key %q (%d bytes), want %q within %d bytes of printable ASCII", env.Key(), len(env.Key()), tc.want, MaxKeyBytes)
		}
	}
	if MaxKeyBytes != 265 {
		t.Errorf("MaxKeyBytes %d; the documents say 265", MaxKeyBytes)
	}
}

// A reader's marks are every header it reads a delivery's profile, type, id
// and version from, of each of its profiles.
func TestReaderMarks(t *testing.T) {
	r := reader(t,
		envelope.Message{Type: "a", Profile: envelope.Profile{Kind: envelope.CloudEvents, Source: "s", Version: envelope.Version{Attribute: "dataversion"}}},
		envelope.Message{Type: "b", Profile: envelope.Profile{Kind: envelope.Headers, TypeHeader: "kind", IDHeader: "msg-id", Version: envelope.Version{Header: "schema"}}},
	)
	for _, k := range []string{"cloudEvents_specversion", "cloudEvents:id", "cloudEvents_source", "cloudEvents_type", "cloudEvents_time", "cloudEvents:time", "cloudEvents_dataversion", "cloudEvents:dataversion", "kind", "msg-id", "schema"} {
		if !slices.Contains(r.Marks, k) {
			t.Errorf("marks %q lack %s", r.Marks, k)
		}
	}
}

// A binary CloudEvent that carries an attribute under both of the binding's
// prefixes with two values has no one identity, type or time: poison, with
// the attribute named. The same value under both passes.
func TestBinaryEventAttributeUnderBothPrefixes(t *testing.T) {
	r := reader(t, envelope.Message{Type: "com.acme.payment.authorized", Profile: envelope.Profile{Kind: envelope.CloudEvents, Version: envelope.Version{Attribute: "dataversion"}}})
	binary := func(mutate func(h amqp.Table)) *amqp.Delivery {
		d := binaryEventDelivery()
		d.Headers["cloudEvents_type"] = "com.acme.payment.authorized"
		d.Headers["cloudEvents_dataversion"] = "2"
		mutate(d.Headers)
		return d
	}
	for _, tt := range []struct {
		name   string
		d      *amqp.Delivery
		reason string // empty: passes
	}{
		{"id", binary(func(h amqp.Table) { h["cloudEvents:id"] = "evt-2" }), `CloudEvents attribute "id" differs between its cloudEvents_ and cloudEvents: headers`},
		{"source", binary(func(h amqp.Table) { h["cloudEvents:source"] = "https://elsewhere.example" }), `attribute "source" differs`},
		{"type", binary(func(h amqp.Table) { h["cloudEvents:type"] = "com.acme.payment.refunded" }), `attribute "type" differs`},
		{"specversion", binary(func(h amqp.Table) { h["cloudEvents:specversion"] = "0.3" }), `attribute "specversion" differs`},
		{"time", binary(func(h amqp.Table) { h["cloudEvents:time"] = "2026-03-01T11:59:00Z" }), `attribute "time" differs`},
		{"datacontenttype", binary(func(h amqp.Table) {
			h["cloudEvents_datacontenttype"], h["cloudEvents:datacontenttype"] = "application/json", "text/plain"
		}), `attribute "datacontenttype" differs`},
		{"version attribute", binary(func(h amqp.Table) { h["cloudEvents:dataversion"] = "3" }), `attribute "dataversion" differs`},
		{"version attribute of another type", binary(func(h amqp.Table) { h["cloudEvents:dataversion"] = int32(2) }), `attribute "dataversion" differs`},
		{"subject", binary(func(h amqp.Table) { h["cloudEvents:subject"] = "order-43" }), `attribute "subject" differs`},
		{"extension tables", binary(func(h amqp.Table) {
			h["cloudEvents_ext"], h["cloudEvents:ext"] = amqp.Table{"a": "1"}, amqp.Table{"a": "2"}
		}), `attribute "ext" differs`},
		// Each pair is found, whichever the map gives first: the reason
		// names the first attribute by name.
		{"several", binary(func(h amqp.Table) { h["cloudEvents:type"], h["cloudEvents:id"] = "x", "y" }), `attribute "id" differs`},
		{"a name to sanitize", binary(func(h amqp.Table) {
			h["cloudEvents_\x1b[2J"+strings.Repeat("n", 100)], h["cloudEvents:\x1b[2J"+strings.Repeat("n", 100)] = "a", "b"
		}), `CloudEvents attribute "\x1b[2Jnnnn`},
		{"same id", binary(func(h amqp.Table) { h["cloudEvents:id"] = "evt-1" }), ""},
		{"every attribute the same under both", binary(func(h amqp.Table) {
			for k, v := range h {
				if name, ok := strings.CutPrefix(k, "cloudEvents_"); ok {
					h["cloudEvents:"+name] = v
				}
			}
			h["cloudEvents_ts"], h["cloudEvents:ts"] = time.Unix(1772366280, 0), time.Unix(1772366280, 0).UTC()
			h["cloudEvents_blob"], h["cloudEvents:blob"] = []byte("b"), []byte("b")
			h["cloudEvents_ext"], h["cloudEvents:ext"] = amqp.Table{"a": []any{"1"}}, amqp.Table{"a": []any{"1"}}
		}), ""},
		{"old prefix alone", binary(func(h amqp.Table) { h["cloudEvents:partitionkey"] = "p" }), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env, verdict, reason := r.Check(tt.d, guardMaxBody, DefaultLimits, guardNow)
			checkReason(t, reason)
			switch {
			case tt.reason == "" && verdict != Passed:
				t.Fatalf("verdict %d, reason %q; want passed", verdict, reason)
			case tt.reason == "" && (env.MessageID != "evt-1" || env.Version != 2):
				t.Fatalf("envelope %+v", env)
			case tt.reason != "" && (verdict != Poison || !strings.Contains(reason, tt.reason)):
				t.Fatalf("verdict %d, reason %q; want poison with %q", verdict, reason, tt.reason)
			}
		})
	}
}

// Reading a binary CloudEvent allocates the envelope, the foreign event's
// facts and its inbox key, whichever prefix its attributes carry; looking
// for an attribute under both costs nothing more.
func TestBinaryEventPassingAllocations(t *testing.T) {
	r := reader(t, envelope.Message{Type: "com.acme.payment.authorized", Profile: eventsProfile})
	old := binaryEventDelivery()
	for k, v := range old.Headers {
		delete(old.Headers, k)
		old.Headers["cloudEvents:"+strings.TrimPrefix(k, "cloudEvents_")] = v
	}
	both := binaryEventDelivery()
	for k, v := range binaryEventDelivery().Headers {
		both.Headers["cloudEvents:"+strings.TrimPrefix(k, "cloudEvents_")] = v
	}
	for name, d := range map[string]*amqp.Delivery{"binary": binaryEventDelivery(), "old prefix": old, "both prefixes": both} {
		t.Run(name, func(t *testing.T) {
			allocs := testing.AllocsPerRun(1000, func() {
				env, verdict, reason := r.Check(d, guardMaxBody, DefaultLimits, guardNow)
				if verdict != Passed {
					t.Fatal(reason)
				}
				sinkEnvelope = env
			})
			if allocs != 3 {
				t.Errorf("%v allocations per passing delivery, want 3 (the envelope, its Foreign and key)", allocs)
			}
		})
	}
}
