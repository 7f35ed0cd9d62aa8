package gen

import (
	"strconv"

	"github.com/dave/jennifer/jen"

	"github.com/lily-mq/lily/schema"
)

// extractor emits Extract<Version>, which decodes a body and checks it;
// routed says whether a queue's route reads v.
func extractor(j *jen.File, m *schema.Message, v *schema.Version, routed bool) {
	name := "Extract" + v.GoName
	doc := name + " decodes an application/json body and checks every bound of the schema. It fails with a *wire.FieldError."
	switch {
	case v.HeadersName == "":
	case routed:
		doc += " It leaves Headers empty: the route fills them in."
	default:
		doc += " It leaves Headers empty."
	}
	comment(j, doc)
	deprecated(j, m, v)
	j.Func().Id(name).Params(jen.Id("body").Index().Byte()).Params(jen.Op("*").Id(v.GoName), jen.Error()).Block(
		jen.Id("r").Op(":=").Qual(wire, "NewJSONReader").Call(jen.Id("body")),
		jen.Id("out").Op(":=").New(jen.Id(v.GoName)),
		jen.If(jen.Err().Op(":=").Id("r").Dot("End").Call(jen.Id("out").Dot("readJSON").Call(jen.Id("r"))), jen.Err().Op("!=").Nil()).Block(
			jen.Return(jen.Nil(), jen.Err()),
		),
		jen.Return(jen.Id("out"), jen.Nil()),
	)
}

func membersVar(structName string) string { return "members" + structName }

// reader emits the members of struct o and the method that reads o from JSON
// and checks it: a switch on the member, the reader's typed calls, the checks.
func reader(j *jen.File, o object) {
	members := make([]jen.Code, len(o.fields))
	for i, f := range o.fields {
		keys := []jen.Code{jen.Id("Name").Op(":").Lit(f.Name)}
		if f.Required {
			keys = append(keys, jen.Id("Required").Op(":").True())
		}
		if f.Required && f.Nullable {
			keys = append(keys, jen.Id("Nullable").Op(":").True())
		}
		members[i] = jen.Qual(wire, "JSONField").Values(keys...)
	}
	commentf(j, "%s are the members of %s, in schema order.", membersVar(o.name), o.name)
	j.Var().Id(membersVar(o.name)).Op("=").Qual(wire, "NewJSONFields").Call(multiline(members...)...)
	s := newScope()
	body := []jen.Code{jen.Id("o").Op(":=").Id("r").Dot("Object").Call(jen.Id(membersVar(o.name)))}
	var cases []jen.Code
	for i, f := range o.fields {
		if f.Default != nil && !isZero(f.Default) {
			body = append(body, jen.Id("out").Dot(f.GoName).Op("=").Add(defaultValue(f)))
		}
		dst := func() *jen.Statement { return jen.Id("out").Dot(f.GoName) }
		// The member's JSON name follows the case's colon, so that a reader
		// can follow the switch; a Block would put it on a line of its own.
		cases = append(cases, jen.Case(jen.Lit(i)).Comment(f.Name).
			Custom(jen.Options{Multi: true}, s.block().read(f, dst, f.Name, schema.LocalName(f.Name))...))
	}
	next := jen.Id("o").Dot("Next").Call(jen.Id("r"))
	loop := jen.For(next).Block()
	if len(cases) > 0 {
		loop = jen.For(next).Block(jen.Switch(jen.Id("o").Dot("Member").Call()).Block(cases...))
	}
	body = append(body, loop, jen.Return(jen.Id("o").Dot("End").Call()))
	commentf(j, "readJSON reads %s from r and checks it against the schema. Its FieldError paths are relative to the object: the caller prefixes them on failure only, so success builds no path.", o.name)
	j.Func().Params(jen.Id("out").Op("*").Id(o.name)).Id("readJSON").Params(jen.Id("r").Op("*").Qual(wire, "JSONReader")).
		Error().Block(body...)
}

func isZero(v any) bool { return v == "" || v == int64(0) || v == float64(0) || v == false }

func defaultValue(f *schema.Field) jen.Code {
	switch d := f.Default.(type) {
	case string:
		if f.Type == schema.Enum {
			return jen.Id(enumConst(f, d))
		}
		return jen.Lit(d)
	case int64:
		return jen.Id(strconv.FormatInt(d, 10))
	case float64:
		return jen.Id(schema.FormatFloat(d))
	}
	return jen.Lit(f.Default)
}

// readCalls are the reader's calls for the scalar types.
var readCalls = map[schema.Type]string{
	schema.String: "String", schema.Enum: "String", schema.Integer: "Int", schema.Number: "Float",
	schema.Bool: "Bool", schema.Time: "Time", schema.Bytes: "Bytes",
}

// read emits the reading of a non-null value of f from r, its checks, and
// its assignment to dst; problems are at path (empty for an element, whose
// path the runtime adds). local names the variable that holds the value.
func (s *scope) read(f *schema.Field, dst func() *jen.Statement, path, local string) []jen.Code {
	failed := jen.Return(jen.Err())
	if path != "" {
		failed = jen.Return(jen.Qual(wire, "At").Call(jen.Lit(path), jen.Err()))
	}
	if f.Type == schema.Object && !f.Pointer() {
		return []jen.Code{jen.If(jen.Err().Op(":=").Add(dst()).Dot("readJSON").Call(jen.Id("r")), jen.Err().Op("!=").Nil()).Block(failed)}
	}
	v := s.name(local)
	var out []jen.Code
	switch f.Type {
	case schema.Object:
		out = []jen.Code{
			jen.Var().Id(v).Id(f.GoPath),
			jen.If(jen.Err().Op(":=").Id(v).Dot("readJSON").Call(jen.Id("r")), jen.Err().Op("!=").Nil()).Block(failed),
		}
	case schema.List, schema.Map:
		call := map[schema.Type]string{schema.List: "JSONList", schema.Map: "JSONMap"}[f.Type]
		most := jen.Qual(wire, "Unbounded")
		if f.MaxItems != nil {
			most = jen.Lit(*f.MaxItems)
		}
		out = []jen.Code{
			jen.List(jen.Id(v), jen.Err()).Op(":=").Qual(wire, call).Call(jen.Id("r"), most, s.elemReader(f.Items)),
			jen.If(jen.Err().Op("!=").Nil()).Block(failed),
		}
		// The reader stops at one item past max_items; what is left to
		// check once it is read is min_items.
		least := *f
		least.MaxItems = nil
		out = append(out, checks(&least, jen.Len(jen.Id(v)), path, nil)...)
	default:
		out = []jen.Code{
			jen.List(jen.Id(v), jen.Err()).Op(":=").Id("r").Dot(readCalls[f.Type]).Call(),
			jen.If(jen.Err().Op("!=").Nil()).Block(failed),
		}
		switch f.Type {
		case schema.Enum:
			out = append(out, enumCheck(f, jen.Id(v), path, nil))
		case schema.Bytes:
			out = append(out, checks(f, jen.Len(jen.Id(v)), path, nil)...)
		default:
			out = append(out, checks(f, jen.Id(v), path, nil)...)
		}
	}
	return append(out, s.assign(f, v, dst())...)
}

// elemReader is the function literal that reads one element of a list or
// map from r, the caller's reader, which it uses rather than takes: a reader
// handed to a function value would be allocated on the heap.
func (s *scope) elemReader(f *schema.Field) jen.Code {
	b := s.block()
	elem := b.name("elem")
	var body []jen.Code
	if f.Type == schema.Object {
		body = []jen.Code{jen.Return(jen.Id(elem).Dot("readJSON").Call(jen.Id("r")))}
	} else {
		body = append(b.read(f, func() *jen.Statement { return jen.Op("*").Id(elem) }, "", "item"), jen.Return(jen.Nil()))
	}
	return jen.Func().Params(jen.Id(elem).Op("*").Add(valueType(f))).Error().Block(body...)
}

// assign stores v, the checked value of f, in dst: converted to f's enum or
// sized integer type, by address where f's Go type is a pointer.
func (s *scope) assign(f *schema.Field, v string, dst *jen.Statement) []jen.Code {
	conv := narrowed(f)
	if f.Type == schema.Enum {
		conv = jen.Id(f.GoPath)
	}
	switch {
	case conv != nil && f.Pointer():
		e := s.name("value")
		return []jen.Code{jen.Id(e).Op(":=").Add(conv).Call(jen.Id(v)), dst.Op("=").Op("&").Id(e)}
	case conv != nil:
		return []jen.Code{dst.Op("=").Add(conv).Call(jen.Id(v))}
	case f.Pointer():
		return []jen.Code{dst.Op("=").Op("&").Id(v)}
	}
	return []jen.Code{dst.Op("=").Id(v)}
}

// narrowed is the conversion of a checked value of f to its Go type: the
// integer type of an integer narrower than int64 (read as an int64, whose
// checks have kept it within the type's range); nil when none is needed.
func narrowed(f *schema.Field) *jen.Statement {
	if f.Type != schema.Integer || f.Int == schema.Int64 {
		return nil
	}
	return jen.Id(string(f.Int))
}
