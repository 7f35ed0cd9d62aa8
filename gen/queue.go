package gen

import (
	"fmt"
	"reflect"
	"time"

	"github.com/dave/jennifer/jen"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/schema"
)

func queue(j *jen.File, f *schema.File, q *schema.Queue, envs envelopeNames) {
	handler := q.GoName + "Handler"
	// A handler's nil alone is no ACK: the runtime settles by the whole outcome.
	commentf(j, "%s handles the messages queue %q consumes. Return nil on success: Lily ACKs "+
		"once the scope's cleanup and any required commit have succeeded too. Return "+
		"runtime.Retryable(err) or runtime.Permanent(err) to fail; a plain error is retryable.", handler, q.Name)
	j.Type().Id(handler).InterfaceFunc(func(g *jen.Group) {
		for _, c := range q.Consumes {
			for _, v := range c.Versions {
				commentf(g, "Handle%s handles version %d of %s.", v.GoName, v.Number, c.Message.Name)
				deprecated(g, c.Message, v)
				g.Id("Handle"+v.GoName).Params(
					jen.Id("ctx").Qual("context", "Context"),
					jen.Id("msg").Op("*").Id(v.GoName),
					jen.Id("d").Qual(rt, "RawDelivery"),
				).Error()
			}
		}
	})

	unimpl := "Unimplemented" + handler
	commentf(j, "%s fails every message of queue %q permanently. Embed it in your %s so that a version added to the schema does not break the build: until you write its method, messages of that version go to the DLQ.", unimpl, q.Name, handler)
	j.Type().Id(unimpl).Struct()
	for _, c := range q.Consumes {
		for _, v := range c.Versions {
			method := "Handle" + v.GoName
			commentf(j, "%s fails permanently: it is not implemented.", method)
			j.Func().Params(jen.Id(unimpl)).Id(method).Params(
				jen.Qual("context", "Context"), jen.Op("*").Id(v.GoName), jen.Qual(rt, "RawDelivery"),
			).Error().Block(
				jen.Return(jen.Qual(rt, "Permanent").Call(jen.Qual("errors", "New").Call(jen.Lit(method + " is not implemented")))),
			)
		}
	}

	specName := q.GoName + "QueueSpec"
	doc := fmt.Sprintf("%s returns the topology and policy of queue %q.", specName, q.Name)
	if q.ParkBudget {
		doc += fmt.Sprintf(" Its retries wait in line: runtime.NewConsumer gives it the settlement budget they need at the consumer's step timeout (up to %s at the default).", q.SettlementBudget)
	}
	comment(j, doc)
	j.Func().Id(specName).Params().Qual(rt, "QueueSpec").Block(jen.Return(jen.Qual(rt, "QueueSpec").Values(multiline(spec(f, q, envs)...)...)))

	routes := q.GoName + "Routes"
	commentf(j, "%s is the dispatch table of queue %q: (type, version, content type) → extractor → method.", routes, q.Name)
	j.Func().Id(routes).Params(jen.Id("h").Id(handler)).Qual(rt, "Routes").Block(
		jen.Return(jen.Qual(rt, "Routes").Values(multiline(routeEntries(q)...)...)),
	)

	ctor := "New" + q.GoName + "Consumer"
	newConsumer := jen.Return(jen.Qual(rt, "NewConsumer").Call(jen.Id(specName).Call(), jen.Id(routes).Call(jen.Id("h")), jen.Id("cfg")))
	if q.RequiresInbox() {
		// The queue requires the inbox: the constructor asks for one, so a
		// consumer without it does not compile.
		commentf(j, "%s returns a consumer of queue %q that calls h, each delivery claimed in inbox.", ctor, q.Name)
		j.Func().Id(ctor).Params(jen.Id("h").Id(handler), jen.Id("inbox").Qual(rt, "Inbox"), jen.Id("cfg").Qual(rt, "Config")).
			Params(jen.Op("*").Qual(rt, "Consumer"), jen.Error()).Block(
			jen.If(jen.Id("inbox").Op("==").Nil()).Block(
				jen.Return(jen.Nil(), jen.Qual("errors", "New").Call(jen.Lit(fmt.Sprintf("queue %q requires an inbox", q.Name)))),
			),
			jen.Id("cfg").Dot("Inbox").Op("=").Id("inbox"),
			newConsumer,
		)
		return
	}
	commentf(j, "%s returns a consumer of queue %q that calls h.", ctor, q.Name)
	j.Func().Id(ctor).Params(jen.Id("h").Id(handler), jen.Id("cfg").Qual(rt, "Config")).
		Params(jen.Op("*").Qual(rt, "Consumer"), jen.Error()).Block(newConsumer)
}

func kv(key string, v jen.Code) jen.Code { return jen.Id(key).Op(":").Add(v) }

func spec(f *schema.File, q *schema.Queue, envs envelopeNames) []jen.Code {
	out := []jen.Code{
		kv("Name", jen.Lit(q.Name)),
		kv("Topology", jen.Qual(topo, "Queue").Values(multiline(fields(reflect.ValueOf(f.QueueTopology(q)))...)...)),
		kv("Prefetch", jen.Lit(q.Prefetch)),
		kv("Concurrency", jen.Lit(q.Concurrency)),
	}
	if q.Ordering != nil {
		out = append(out, kv("OrderKey", orderKey(q.Ordering)))
	}
	out = append(out,
		kv("MaxAttempts", jen.Lit(q.Retry.MaxAttempts)),
		kv("MaxBodyBytes", jen.Lit(q.MaxBodyBytes)),
		kv("HandlerTimeout", duration(q.HandlerTimeout)),
	)
	// Left out, a zero budget takes the runtime's default; the one lilygen
	// derived for retries in line is NewConsumer's, which knows the step
	// timeout.
	if q.SettlementBudget > 0 && !q.ParkBudget {
		out = append(out, kv("SettlementBudget", duration(q.SettlementBudget)))
	}
	out = append(out, kv("Messages", jen.Index().Qual(envPkg, "Message").Values(multiline(messages(q, envs)...)...)))
	return out
}

// messages writes what q consumes as the runtime reads it: each message's
// wire type, envelope profile (left out for Lily's) and inbox policy.
func messages(q *schema.Queue, envs envelopeNames) []jen.Code {
	inbox := map[schema.Inbox]string{schema.InboxNone: "InboxNone", schema.InboxOptional: "InboxOptional", schema.InboxRequired: "InboxRequired"}
	var out []jen.Code
	for _, c := range q.Consumes {
		out = append(out, jen.Values(append(envs.message(c.Message, c.Envelope), kv("Inbox", jen.Qual(envPkg, inbox[c.Inbox])))...))
	}
	return out
}

// profile writes an envelope profile, its zero fields left out.
func profile(p envelope.Profile) jen.Code {
	kinds := map[envelope.Kind]string{envelope.CloudEvents: "CloudEvents", envelope.Headers: "Headers"}
	fields := []jen.Code{kv("Kind", jen.Qual(envPkg, kinds[p.Kind]))}
	str := func(key, v string) {
		if v != "" {
			fields = append(fields, kv(key, jen.Lit(v)))
		}
	}
	str("TypeHeader", p.TypeHeader)
	str("IDHeader", p.IDHeader)
	if p.NoID {
		fields = append(fields, kv("NoID", jen.True()))
	}
	var version []jen.Code
	v := p.Version
	for _, f := range []struct{ key, v string }{
		{"Header", v.Header}, {"Attribute", v.Attribute}, {"ContentTypeParameter", v.ContentTypeParameter}, {"TypeSuffix", v.TypeSuffix},
	} {
		if f.v != "" {
			version = append(version, kv(f.key, jen.Lit(f.v)))
		}
	}
	if v.Fixed != 0 {
		version = append(version, kv("Fixed", jen.Lit(v.Fixed)))
	}
	if len(version) > 0 {
		fields = append(fields, kv("Version", jen.Qual(envPkg, "Version").Values(version...)))
	}
	str("Source", p.Source)
	return jen.Qual(envPkg, "Profile").Values(fields...)
}

// orderKey writes the function that reads a delivery's order key: none for a
// sequential queue (every delivery shares one lane), a header's value, or a
// top-level field's, read no further than the field.
func orderKey(o *schema.Ordering) jen.Code {
	headers, body := jen.Id("_"), jen.Id("_")
	var key jen.Code = jen.Lit("")
	switch {
	case o.Header != "":
		headers = jen.Id("headers")
		key = jen.Qual(wire, "HeaderText").Call(jen.Id("headers").Index(jen.Lit(o.Header)))
	case o.Field != "":
		body = jen.Id("body")
		key = jen.Qual(wire, "MemberText").Call(jen.Id("body"), jen.Lit(o.Field))
	}
	return jen.Func().Params(headers.Map(jen.String()).Any(), body.Index().Byte()).String().Block(jen.Return(key))
}

var units = []struct {
	d    time.Duration
	name string
}{
	{time.Hour, "Hour"}, {time.Minute, "Minute"}, {time.Second, "Second"},
	{time.Millisecond, "Millisecond"}, {time.Microsecond, "Microsecond"},
}

// duration writes a positive d in the largest unit that divides it, such as
// time.Second, 5 * time.Second or 1500 * time.Millisecond.
func duration(d time.Duration) jen.Code {
	for _, u := range units {
		if d%u.d == 0 {
			if d == u.d {
				return jen.Qual("time", u.name)
			}
			return jen.Lit(int(d/u.d)).Op("*").Qual("time", u.name)
		}
	}
	return jen.Lit(int(d)).Op("*").Qual("time", "Nanosecond")
}

func routeEntries(q *schema.Queue) []jen.Code {
	var out []jen.Code
	for _, c := range q.Consumes {
		for _, v := range c.Versions {
			for _, ct := range v.ContentTypes {
				key := jen.Values(
					jen.Id("Type").Op(":").Id(c.Message.Name+"Type"),
					jen.Id("Version").Op(":").Lit(v.Number),
					jen.Id("ContentType").Op(":").Lit(ct),
				)
				body := []jen.Code{
					jen.List(jen.Id("msg"), jen.Err()).Op(":=").Id("Extract" + v.GoName).Call(jen.Id("d").Dot("Body").Call()),
					jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Qual(rt, "Permanent").Call(jen.Err()))),
				}
				if v.HeadersName != "" {
					body = append(body,
						jen.If(
							jen.List(jen.Id("msg").Dot("Headers"), jen.Err()).Op("=").Id(headersExtractor(v)).Call(jen.Id("d").Dot("Header")),
							jen.Err().Op("!=").Nil(),
						).Block(jen.Return(jen.Qual(rt, "Permanent").Call(jen.Err()))))
				}
				body = append(body, jen.Return(jen.Id("h").Dot("Handle"+v.GoName).Call(jen.Id("ctx"), jen.Id("msg"), jen.Id("d"))))
				out = append(out, key.Op(":").Func().Params(
					jen.Id("ctx").Qual("context", "Context"),
					jen.Id("d").Qual(rt, "RawDelivery"),
				).Error().Block(body...))
			}
		}
	}
	return out
}
