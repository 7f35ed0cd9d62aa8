package gen

import (
	"slices"
	"strings"

	"github.com/dave/jennifer/jen"

	"github.com/lily-mq/lily/schema"
)

// checkMarshal is the method of a payload's struct that a producer calls
// before json.Marshal.
const checkMarshal = "checkMarshal"

// notUTF8 is the problem of a body string that is not UTF-8, as of a header.
const notUTF8 = schema.HeaderNotUTF8

// offsetProblem is the problem of a time whose zone offset has seconds.
const offsetProblem = "zone offset not in whole minutes"

// The problems of what encoding/json refuses to marshal, failing without the
// field's path: a number NaN or infinite (the problem of such a header), a
// time whose year has other than four digits in RFC 3339, or whose zone
// offset has other than two digits of hours.
const (
	notANumber       = "not a number"
	yearProblem      = "year not in 0 to 9999"
	dayOffsetProblem = "zone offset of 24 hours or more"
)

// dayOffset is a zone offset of 24 hours, in seconds: RFC 3339 writes less.
const dayOffset = 24 * 60 * 60

// marshalChecks tells of each shared type whether a value of it holds
// something checkMarshal checks, whether it holds a time and whether it
// holds a number. It is filled before a file's parts render, in parallel,
// and only read after.
type marshalChecks struct {
	checks, times, numbers map[string]bool
}

// marshalChecksOf answers each of f's shared types once: walking a type
// again at each use would take time exponential in how deep types nest (30
// types, each of two fields of the one before, reach the first 2^29 times).
func marshalChecksOf(f *schema.File) marshalChecks {
	return marshalChecks{
		checks:  answerTypes(f.Types, marshalChecked),
		times:   answerTypes(f.Types, holds(schema.Time)),
		numbers: answerTypes(f.Types, holds(schema.Number)),
	}
}

// answerTypes keeps step's answer for each of the shared types, walking
// each once: inner, which step asks of a field's fields and items, gives
// the kept answer of a shared type it has met before.
func answerTypes(types []*schema.Field, step func(f *schema.Field, inner func(*schema.Field) bool) bool) map[string]bool {
	c := map[string]bool{}
	var answer func(f *schema.Field) bool
	answer = func(f *schema.Field) bool {
		if v, ok := c[f.Named]; ok {
			return v
		}
		v := step(f, answer)
		if f.Named != "" {
			c[f.Named] = v
		}
		return v
	}
	for _, t := range types {
		answer(t)
	}
	return c
}

// checked reports whether a value of f holds something checkMarshal checks.
func (c marshalChecks) checked(f *schema.Field) bool {
	if f.Named != "" {
		return c.checks[f.Named]
	}
	return marshalChecked(f, c.checked)
}

// timed reports whether a value of f holds a time.
func (c marshalChecks) timed(f *schema.Field) bool {
	if f.Named != "" {
		return c.times[f.Named]
	}
	return holds(schema.Time)(f, c.timed)
}

// numbered reports whether a value of f holds a number.
func (c marshalChecks) numbered(f *schema.Field) bool {
	if f.Named != "" {
		return c.numbers[f.Named]
	}
	return holds(schema.Number)(f, c.numbered)
}

// any reports whether an object of fields gets a checkMarshal: whether one
// of them holds something it checks. A producer calls the method when it
// does.
func (c marshalChecks) any(fields []*schema.Field) bool {
	return slices.ContainsFunc(fields, c.checked)
}

// holds returns the step that reports whether a value of f holds a value of
// type t; inner answers of f's fields and items.
func holds(t schema.Type) func(f *schema.Field, inner func(*schema.Field) bool) bool {
	return func(f *schema.Field, inner func(*schema.Field) bool) bool {
		switch f.Type {
		case t:
			return true
		case schema.List, schema.Map:
			return inner(f.Items)
		case schema.Object:
			return slices.ContainsFunc(f.Fields, inner)
		}
		return false
	}
}

// marshalChecked reports whether a value of f holds something encoding/json
// would send other than it is, or refuse without naming the field: a string
// or an enum (a map's keys are strings), which it would send with U+FFFD for
// each byte that is not UTF-8; a time, whose zone offset RFC 3339 writes in
// minutes, dropping any seconds (the local mean time of old zone data,
// +00:19:32), and so the instant with them, and which it refuses beyond
// RFC 3339's years and offsets; or a number, which it refuses NaN or
// infinite. An enum is checked too, though the extractor refuses what is not
// one of its values: a value may hold U+FFFD, which a Go value with a byte
// that is not UTF-8 in its place would be sent as. inner answers of f's
// fields and items.
func marshalChecked(f *schema.Field, inner func(*schema.Field) bool) bool {
	switch f.Type {
	case schema.String, schema.Enum, schema.Map, schema.Time, schema.Number:
		return true
	case schema.List:
		return inner(f.Items)
	case schema.Object:
		return slices.ContainsFunc(f.Fields, inner)
	}
	return false
}

// producedTypes are the shared types whose checkMarshal a producer of f
// calls: those the produced messages reach.
func producedTypes(f *schema.File) map[string]bool {
	out := map[string]bool{}
	for _, m := range f.Messages {
		if e, _, _ := f.ProducedIn(m); e != nil {
			for _, v := range m.Versions {
				for _, n := range v.SharedTypes() {
					out[n] = true
				}
			}
		}
	}
	return out
}

// marshalCheck emits o's checkMarshal, when o holds anything it checks: it
// fails where encoding/json would send other than o holds, naming the field.
func marshalCheck(j *jen.File, c marshalChecks, o object) {
	if !c.any(o.fields) {
		return
	}
	s := newScope()
	var body []jen.Code
	for _, f := range o.fields {
		body = append(body, s.marshalField(c, f, jsonPath{f.Name})...)
	}
	body = append(body, jen.Return(jen.Nil()))
	verb, what := "send changed", []string{"a string that is not UTF-8 (sent with U+FFFD)"}
	if slices.ContainsFunc(o.fields, c.numbered) {
		verb, what = "send changed or refuse", append(what, "a number NaN or infinite (refused)")
	}
	if slices.ContainsFunc(o.fields, c.timed) {
		verb, what = "send changed or refuse", append(what, "a time whose zone offset has seconds (dropped) or whose year or offset RFC 3339 cannot write (refused)")
	}
	comment(j, checkMarshal+" fails on what encoding/json would "+verb+": "+strings.Join(what, ", ")+".")
	j.Func().Params(jen.Id("out").Op("*").Id(o.name)).Id(checkMarshal).Params().Error().Block(body...)
}

// marshalField emits the checks of field f of out, at p.
func (s *scope) marshalField(c marshalChecks, f *schema.Field, p jsonPath) []jen.Code {
	v := func() *jen.Statement { return jen.Id("out").Dot(f.GoName) }
	if !f.Pointer() {
		return s.marshalValue(c, f, v, p)
	}
	switch f.Type {
	case schema.String:
		return []jen.Code{jen.If(v().Op("!=").Nil().Op("&&").Op("!").Qual("unicode/utf8", "ValidString").Call(jen.Op("*").Add(v()))).Block(jen.Return(p.problem(notUTF8)))}
	case schema.Enum:
		return []jen.Code{jen.If(v().Op("!=").Nil().Op("&&").Op("!").Qual("unicode/utf8", "ValidString").Call(jen.String().Call(jen.Op("*").Add(v())))).Block(jen.Return(p.problem(notUTF8)))}
	case schema.Number:
		return []jen.Code{jen.If(v().Op("!=").Nil().Op("&&").Parens(notFinite(jen.Op("*").Add(v())))).Block(jen.Return(p.problem(notANumber)))}
	}
	// A pointer has its value's methods.
	checks := s.block().marshalValue(c, f, v, p)
	if len(checks) == 0 {
		return nil
	}
	return []jen.Code{jen.If(v().Op("!=").Nil()).Block(checks...)}
}

// marshalValue emits the checks of v, a present value of f, at p.
func (s *scope) marshalValue(c marshalChecks, f *schema.Field, v func() *jen.Statement, p jsonPath) []jen.Code {
	if !c.checked(f) {
		return nil
	}
	switch f.Type {
	case schema.String:
		return []jen.Code{jen.If(jen.Op("!").Qual("unicode/utf8", "ValidString").Call(v())).Block(jen.Return(p.problem(notUTF8)))}
	case schema.Enum:
		return []jen.Code{jen.If(jen.Op("!").Qual("unicode/utf8", "ValidString").Call(jen.String().Call(v()))).Block(jen.Return(p.problem(notUTF8)))}
	case schema.Number:
		return []jen.Code{jen.If(notFinite(v())).Block(jen.Return(p.problem(notANumber)))}
	case schema.Time:
		b := s.block()
		offset, year := b.name("offset"), b.name("year")
		return []jen.Code{
			jen.Switch(jen.List(jen.Id("_"), jen.Id(offset)).Op(":=").Add(v()).Dot("Zone").Call().Op(";")).Block(
				jen.Case(jen.Id(offset).Op("%").Lit(60).Op("!=").Lit(0)).Block(jen.Return(p.problem(offsetProblem))),
				jen.Case(jen.Id(offset).Op("<=").Lit(-dayOffset).Op("||").Id(offset).Op(">=").Lit(dayOffset)).Block(jen.Return(p.problem(dayOffsetProblem))),
			),
			jen.If(jen.Id(year).Op(":=").Add(v()).Dot("Year").Call(), jen.Id(year).Op("<").Lit(0).Op("||").Id(year).Op(">").Lit(9999)).Block(
				jen.Return(p.problem(yearProblem))),
		}
	case schema.Object:
		return []jen.Code{jen.If(jen.Err().Op(":=").Add(v()).Dot(checkMarshal).Call(), jen.Err().Op("!=").Nil()).Block(jen.Return(p.at(jen.Err())))}
	case schema.List:
		b := s.block()
		i := b.name("i")
		elem := func() *jen.Statement { return v().Index(jen.Id(i)) }
		return []jen.Code{jen.For(jen.Id(i).Op(":=").Range().Add(v())).Block(
			b.marshalValue(c, f.Items, elem, p.add("[", jen.Qual("strconv", "Itoa").Call(jen.Id(i)), "]"))...)}
	}
	// A map: its entries are checked in any order, and of those that fail,
	// the least key's error is returned, so that a map fails alike every
	// time.
	b := s.block()
	k := b.name("k")
	keyOK := jen.Qual("unicode/utf8", "ValidString").Call(jen.Id(k))
	if !c.checked(f.Items) {
		// A key that is not UTF-8 is never empty.
		badKey := s.name("badKey")
		return []jen.Code{
			jen.Var().Id(badKey).String(),
			jen.For(jen.Id(k).Op(":=").Range().Add(v())).Block(
				jen.If(jen.Op("!").Add(keyOK).Op("&&").Parens(jen.Id(badKey).Op("==").Lit("").Op("||").Id(k).Op("<").Id(badKey))).Block(
					jen.Id(badKey).Op("=").Id(k),
				),
			),
			jen.If(jen.Id(badKey).Op("!=").Lit("")).Block(
				jen.Return(p.add("[", jen.Qual("strconv", "Quote").Call(jen.Id(badKey)), "]").problem("key " + notUTF8)),
			),
		}
	}
	// Named before the values' checks are, which then cannot take the same
	// names again inside the loop and hide these.
	bad, badKey := s.name("bad"), s.name("badKey")
	item := b.name("item")
	values := b.block().marshalValue(c, f.Items, func() *jen.Statement { return jen.Id(item) }, jsonPath{})
	check := append([]jen.Code{jen.If(jen.Op("!").Add(keyOK)).Block(jen.Return(jsonPath{}.problem("key " + notUTF8)))}, values...)
	return []jen.Code{
		jen.Var().Id(bad).Error(),
		jen.Var().Id(badKey).String(),
		jen.For(jen.List(jen.Id(k), jen.Id(item)).Op(":=").Range().Add(v())).Block(
			jen.Err().Op(":=").Func().Params().Error().Block(append(check, jen.Return(jen.Nil()))...).Call(),
			jen.If(jen.Err().Op("!=").Nil().Op("&&").Parens(jen.Id(bad).Op("==").Nil().Op("||").Id(k).Op("<").Id(badKey))).Block(
				jen.List(jen.Id(bad), jen.Id(badKey)).Op("=").List(jen.Err(), jen.Id(k)),
			),
		),
		jen.If(jen.Id(bad).Op("!=").Nil()).Block(
			jen.Return(p.add("[", jen.Qual("strconv", "Quote").Call(jen.Id(badKey)), "]").at(jen.Id(bad))),
		),
	}
}

// notFinite is the test that the float64 x is NaN or infinite.
func notFinite(x jen.Code) jen.Code {
	return jen.Qual("math", "IsNaN").Call(x).Op("||").Qual("math", "IsInf").Call(x, jen.Lit(0))
}

// jsonPath is a value's path as generated code builds it on failure: text,
// and string expressions (the index or key of an element). Empty, the path
// is relative to the value the caller checks.
type jsonPath []any

func (p jsonPath) add(parts ...any) jsonPath { return append(slices.Clip(p), parts...) }

// expr joins the parts with +, the text of adjacent ones as one literal.
func (p jsonPath) expr() jen.Code {
	var out *jen.Statement
	text := ""
	join := func(c jen.Code) {
		if out == nil {
			out = jen.Add(c)
		} else {
			out = out.Op("+").Add(c)
		}
	}
	for _, part := range p {
		if t, ok := part.(string); ok {
			text += t
			continue
		}
		if text != "" {
			join(jen.Lit(text))
			text = ""
		}
		join(part.(jen.Code))
	}
	if text != "" {
		join(jen.Lit(text))
	}
	return out
}

// problem is a *wire.FieldError at p.
func (p jsonPath) problem(problem string) jen.Code {
	if len(p) == 0 {
		return jen.Op("&").Qual(wire, "FieldError").Values(kv("Problem", jen.Lit(problem)))
	}
	return fieldError(p.expr(), jen.Lit(problem))
}

// at is err, whose path is relative to the value at p, under p.
func (p jsonPath) at(err jen.Code) jen.Code {
	if len(p) == 0 {
		return err
	}
	return jen.Qual(wire, "At").Call(p.expr(), err)
}
