package guard

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
)

// delivered is p as a consumer receives it.
func delivered(p amqp.Publishing) *amqp.Delivery {
	return &amqp.Delivery{
		ContentType: p.ContentType, DeliveryMode: p.DeliveryMode, MessageId: p.MessageId, Type: p.Type,
		Timestamp: p.Timestamp, Headers: p.Headers, Body: p.Body,
	}
}

// What Build writes in every profile kind, with the version in each place a
// profile keeps it, reads back as the same type, version and id, and writes
// the headers its envelope names.
func TestBuildReadsBack(t *testing.T) {
	const source = "https://payments.acme.example/api"
	ce := func(v envelope.Version) envelope.Profile {
		return envelope.Profile{Kind: envelope.CloudEvents, Source: source, Version: v}
	}
	tests := []struct {
		name    string
		profile envelope.Profile
		version int
		// key is the envelope's key for id "m-1".
		key string
	}{
		{"lily", envelope.Profile{}, 3, "m-1"},
		{"cloudevents, type suffix", ce(envelope.Version{TypeSuffix: ".v"}), 2, source + " m-1"},
		{"cloudevents, attribute", ce(envelope.Version{Attribute: "dataversion"}), 4, source + " m-1"},
		{"cloudevents, content type parameter", ce(envelope.Version{ContentTypeParameter: "v"}), 5, source + " m-1"},
		{"cloudevents, fixed", ce(envelope.Version{Fixed: 1}), 1, source + " m-1"},
		{"cloudevents, Lily's header", ce(envelope.Version{}), 6, source + " m-1"},
		{"headers, type header, fixed", springProfile, 1, "headers t m-1"},
		{"headers, id header, content type parameter",
			envelope.Profile{Kind: envelope.Headers, TypeHeader: "MessageType", IDHeader: "MessageId", Version: envelope.Version{ContentTypeParameter: "v"}}, 2, "headers t m-1"},
		{"headers, no id, version header",
			envelope.Profile{Kind: envelope.Headers, TypeHeader: "event", NoID: true, Version: envelope.Version{Header: "event-version"}}, 7, ""},
		{"headers, type property, type suffix", envelope.Profile{Kind: envelope.Headers, Version: envelope.Version{TypeSuffix: "-v"}}, 8, "headers t m-1"},
		{"headers, type property, Lily's header", envelope.Profile{Kind: envelope.Headers}, 9, "headers t m-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := envelope.Message{Type: "t", Profile: tt.profile}
			p := Build(m, tt.version, "m-1", []byte(`{"a":1}`), guardNow.Add(-time.Minute+time.Millisecond))
			env, verdict, reason := reader(t, m).Check(delivered(p), guardMaxBody, DefaultLimits, guardNow)
			if verdict != Passed {
				t.Fatalf("verdict %d: %s; publishing %+v", verdict, reason, p)
			}
			id := "m-1"
			if tt.profile.NoID {
				id = ""
			}
			if env.Type != "t" || env.Version != tt.version || env.MessageID != id || env.Key() != tt.key ||
				env.ContentType != "application/json" || !env.Timestamp.Equal(guardNow.Add(-time.Minute)) {
				t.Errorf("envelope %+v; want t version %d, id %q, key %q", env, tt.version, id, tt.key)
			}
			if p.DeliveryMode != amqp.Persistent || string(env.Payload(p.Body)) != `{"a":1}` {
				t.Errorf("publishing %+v", p)
			}
			// The headers Build writes are those the envelope says it does,
			// which lilygen keeps examples and typed headers off.
			written := slices.Sorted(maps.Keys(p.Headers))
			if want := slices.Sorted(slices.Values(tt.profile.WrittenHeaders())); !slices.Equal(written, want) {
				t.Errorf("Build writes headers %q; WrittenHeaders says %q", written, want)
			}
			for _, h := range written {
				if !tt.profile.ReservedHeader(h) {
					t.Errorf("Build writes header %q, which the profile does not reserve", h)
				}
			}
			// A producer without ids does not pretend to send one.
			if tt.profile.NoID && (p.MessageId != "" || len(p.Headers) != 2) {
				t.Errorf("publishing without ids %+v", p)
			}
		})
	}
}

// In a queue of several profiles, each publishing bears the marks of its
// own.
func TestBuildInAQueueOfProfiles(t *testing.T) {
	events := envelope.Message{Type: "com.acme.payment.authorized", Profile: envelope.Profile{Kind: envelope.CloudEvents, Source: "s", Version: envelope.Version{TypeSuffix: ".v"}}}
	spring := envelope.Message{Type: "com.acme.orders.OrderShipped", Profile: springProfile}
	lily := envelope.Message{Type: "orders.created"}
	r := reader(t, events, spring, lily)
	for _, m := range []envelope.Message{events, spring, lily} {
		env, verdict, reason := r.Check(delivered(Build(m, 1, "m-1", []byte(`{}`), guardNow)), guardMaxBody, DefaultLimits, guardNow)
		if verdict != Passed || env.Type != m.Type || env.Version != 1 || env.MessageID != "m-1" {
			t.Errorf("%s: verdict %d (%s), envelope %+v", m.Type, verdict, reason, env)
		}
	}
}

// What no reader would accept, or would misread, Build refuses at once.
func TestBuildRefusesWhatNoReaderTakes(t *testing.T) {
	ce := envelope.Profile{Kind: envelope.CloudEvents, Source: "//shop"}
	fixed := envelope.Profile{Kind: envelope.Headers, TypeHeader: "kind", Version: envelope.Version{Fixed: 1}}
	for name, build := range map[string]func(){
		"version 0":        func() { Build(envelope.Message{Type: "T"}, 0, "id", nil, time.Now()) },
		"version too high": func() { Build(envelope.Message{Type: "T"}, maxVersion+1, "id", nil, time.Now()) },
		"another fixed":    func() { Build(envelope.Message{Type: "T", Profile: fixed}, 2, "id", nil, time.Now()) },
		"CloudEvent no id": func() { Build(envelope.Message{Type: "T", Profile: ce}, 1, "", nil, time.Now()) },
		"CloudEvent no source": func() {
			Build(envelope.Message{Type: "T", Profile: envelope.Profile{Kind: envelope.CloudEvents}}, 1, "id", nil, time.Now())
		},
		"no id":             func() { Build(envelope.Message{Type: "T"}, 1, "", nil, time.Now()) },
		"an id with spaces": func() { Build(envelope.Message{Type: "T"}, 1, "order 42", nil, time.Now()) },
		"an id not ASCII":   func() { Build(envelope.Message{Type: "T"}, 1, "sipariş-7", nil, time.Now()) },
		"an id too long": func() {
			Build(envelope.Message{Type: "T"}, 1, strings.Repeat("x", envelope.MaxIDBytes+1), nil, time.Now())
		},
		"an empty type":         func() { Build(envelope.Message{}, 1, "id", nil, time.Now()) },
		"a type with a control": func() { Build(envelope.Message{Type: "T\x1b"}, 1, "id", nil, time.Now()) },
		"a type too long": func() {
			Build(envelope.Message{Type: strings.Repeat("t", envelope.MaxTypeBytes+1)}, 1, "id", nil, time.Now())
		},
		"a type too long with its suffix": func() {
			Build(envelope.Message{Type: strings.Repeat("t", envelope.MaxTypeBytes-2), Profile: envelope.Profile{Kind: envelope.Headers, TypeHeader: "kind", Version: envelope.Version{TypeSuffix: ".v"}}}, 1, "id", nil, time.Now())
		},
		"a CloudEvent source with a space": func() {
			Build(envelope.Message{Type: "T", Profile: envelope.Profile{Kind: envelope.CloudEvents, Source: "https://a b"}}, 1, "id", nil, time.Now())
		},
		"a CloudEvent source too long": func() {
			Build(envelope.Message{Type: "T", Profile: envelope.Profile{Kind: envelope.CloudEvents, Source: "//" + strings.Repeat("s", envelope.MaxIDBytes)}}, 1, "id", nil, time.Now())
		},
		"an empty type with a suffix": func() {
			Build(envelope.Message{Profile: envelope.Profile{Kind: envelope.Headers, Version: envelope.Version{TypeSuffix: ".v"}}}, 1, "id", nil, time.Now())
		},
		"a parameter that splits": func() {
			Build(envelope.Message{Type: "T", Profile: envelope.Profile{Kind: envelope.Headers, Version: envelope.Version{ContentTypeParameter: "v=x"}}}, 1, "id", nil, time.Now())
		},
		"a suffix not ASCII": func() {
			Build(envelope.Message{Type: "T", Profile: envelope.Profile{Kind: envelope.Headers, Version: envelope.Version{TypeSuffix: "·v"}}}, 1, "id", nil, time.Now())
		},
		"a header-mapped id with a control": func() {
			Build(envelope.Message{Type: "T", Profile: envelope.Profile{Kind: envelope.Headers, TypeHeader: "kind", IDHeader: "id"}}, 1, "a\x1b", nil, time.Now())
		},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("built")
				}
			}()
			build()
		})
	}
}
