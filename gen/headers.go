package gen

import (
	"fmt"
	"strconv"

	"github.com/dave/jennifer/jen"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/schema"
)

func headersExtractor(v *schema.Version) string { return "extract" + v.HeadersName }

// uses says what reads a version's typed headers: a queue's route, from the
// delivery's envelope, and a producer, from the publishing's table.
type uses struct{ routed, produced bool }

// words says what fills in or sends the headers, as the clause after a
// colon; "" when nothing does.
func (u uses) words() string {
	switch {
	case u.routed && u.produced:
		return "the route fills them in, a producer sends them"
	case u.routed:
		return "the route fills them in"
	case u.produced:
		return "a producer sends them"
	}
	return ""
}

// headers emits the typed headers' struct of v and, where u says anything
// reads them, the function that reads them from a header lookup.
func headers(j *jen.File, v *schema.Version, u uses) {
	commentf(j, "%s are the typed headers of %s.", v.HeadersName, v.GoName)
	j.Type().Id(v.HeadersName).StructFunc(func(g *jen.Group) {
		for _, f := range v.Headers {
			field := g.Id(f.GoName).Add(publicType(f))
			c := "header " + f.Name
			if f.Type == schema.Time {
				c += "; sent in whole seconds, UTC"
			}
			if d := describe(f); d != "" {
				c += "; " + d
			}
			if schema.HeaderBytesChecked(f) {
				c += fmt.Sprintf("; at most %d bytes", envelope.MaxHeaderValueBytes)
			}
			field.Comment(c)
		}
	})
	if !u.routed && !u.produced {
		return
	}
	zero := jen.Id(v.HeadersName).Values()
	body := []jen.Code{jen.Var().Id("out").Id(v.HeadersName)}
	s := newScope()
	for _, f := range v.Headers {
		p := schema.HeaderPath(f.Name)
		b := s.block()
		local := b.name(schema.LocalName(f.Name))
		present := []jen.Code{
			jen.List(jen.Id(local), jen.Id("ok")).Op(":=").Add(headerRead(f)),
			jen.If(jen.Op("!").Id("ok")).Block(failWith(zero, p, schema.HeaderTypeProblem(f.Type))),
		}
		if schema.HeaderBytesChecked(f) {
			// A producer must not send what a consumer's guard refuses.
			present = append(present,
				jen.Comment("A consumer's guard takes at most "+strconv.Itoa(envelope.MaxHeaderValueBytes)+" bytes in one header value."),
				jen.If(jen.Len(jen.Id(local)).Op(">").Lit(envelope.MaxHeaderValueBytes)).Block(
					failWith(zero, p, fmt.Sprintf("longer than %d bytes", envelope.MaxHeaderValueBytes))))
		}
		if f.Type == schema.String {
			// A body's strings are UTF-8 by the JSON reader; a header's are
			// whatever bytes the producer wrote.
			present = append(present, jen.If(jen.Op("!").Qual("unicode/utf8", "ValidString").Call(jen.Id(local))).Block(failWith(zero, p, schema.HeaderNotUTF8)))
		}
		if f.Type == schema.Enum {
			present = append(present, enumCheck(f, jen.Id(local), p, zero))
		} else {
			present = append(present, checks(f, jen.Id(local), p, zero)...)
		}
		present = append(present, b.assign(f, local, jen.Id("out").Dot(f.GoName))...)
		stmt := jen.If(
			jen.List(jen.Id("raw"), jen.Id("ok")).Op(":=").Id("header").Call(jen.Lit(f.Name)),
			jen.Id("ok").Op("&&").Id("raw").Op("!=").Nil(),
		).Block(present...)
		if f.Required {
			stmt.Else().Block(failWith(zero, p, "required"))
		}
		body = append(body, stmt)
	}
	body = append(body, jen.Return(jen.Id("out"), jen.Nil()))
	lookup := "received or about to be sent"
	if !u.produced {
		lookup = "received"
	} else if !u.routed {
		lookup = "about to be sent"
	}
	commentf(j, "%s reads and checks the typed headers of %s from header, a lookup of the headers %s. It fails with a *wire.FieldError.", headersExtractor(v), v.GoName, lookup)
	j.Func().Id(headersExtractor(v)).Params(jen.Id("header").Func().Params(jen.String()).Params(jen.Any(), jen.Bool())).
		Params(jen.Id(v.HeadersName), jen.Error()).Block(body...)
}

// headerRead converts raw, an AMQP table value, to f's Go type, as (value, ok).
func headerRead(f *schema.Field) jen.Code {
	switch f.Type {
	case schema.Integer:
		return jen.Qual(wire, "HeaderInt").Call(jen.Id("raw"))
	case schema.Number:
		return jen.Qual(wire, "HeaderNumber").Call(jen.Id("raw"))
	case schema.Time:
		return jen.Qual(wire, "HeaderTime").Call(jen.Id("raw"))
	case schema.Bool:
		return jen.Id("raw").Assert(jen.Bool())
	}
	return jen.Id("raw").Assert(jen.String())
}
