package asyncapi

import (
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/schema"
)

// A message's headers are those its envelope profile carries (the version,
// and for other producers the type, the id and CloudEvents' attributes),
// then its typed headers. A CloudEvent is described in binary content mode,
// where its attributes are headers and its data is the body.

// ceHeader is the header of CloudEvents attribute name in binary mode.
func ceHeader(name string) string { return envelope.EventPrefix + name }

// wireType is the type v of m travels as in profile pr: with a version the
// profile reads from the type, the type and the version's suffix.
func wireType(m *schema.Message, v *schema.Version, pr envelope.Profile) string {
	if s := pr.Version.TypeSuffix; s != "" {
		return m.Type + s + strconv.Itoa(v.Number)
	}
	return m.Type
}

// header is one header of a message, with the value an example shows when
// the schema knows it.
type header struct {
	name     string
	schema   *yaml.Node
	required bool
	example  *yaml.Node // nil when only the producer knows it, such as an id
}

// envelopeHeaders are the headers m's version v carries in profile pr:
// those a producer in pr writes, each with its schema.
func envelopeHeaders(m *schema.Message, v *schema.Version, pr envelope.Profile) []header {
	typ := wireType(m, v, pr)
	id := idSchema()
	// A foreign producer's version is an integer or its decimal digits.
	loose := newObject().set("enum", list(integer(v.Number), str(strconv.Itoa(v.Number)))).mapping()
	var described map[string]header
	if pr.Kind == envelope.CloudEvents {
		described = map[string]header{
			ceHeader("specversion"):        {"", constant("1.0"), true, str("1.0")},
			ceHeader("type"):               {"", constant(typ), true, str(typ)},
			ceHeader("source"):             {"", id, true, nil},
			ceHeader("id"):                 {"", id, true, nil},
			ceHeader("time"):               {"", timeHeader(), false, nil},
			ceHeader(pr.Version.Attribute): {"", loose, true, integer(v.Number)},
		}
	} else {
		described = map[string]header{
			pr.TypeHeader:     {"", constant(typ), true, str(typ)},
			pr.IDHeader:       {"", id, true, nil},
			pr.Version.Header: {"", loose, true, integer(v.Number)},
		}
	}
	described[envelope.HeaderVersion] = lilyHeader(v)
	var out []header
	for _, name := range pr.WrittenHeaders() {
		h := described[name]
		h.name = name
		out = append(out, h)
	}
	return out
}

// lilyVersion is Lily's version header, which a profile that names no place
// for the version reads, whatever its kind, and in a CloudEvent's
// structured content mode too; none for another profile.
func lilyVersion(v *schema.Version, pr envelope.Profile) []header {
	if pr.Version != (envelope.Version{}) {
		return nil
	}
	return []header{lilyHeader(v)}
}

// lilyHeader is Lily's version header of v.
func lilyHeader(v *schema.Version) header {
	lily := newObject().set("type", str("integer")).set("const", integer(v.Number)).mapping()
	return header{envelope.HeaderVersion, lily, true, integer(v.Number)}
}

// timeHeader is the schema of a time in a header.
func timeHeader() *yaml.Node {
	return dateTime(newObject().set("type", str("string"))).
		set("description", str("An AMQP timestamp, or an RFC 3339 string.")).mapping()
}

// timePattern narrows format date-time to what wire.ParseTime reads: the
// upper-case T and Z, no leap second. A validator's date-time alone takes a
// lower-case t or z, a space for the T and :60, which Lily refuses: a
// producer checking its messages against the document would lose them.
const timePattern = `^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-5][0-9](\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$`

// dateTime is o, a string's schema, with the time Lily reads.
func dateTime(o object) object {
	return o.set("format", str("date-time")).set("pattern", str(timePattern))
}

// headersSchema is the schema of the headers hs, nil when there are none.
func headersSchema(hs []header) *yaml.Node {
	if len(hs) == 0 {
		return nil
	}
	props := newObject()
	var required []string
	for _, h := range hs {
		props.set(h.name, h.schema)
		if h.required {
			required = append(required, h.name)
		}
	}
	o := newObject().set("type", str("object")).set("properties", props.mapping())
	if len(required) > 0 {
		o.set("required", strs(required))
	}
	return o.mapping()
}

// typedHeaders are v's typed headers.
func typedHeaders(v *schema.Version) []header {
	out := make([]header, len(v.Headers))
	for i, h := range v.Headers {
		// The guard refuses a string header value over 4096 bytes. A
		// character is a byte or more, so maxLength, which counts
		// characters, states a bound every value the guard takes meets.
		if limit := envelope.MaxHeaderValueBytes; h.Type == schema.String && (h.MaxLength == nil || *h.MaxLength > limit) {
			bounded := *h
			bounded.MaxLength = &limit
			h = &bounded
		}
		s := fieldSchema(h, inHeaders)
		if h.Type == schema.Time {
			s = timeHeader()
		}
		out[i] = header{name: h.Name, schema: s, required: h.Required}
	}
	return out
}

// contentType is the content type v travels with in profile pr: with a
// version the profile reads from it, the version as its parameter.
func contentType(v *schema.Version, pr envelope.Profile) string {
	ct := v.ContentTypes[0] // the schema allows application/json alone
	if p := pr.Version.ContentTypeParameter; p != "" {
		ct += "; " + p + "=" + strconv.Itoa(v.Number)
	}
	return ct
}

// envelopeFacts says where a profile's messages carry their type, id and
// version, in the schema's own words (type: {header: __TypeId__}), with
// Lily's defaults spelled out, and the source Lily's producers write.
func envelopeFacts(e *schema.Envelope) *yaml.Node {
	pr := e.Profile
	one := func(key, val string) *yaml.Node { return newObject().set(key, str(val)).mapping() }
	o := newObject().set("profile", str(e.Name)).set("kind", str(string(pr.Kind)))
	switch {
	case pr.Kind == envelope.CloudEvents:
		o.set("type", one("attribute", "type"))
		o.set("id", newObject().set("attributes", strs([]string{"source", "id"})).mapping())
	case pr.TypeHeader != "":
		o.set("type", one("header", pr.TypeHeader))
	default:
		o.set("type", one("property", "type"))
	}
	switch {
	case pr.Kind == envelope.CloudEvents:
	case pr.NoID:
		o.set("id", str("none"))
	case pr.IDHeader != "":
		o.set("id", one("header", pr.IDHeader))
	default:
		o.set("id", one("property", "message_id"))
	}
	v := pr.Version
	switch {
	case v.Header != "":
		o.set("version", one("header", v.Header))
	case v.Attribute != "":
		o.set("version", one("attribute", v.Attribute))
	case v.ContentTypeParameter != "":
		o.set("version", one("content_type_parameter", v.ContentTypeParameter))
	case v.TypeSuffix != "":
		o.set("version", one("type_suffix", v.TypeSuffix))
	case v.Fixed != 0:
		o.set("version", newObject().set("fixed", integer(v.Fixed)).mapping())
	default:
		o.set("version", one("header", "x-lily-version"))
	}
	if pr.Source != "" {
		o.set("source", str(pr.Source))
	}
	if pr.Kind == envelope.CloudEvents {
		// The message describes binary mode; a structured event carries the
		// same payload as its data member.
		o.set("content_modes", strs([]string{"binary", "structured"}))
	}
	return o.mapping()
}

// structuredMedia is a structured CloudEvent's content type.
const structuredMedia = "application/cloudevents+json"

// structuredEvent is the schema of a structured CloudEvent of version v of
// m, whose data member is data: its context attributes are members, the
// version attribute (when pr reads one) too, data is required (the guard
// refuses an event without it, or with it null), and data_base64 is
// refused, since Lily reads JSON data alone. Extension attributes may come
// beside.
// The data's content type is datacontenttype, which carries the version
// when pr reads it from a content type parameter. Otherwise the guard
// routes by its media type, so one of another media type has no route and
// is dead-lettered: the schema takes what the guard would route.
func structuredEvent(m *schema.Message, v *schema.Version, pr envelope.Profile, data *yaml.Node) *yaml.Node {
	text := stringSchema
	dataType := newObject().set("type", str("string")).
		set("maxLength", integer(envelope.MaxContentTypeBytes)).
		set("pattern", str(mediaPattern(v.ContentTypes))).
		set("default", str(schema.DefaultContentType)).
		set("description", str("The data's content type, routed by its media type ("+strings.Join(v.ContentTypes, " or ")+", in any case); parameters may follow.")).mapping()
	required := []string{"specversion", "id", "source", "type", "data"}
	if pr.Version.ContentTypeParameter != "" {
		dataType = newObject().set("type", str("string")).set("const", str(contentType(v, pr))).
			set("description", str("The data's content type, the version its parameter "+pr.Version.ContentTypeParameter+", as Lily's producers write it; the guard reads the parameter in any case, spacing or quoting.")).mapping()
		required = append(required, "datacontenttype")
	}
	props := newObject().
		set("specversion", constant("1.0")).
		set("id", idSchema()).
		set("source", idSchema()).
		set("type", constant(wireType(m, v, pr))).
		set("time", dateTime(newObject().set("type", str("string"))).mapping()).
		set("subject", text()).
		set("dataschema", text()).
		set("datacontenttype", dataType).
		set("data", data).
		set("data_base64", newObject().set("not", newObject().mapping()).set("description", str("Refused: Lily reads JSON data alone.")).mapping())
	if a := pr.Version.Attribute; a != "" {
		props.set(a, newObject().set("enum", list(integer(v.Number), str(strconv.Itoa(v.Number)))).mapping())
		required = append(required, a)
	}
	return newObject().set("type", str("object")).set("properties", props.mapping()).set("required", strs(required)).mapping()
}

// mediaPattern matches a content type as the guard reads one to route it:
// printable ASCII, the media type one of types, compared without case once
// the spaces around it are trimmed, then any parameters after a ;. Each
// letter is a class of both cases, since ECMA 262 patterns carry no flags.
func mediaPattern(types []string) string {
	alts := make([]string, len(types))
	for i, t := range types {
		var b strings.Builder
		for _, c := range []byte(t) {
			if lower := c | 0x20; 'a' <= lower && lower <= 'z' {
				b.Write([]byte{'[', lower - 0x20, lower, ']'})
			} else {
				b.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
		alts[i] = b.String()
	}
	return "^ *(?:" + strings.Join(alts, "|") + ") *(?:;[ -~]*)?$"
}

// idPattern is envelope.IDText as a pattern: printable ASCII without
// spaces.
const idPattern = "^[!-~]+$"

// idSchema is the schema of an id as the guard takes one: a message's id, a
// CloudEvent's id and its source, which make the inbox's key together.
func idSchema() *yaml.Node {
	return newObject().set("type", str("string")).set("maxLength", integer(envelope.MaxIDBytes)).set("pattern", str(idPattern)).mapping()
}

// stringSchema is the schema of any string.
func stringSchema() *yaml.Node { return newObject().set("type", str("string")).mapping() }

// constant is the schema of the one string s.
func constant(s string) *yaml.Node {
	return newObject().set("type", str("string")).set("const", str(s)).mapping()
}
