package gen

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dave/jennifer/jen"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/schema"
)

// producer emits New<Version>: the publishing of a message in envelope e,
// the one it is read in, checked by the consumer's own extractors first.
func producer(j *jen.File, m *schema.Message, v *schema.Version, e *schema.Envelope, envs envelopeNames, checks marshalChecks) {
	name := "New" + v.GoName
	fail := jen.Return(jen.Qual(rt, "Publishing").Values(), jen.Err())
	var body []jen.Code
	if !e.Profile.NoID || e.Profile.Kind == envelope.CloudEvents {
		// A consumer takes a message with an id it cannot read for poison.
		body = append(body, jen.If(jen.Err().Op(":=").Qual(envPkg, "CheckID").Call(jen.Id("messageID")), jen.Err().Op("!=").Nil()).Block(fail))
	}
	// encoding/json would send nil as null, which an extractor reads as an
	// empty object, and the typed headers cannot be read from it.
	body = append(body, jen.If(jen.Id("msg").Op("==").Nil()).Block(
		jen.Return(jen.Qual(rt, "Publishing").Values(), jen.Op("&").Qual(wire, "FieldError").Values(kv("Problem", jen.Lit("msg is nil"))))))
	if checks.any(v.Fields) {
		body = append(body, jen.If(jen.Err().Op(":=").Id("msg").Dot(checkMarshal).Call(), jen.Err().Op("!=").Nil()).Block(fail))
	}
	body = append(body,
		jen.List(jen.Id("body"), jen.Err()).Op(":=").Qual("encoding/json", "Marshal").Call(jen.Id("msg")),
		jen.If(jen.Err().Op("!=").Nil()).Block(fail),
		// A round trip through the extractor checks every bound of the
		// schema, so that no consumer's extractor refuses what this producer
		// sends. A consuming queue's max_body_bytes is not among them: its
		// guard dead-letters a larger body unread, which lilygen lint warns
		// of (LINT-BODY-OVER-LIMIT).
		jen.If(jen.List(jen.Id("_"), jen.Err()).Op(":=").Id("Extract"+v.GoName).Call(jen.Id("body")), jen.Err().Op("!=").Nil()).Block(fail),
	)
	msg := jen.Qual(envPkg, "Message").Values(envs.message(m, e)...)
	params, _ := producerParams(v, e)
	var id jen.Code = jen.Id("messageID")
	if e.Profile.NoID {
		id = jen.Lit("")
	}
	publishing := jen.Qual(rt, "NewPublishing").Call(msg, jen.Lit(v.Number), id, jen.Id("body"))
	if v.HeadersName == "" {
		body = append(body, jen.Return(publishing, jen.Nil()))
	} else {
		body = append(body, jen.Id("p").Op(":=").Add(publishing))
	}
	for _, f := range v.Headers {
		src := jen.Id("msg").Dot("Headers").Dot(f.GoName)
		if f.Pointer() {
			src = jen.Op("*").Add(src)
		}
		// AMQP tables hold plain strings, not named string types.
		if f.Type == schema.Enum {
			src = jen.String().Call(src)
		}
		var set []jen.Code
		if f.Type == schema.Time {
			// Sent as it arrives, rather than cut by the client on the way:
			// the publishing holds the instant a consumer reads (in its
			// own zone).
			set = append(set, jen.Comment("An AMQP timestamp holds whole seconds, without a zone."))
			src = jen.Id("msg").Dot("Headers").Dot(f.GoName).Dot("UTC").Call().Dot("Truncate").Call(jen.Qual("time", "Second"))
		}
		set = append(set, jen.Id("p").Dot("Headers").Index(jen.Lit(f.Name)).Op("=").Add(src))
		if f.Pointer() {
			set = []jen.Code{jen.If(jen.Id("msg").Dot("Headers").Dot(f.GoName).Op("!=").Nil()).Block(set...)}
		}
		body = append(body, set...)
	}
	if v.HeadersName != "" {
		lookup := jen.Func().Params(jen.Id("k").String()).Params(jen.Any(), jen.Bool()).Block(
			jen.List(jen.Id("v"), jen.Id("ok")).Op(":=").Id("p").Dot("Headers").Index(jen.Id("k")),
			jen.Return(jen.Id("v"), jen.Id("ok")),
		)
		body = append(body,
			jen.If(jen.List(jen.Id("_"), jen.Err()).Op(":=").Id(headersExtractor(v)).Call(lookup), jen.Err().Op("!=").Nil()).Block(fail),
			jen.Return(jen.Id("p"), jen.Nil()))
	}
	doc := fmt.Sprintf("%s returns msg as a persistent publishing in envelope %s: %s, the payload as JSON.", name, e.Name, envelopeWords(m, v, e.Profile))
	if e.Profile.Kind == envelope.Lily {
		doc = fmt.Sprintf("%s returns msg as a persistent publishing in Lily's canonical envelope (type %s, version %d, message id messageID), the payload as JSON.", name, commentText(m.Type), v.Number)
	}
	if v.HeadersName != "" {
		doc += " msg.Headers are among its headers."
	}
	if !e.Profile.NoID || e.Profile.Kind == envelope.CloudEvents {
		doc += " Like a consumer, it checks messageID (envelope.CheckID) and msg against the schema first, failing with a *wire.FieldError for msg. A nil msg fails the same way."
	} else {
		doc += " Like a consumer, it checks msg against the schema first, failing with a *wire.FieldError. A nil msg fails the same way."
	}
	comment(j, doc)
	deprecated(j, m, v)
	j.Func().Id(name).Params(params...).Params(jen.Qual(rt, "Publishing"), jen.Error()).Block(body...)
}

// envelopeWords says where a producer in profile p puts the type, version
// and id of version v of m, such as "type com.acme.shipped in header
// __TypeId__, no version (every message is version 1), message id
// messageID". The names a profile gives are shown by commentText: the
// schema refuses one that is not printable, and a comment must not carry it
// even so.
func envelopeWords(m *schema.Message, v *schema.Version, p envelope.Profile) string {
	typ, n, ver := m.Type, v.Number, ""
	switch pv := p.Version; {
	case pv.Fixed != 0:
		ver = fmt.Sprintf("no version (every message is version %d)", pv.Fixed)
	case pv.TypeSuffix != "":
		typ += pv.TypeSuffix + strconv.Itoa(n)
	case pv.ContentTypeParameter != "":
		ver = fmt.Sprintf("content type application/json; %s=%d", commentText(pv.ContentTypeParameter), n)
	case pv.Attribute != "":
		ver = fmt.Sprintf("version %d in attribute %s", n, commentText(pv.Attribute))
	case pv.Header != "":
		ver = fmt.Sprintf("version %d in header %s", n, commentText(pv.Header))
	default:
		ver = fmt.Sprintf("version %d in header x-lily-version", n)
	}
	typ = commentText(typ)
	var parts []string
	switch {
	case p.Kind == envelope.CloudEvents:
		parts = append(parts, "a CloudEvent in binary content mode of type "+typ)
	case p.TypeHeader != "":
		parts = append(parts, "type "+typ+" in header "+commentText(p.TypeHeader))
	default:
		parts = append(parts, "type "+typ)
	}
	if ver != "" {
		parts = append(parts, ver)
	}
	switch {
	case p.Kind == envelope.CloudEvents:
		parts = append(parts, "source "+commentText(p.Source), "id messageID")
	case p.NoID:
		parts = append(parts, "no message id (the envelope carries none)")
	case p.IDHeader != "":
		parts = append(parts, "message id messageID in header "+commentText(p.IDHeader))
	default:
		parts = append(parts, "message id messageID")
	}
	return strings.Join(parts, ", ")
}

// maxRoutingKey is the most bytes AMQP carries in a routing key.
const maxRoutingKey = 255

// exchangeConst emits the constant naming the exchange m is published to;
// the default exchange gets none.
func exchangeConst(j *jen.File, m *schema.Message) {
	if m.Publish == nil || m.Publish.Exchange == "" {
		return
	}
	commentf(j, "%sExchange is the exchange the Publish functions of %s send to.", m.Name, m.Name)
	j.Const().Id(m.Name + "Exchange").Op("=").Lit(m.Publish.Exchange)
}

// publisher emits Publish<Version>: New<Version>'s publishing, sent through
// a runtime.Sender where the schema publishes the message.
func publisher(j *jen.File, m *schema.Message, v *schema.Version, e *schema.Envelope) {
	pub, name := m.Publish, "Publish"+v.GoName
	var fields, checks []jen.Code
	doc := fmt.Sprintf("%s sends msg, as New%s builds it, through s", name, v.GoName)
	if pub.Exchange != "" {
		fields = append(fields, kv("Exchange", jen.Id(m.Name+"Exchange")))
		doc += " to exchange " + commentText(pub.Exchange)
	} else {
		doc += fmt.Sprintf(" to queue %s, by the default exchange", commentText(pub.RoutingKey.For(v)))
	}
	switch k := pub.RoutingKey; {
	case k.Fixed != "":
		key := v.GoName + "RoutingKey"
		commentf(j, "%s is the routing key %s sends with.", key, name)
		j.Const().Id(key).Op("=").Lit(k.For(v))
		fields = append(fields, kv("RoutingKey", jen.Id(key)))
		if pub.Exchange != "" {
			doc += " with routing key " + k.For(v)
		}
	case k.Field != "" || k.Header != "":
		src, f, path := keyOf(v, k)
		fields = append(fields, kv("RoutingKey", src))
		doc += fmt.Sprintf(" with its %s as the routing key", keyWords(k))
		// A character may take 4 bytes: a key within max_length may still
		// be longer than AMQP carries.
		if f.Type == schema.String && *f.MaxLength*utf8.UTFMax > maxRoutingKey {
			src, _, _ := keyOf(v, k)
			checks = append(checks, jen.If(jen.Len(src).Op(">").Lit(maxRoutingKey)).Block(
				jen.Return(jen.Op("&").Qual(wire, "FieldError").Values(
					kv("Path", jen.Lit(path)), kv("Problem", jen.Lit(fmt.Sprintf("longer than %d bytes", maxRoutingKey)))))))
			doc += fmt.Sprintf("; one longer than %d bytes fails with a *wire.FieldError", maxRoutingKey)
		}
	}
	doc += "."
	if k := pub.OrderKey; k != nil {
		src, _, _ := keyOf(v, *k)
		fields = append(fields, kv("OrderKey", src))
		doc += fmt.Sprintf(" Its %s is the order key: an outbox sends the messages of one key in the order they were written.", keyWords(*k))
	}
	fields = append(fields, kv("Publishing", jen.Id("p")))
	params, args := producerParams(v, e)
	body := []jen.Code{
		jen.List(jen.Id("p"), jen.Err()).Op(":=").Id("New" + v.GoName).Call(args...),
		jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Err())),
	}
	body = append(body, checks...)
	body = append(body, jen.Return(jen.Id("s").Dot("Send").Call(jen.Id("ctx"), jen.Qual(rt, "Message").Values(multiline(fields...)...))))
	comment(j, doc)
	deprecated(j, m, v)
	j.Func().Id(name).Params(append([]jen.Code{jen.Id("ctx").Qual("context", "Context"), jen.Id("s").Qual(rt, "Sender")}, params...)...).
		Error().Block(body...)
}

// producerParams are the parameters of v's producers in envelope e, and
// the arguments that pass them on: a message id, except in a profile without
// ids, whose producers must not seem to send one, and the message.
func producerParams(v *schema.Version, e *schema.Envelope) (params, args []jen.Code) {
	params = []jen.Code{jen.Id("messageID").String(), jen.Id("msg").Op("*").Id(v.GoName)}
	args = []jen.Code{jen.Id("messageID"), jen.Id("msg")}
	if e.Profile.NoID {
		return params[1:], args[1:]
	}
	return params, args
}

// keyOf is the Go expression of key k of a message of version v, as a
// string, with the field or header it reads and its path in a
// *wire.FieldError. The schema makes it required and not nullable, so never
// a pointer.
func keyOf(v *schema.Version, k schema.Key) (*jen.Statement, *schema.Field, string) {
	fields, name, src := v.Fields, k.Field, jen.Id("msg")
	if k.Header != "" {
		fields, name, src = v.Headers, k.Header, jen.Id("msg").Dot("Headers")
	}
	f := fields[slices.IndexFunc(fields, func(f *schema.Field) bool { return f.Name == name })]
	path := f.Name
	if k.Header != "" {
		path = schema.HeaderPath(f.Name)
	}
	src = src.Dot(f.GoName)
	if f.Type == schema.Enum {
		return jen.String().Call(src), f, path
	}
	return src, f, path
}

// keyWords names the field or header k reads, such as "order_id field".
func keyWords(k schema.Key) string {
	if k.Header != "" {
		return k.Header + " header"
	}
	return k.Field + " field"
}

// commenter is where a comment goes: a file, or a group such as an
// interface's methods.
type commenter interface{ Comment(string) *jen.Statement }

// comment emits text as a doc comment, wrapped at 80 columns. Any run of
// white space in it, a newline in a header's name too, becomes one space.
func comment(c commenter, text string) {
	line := ""
	for w := range strings.FieldsSeq(text) {
		if line != "" && len(line)+1+len(w) > 77 {
			c.Comment(line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	c.Comment(line)
}

// commentf is comment of a format and its arguments.
func commentf(c commenter, format string, args ...any) { comment(c, fmt.Sprintf(format, args...)) }
