package asyncapi

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	"gopkg.in/yaml.v3"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/schema"
)

// A message of the document is one version of one message type as it
// travels in one envelope profile. A message that every queue reads in one
// profile (the usual case) is named after its version, PaymentAuthorizedV2;
// one that queues read in several is one message per profile,
// PaymentAuthorizedV2InLily, since each profile gives it other headers. A
// CloudEvent travels in two content modes, and is two messages: binary mode
// (PaymentAuthorizedV2: its attributes in headers, its data the payload) and
// structured mode (PaymentAuthorizedV2Structured: the event the payload).

// variant is one message of the document.
type variant struct {
	id  string // its key under components.messages
	m   *schema.Message
	v   *schema.Version
	env *schema.Envelope
	// structured: a CloudEvent in structured content mode.
	structured bool
}

type variantKey struct {
	v   *schema.Version
	env string
}

// variants lists the messages of the document, in the schema's order, and
// indexes them by version and profile. An id another message took already
// (X v1 in envelope foo-v2, and XV1InFoo v2, are both XV1InFooV2) gets a
// number, as a channel's does.
func variants(f *schema.File) ([]variant, map[variantKey][]string) {
	var out []variant
	ids := map[variantKey][]string{}
	taken := map[string]bool{}
	add := func(va variant) string {
		base := va.id
		for n := 2; taken[va.id]; n++ {
			va.id = base + "_" + strconv.Itoa(n)
		}
		taken[va.id] = true
		out = append(out, va)
		key := variantKey{va.v, va.env.Name}
		ids[key] = append(ids[key], va.id)
		return va.id
	}
	for _, m := range f.Messages {
		envs := f.EnvelopesOf(m)
		for _, v := range m.Versions {
			for _, env := range envs {
				id := v.GoName
				if len(envs) > 1 {
					id += "In" + schema.GoName(env.Name)
				}
				// A structured CloudEvent is named after its binary twin.
				id = add(variant{id: id, m: m, v: v, env: env})
				if env.Profile.Kind == envelope.CloudEvents {
					add(variant{id: id + "Structured", m: m, v: v, env: env, structured: true})
				}
			}
		}
	}
	return out, ids
}

// messages are the document's messages, for components.messages.
func messages(f *schema.File, vs []variant) (*yaml.Node, error) {
	o := newObject()
	for _, va := range vs {
		msg, err := message(f, va)
		if err != nil {
			return nil, err
		}
		o.set(va.id, msg)
	}
	return o.node(), nil
}

func message(f *schema.File, va variant) (*yaml.Node, error) {
	m, v, pr := va.m, va.v, va.env.Profile
	hs := append(envelopeHeaders(m, v, pr), typedHeaders(v)...)
	summary := fmt.Sprintf("Version %d of %s, type %s, in envelope %s.", v.Number, m.Name, m.Type, va.env.Name)
	ct, payload := contentType(v, pr), payloadSchema(v)
	if va.structured {
		// The event is the body: its attributes are members, not headers.
		// Lily's version header stays one, where the guard reads it.
		hs = append(lilyVersion(v, pr), typedHeaders(v)...)
		ct, payload = structuredMedia, structuredEvent(m, v, pr, payload)
		summary += " A CloudEvent in structured content mode: the body is the event, its data member the payload."
	}
	if v.DeprecatedSince != "" {
		summary += " Deprecated since " + v.DeprecatedSince
		if v.RemoveAfter != "" {
			summary += "; may be removed after " + v.RemoveAfter
		}
		summary += "."
	}
	binding := newObject()
	// The AMQP type property carries the type unless the profile puts it
	// in a header or a CloudEvents attribute.
	if pr.Kind != envelope.CloudEvents && pr.TypeHeader == "" {
		binding.set("messageType", str(wireType(m, v, pr)))
	}
	exs, err := examples(m, v, pr, hs, va.structured)
	if err != nil {
		return nil, err
	}
	o := newObject().
		set("name", str(va.id)).
		set("title", str(fmt.Sprintf("%s v%d", m.Name, v.Number))).
		set("summary", str(summary)).
		set("contentType", str(ct)).
		set("headers", headersSchema(hs)).
		set("payload", payload).
		set("bindings", amqpBinding(binding)).
		set("examples", exs).
		set("x-lily-wire-type", str(m.Type)).
		set("x-lily-version", integer(v.Number)).
		set("x-lily-envelope", envelopeFacts(va.env))
	// A producer writes a CloudEvent in binary content mode alone.
	if f.Produced(m) && !va.structured {
		o.set("x-lily-producer", str("New"+v.GoName))
	}
	if v.DeprecatedSince != "" {
		o.set("x-lily-deprecated-since", str(v.DeprecatedSince))
	}
	if v.RemoveAfter != "" {
		o.set("x-lily-remove-after", str(v.RemoveAfter))
	}
	return o.mapping(), nil
}

// examples are the examples of version v of m in profile pr, each with the
// headers hs its envelope carries (an id, which only a producer knows, as
// "example-<n>"), then its own headers in the order the schema declares
// them; in a structured CloudEvent, the example is the data of an event,
// whose members carry the version where pr reads it there.
func examples(m *schema.Message, v *schema.Version, pr envelope.Profile, hs []header, structured bool) (*yaml.Node, error) {
	if len(v.Examples) == 0 {
		return nil, nil
	}
	var out []*yaml.Node
	for i, ex := range v.Examples {
		headers := newObject()
		for _, h := range hs {
			switch {
			case slices.ContainsFunc(v.Headers, func(t *schema.Field) bool { return t.Name == h.name }):
				// A typed header: the example's own value, below.
			case h.example != nil:
				headers.set(h.name, h.example)
			case h.required:
				headers.set(h.name, str(fmt.Sprintf("example-%d", i+1)))
			}
		}
		for _, h := range v.Headers {
			if val, ok := ex.Headers[h.Name]; ok {
				headers.set(h.Name, value(val))
			}
		}
		// Headers the schema does not declare, which an example may set.
		for _, k := range slices.Sorted(maps.Keys(ex.Headers)) {
			if !slices.ContainsFunc(v.Headers, func(h *schema.Field) bool { return h.Name == k }) {
				headers.set(k, value(ex.Headers[k]))
			}
		}
		payload, err := jsonValue(ex.Body)
		if err != nil {
			return nil, fmt.Errorf("example %d of %s: %w", i+1, v.GoName, err)
		}
		if structured {
			event := newObject().set("specversion", str("1.0")).set("id", str(fmt.Sprintf("example-%d", i+1))).
				set("source", str("example")).set("type", str(wireType(m, v, pr)))
			if a := pr.Version.Attribute; a != "" {
				event.set(a, integer(v.Number))
			}
			if pr.Version.ContentTypeParameter != "" {
				event.set("datacontenttype", str(contentType(v, pr)))
			}
			payload = event.set("data", payload).mapping()
		}
		out = append(out, newObject().set("headers", headers.node()).set("payload", payload).mapping())
	}
	return list(out...), nil
}
