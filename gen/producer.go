package gen

import (
	"github.com/dave/jennifer/jen"

	"github.com/lily-mq/lily/schema"
)

// producer emits New<Version>: the publishing of a message in Lily's
// canonical envelope, checked by the consumer's own extractors first.
func producer(j *jen.File, m *schema.Message, v *schema.Version) {
	name := "New" + v.GoName
	fail := jen.Return(jen.Qual(rt, "Publishing").Values(), jen.Err())
	body := []jen.Code{
		jen.List(jen.Id("body"), jen.Err()).Op(":=").Qual("encoding/json", "Marshal").Call(jen.Id("msg")),
		jen.If(jen.Err().Op("!=").Nil()).Block(fail),
		// A round trip through the extractor checks every bound, so that a
		// consumer never receives what this producer sends and refuses.
		jen.If(jen.List(jen.Id("_"), jen.Err()).Op(":=").Id("Extract"+v.GoName).Call(jen.Id("body")), jen.Err().Op("!=").Nil()).Block(fail),
	}
	publishing := jen.Qual(rt, "NewPublishing").Call(jen.Id(m.Name+"Type"), jen.Lit(v.Number), jen.Id("messageID"), jen.Id("body"))
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
		set := jen.Id("p").Dot("Headers").Index(jen.Lit(f.Name)).Op("=").Add(src)
		if f.Pointer() {
			set = jen.If(jen.Id("msg").Dot("Headers").Dot(f.GoName).Op("!=").Nil()).Block(set)
		}
		body = append(body, set)
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
	j.Commentf("%s returns msg as a persistent publishing in Lily's canonical envelope", name)
	j.Commentf("(type %s, version %d, message id messageID), the payload as JSON.", m.Name, v.Number)
	if v.HeadersName != "" {
		j.Comment("msg.Headers are among its headers.")
	}
	j.Comment("Like a consumer, it checks msg against the schema first, failing with a *wire.FieldError.")
	deprecated(j, m, v)
	j.Func().Id(name).Params(jen.Id("messageID").String(), jen.Id("msg").Op("*").Id(v.GoName)).
		Params(jen.Qual(rt, "Publishing"), jen.Error()).Block(body...)
}
