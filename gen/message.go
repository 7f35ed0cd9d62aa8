package gen

import (
	"fmt"
	"go/token"
	"maps"
	"strconv"
	"strings"
	"unicode"

	"github.com/dave/jennifer/jen"

	"github.com/lily-mq/lily/schema"
)

func message(j *jen.File, m *schema.Message) {
	j.Commentf("%sType is the AMQP type of %s messages.", m.Name, m.Name)
	j.Const().Id(m.Name + "Type").Op("=").Lit(m.Name)
	for _, v := range m.Versions {
		objs := objects(m, v)
		for _, o := range objs {
			j.Comment(o.doc)
			j.Type().Id(o.name).StructFunc(func(g *jen.Group) {
				for _, f := range o.fields {
					tag := f.Name
					if !f.Required {
						tag += ",omitempty"
					}
					field := g.Id(f.GoName).Add(publicType(f)).Tag(map[string]string{"json": tag})
					if b := describeBounds(f); b != "" {
						field.Comment(b)
					}
				}
			})
		}
		extractor(j, v)
		for _, o := range objs {
			wire(j, o)
		}
	}
}

// object is one Go struct of a version: the payload or an object field's.
type object struct {
	name, doc string
	fields    []*schema.Field
}

// objects lists the structs of version v: the payload, then each object
// field's struct, depth first in field order.
func objects(m *schema.Message, v *schema.Version) []object {
	out := []object{{name: v.GoName, doc: fmt.Sprintf("%s is version %d of %s.", v.GoName, v.Number, m.Name), fields: v.Fields}}
	var walk func(parent string, fields []*schema.Field)
	walk = func(parent string, fields []*schema.Field) {
		for _, f := range fields {
			role := "the " + f.Name + " field"
			for t := f; t != nil; t = t.Items {
				if t.Type == schema.Object {
					out = append(out, object{name: t.StructName, doc: fmt.Sprintf("%s is %s of %s.", t.StructName, role, parent), fields: t.Fields})
					walk(t.StructName, t.Fields)
				}
				role = "an element of " + role
			}
		}
	}
	walk(v.GoName, v.Fields)
	return out
}

// valueType is the Go type of a present value of f.
func valueType(f *schema.Field) jen.Code {
	switch f.Type {
	case schema.String:
		return jen.String()
	case schema.Integer:
		return jen.Int64()
	case schema.Number:
		return jen.Float64()
	case schema.Bool:
		return jen.Bool()
	case schema.Time:
		return jen.Qual("time", "Time")
	case schema.Object:
		return jen.Id(f.StructName)
	}
	return jen.Index().Add(valueType(f.Items))
}

// publicType is f's type in a payload struct: optional values are pointers,
// except lists, whose nil already says "absent".
func publicType(f *schema.Field) jen.Code {
	if f.Required || f.Type == schema.List {
		return valueType(f)
	}
	return jen.Op("*").Add(valueType(f))
}

// wireType is f's type as decoded. Every value is a pointer so that a missing
// or null one shows as nil; times stay strings so that a bad one is reported
// at its own path.
func wireType(f *schema.Field) jen.Code {
	var t jen.Code
	switch f.Type {
	case schema.Time:
		t = jen.String()
	case schema.Object:
		t = jen.Id(wireName(f.StructName))
	case schema.List:
		t = jen.Index().Add(wireType(f.Items))
	default:
		t = valueType(f)
	}
	return jen.Op("*").Add(t)
}

func wireName(structName string) string { return "wire" + structName }

func extractor(j *jen.File, v *schema.Version) {
	name := "Extract" + v.GoName
	j.Commentf("%s decodes an application/json body and checks every bound of the schema.", name)
	j.Comment("It fails with a *runtime.FieldError.")
	j.Func().Id(name).Params(jen.Id("body").Index().Byte()).Params(jen.Op("*").Id(v.GoName), jen.Error()).Block(
		jen.Var().Id("w").Id(wireName(v.GoName)),
		jen.If(jen.Err().Op(":=").Qual("encoding/json", "Unmarshal").Call(jen.Id("body"), jen.Op("&").Id("w")), jen.Err().Op("!=").Nil()).Block(
			jen.Return(jen.Nil(), jen.Qual(rt, "DecodeError").Call(jen.Err())),
		),
		jen.Return(jen.Id("w").Dot("extract").Call(jen.Lit(""))),
	)
}

// wire emits the decoded form of struct o and the method that checks it and
// converts it to o.
func wire(j *jen.File, o object) {
	name := wireName(o.name)
	j.Commentf("%s is %s as decoded: every field is a pointer, so a missing one shows.", name, o.name)
	j.Type().Id(name).StructFunc(func(g *jen.Group) {
		for _, f := range o.fields {
			g.Id(f.GoName).Add(wireType(f)).Tag(map[string]string{"json": f.Name})
		}
	})
	s := newScope()
	var body []jen.Code
	body = append(body, jen.Var().Id("out").Id(o.name))
	for _, f := range o.fields {
		body = append(body, s.field(f)...)
	}
	body = append(body, jen.Return(jen.Op("&").Id("out"), jen.Nil()))
	j.Comment("extract checks w against the schema and converts it; prefix starts every field path.")
	j.Func().Params(jen.Id("w").Op("*").Id(name)).Id("extract").Params(jen.Id("prefix").String()).
		Params(jen.Op("*").Id(o.name), jen.Error()).Block(body...)
}

// scope hands out the local variable names of one extract method.
type scope map[string]bool

func newScope() scope {
	s := scope{}
	// The method's own names, the imported packages and Go's predeclared
	// identifiers are never reused for a local.
	for _, name := range strings.Fields(`w out prefix err n
		context encoding json errors runtime strconv time utf8
		bool byte error false float64 int int64 len make nil rune string true`) {
		s[name] = true
	}
	return s
}

// block is the scope of a block inside s: its names may be reused once the
// block ends.
func (s scope) block() scope { return maps.Clone(s) }

func (s scope) name(base string) string {
	name := base
	for i := 2; s[name] || token.IsKeyword(name); i++ {
		name = base + strconv.Itoa(i)
	}
	s[name] = true
	return name
}

// lowerCamel turns an exported Go name into a local one, lowering a leading
// initialism whole: OrderID → orderID, URLPath → urlPath, SKU → sku.
func lowerCamel(name string) string {
	r := []rune(name)
	upper := 0
	for upper < len(r) && unicode.IsUpper(r[upper]) {
		upper++
	}
	if upper > 1 && upper < len(r) {
		upper-- // the last capital starts the next word
	}
	for i := range upper {
		r[i] = unicode.ToLower(r[i])
	}
	return string(r)
}

// fieldPath is the expression of a field's path for FieldError: a variable
// holding the prefix, then literal text.
type fieldPath struct{ v, lit string }

func (p fieldPath) add(s string) fieldPath { return fieldPath{p.v, p.lit + s} }

func (p fieldPath) code() *jen.Statement {
	if p.lit == "" {
		return jen.Id(p.v)
	}
	return jen.Id(p.v).Op("+").Lit(p.lit)
}

func fail(p fieldPath, problem string) jen.Code {
	return jen.Return(jen.Nil(), fieldError(p.code(), jen.Lit(problem)))
}

// field emits the checks of struct field f and its copy into out.
func (s scope) field(f *schema.Field) []jen.Code {
	src := func() *jen.Statement { return jen.Id("w").Dot(f.GoName) }
	dst := func() *jen.Statement { return jen.Id("out").Dot(f.GoName) }
	p := fieldPath{v: "prefix"}.add(f.Name)
	if !f.Required {
		return []jen.Code{jen.If(src().Op("!=").Nil()).Block(s.block().value(f, src, dst, p, lowerCamel(f.GoName))...)}
	}
	return append([]jen.Code{jen.If(src().Op("==").Nil()).Block(fail(p, "required"))},
		s.value(f, src, dst, p, lowerCamel(f.GoName))...)
}

// value emits the checks of a present wire value src (a non-nil pointer) of
// field f at path p and its conversion into dst; local names a variable that
// holds the converted value where one is needed.
func (s scope) value(f *schema.Field, src, dst func() *jen.Statement, p fieldPath, local string) []jen.Code {
	ptr := !f.Required && f.Type != schema.List
	val := func() *jen.Statement { return jen.Op("*").Add(src()) }
	switch f.Type {
	case schema.Time, schema.Object:
		v := s.name(local)
		var call jen.Code
		problem := []jen.Code{jen.Return(jen.Nil(), jen.Err())}
		if f.Type == schema.Time {
			call = jen.Qual("time", "Parse").Call(jen.Qual("time", "RFC3339"), val())
			problem = []jen.Code{fail(p, "not an RFC 3339 time")}
		} else {
			call = src().Dot("extract").Call(p.add(".").code())
		}
		// time.Parse gives a value and extract a pointer.
		var set jen.Code
		switch {
		case f.Type == schema.Object && ptr, f.Type == schema.Time && !ptr:
			set = jen.Id(v)
		case f.Type == schema.Object:
			set = jen.Op("*").Id(v)
		default:
			set = jen.Op("&").Id(v)
		}
		return []jen.Code{
			jen.List(jen.Id(v), jen.Err()).Op(":=").Add(call),
			jen.If(jen.Err().Op("!=").Nil()).Block(problem...),
			dst().Op("=").Add(set),
		}
	case schema.List:
		body := s.block()
		i, item, path := body.name("i"), body.name("item"), body.name("path")
		elem := fieldPath{v: path}
		return append(checks(f, jen.Len(val()), p),
			dst().Op("=").Make(valueType(f), jen.Len(val())),
			jen.For(jen.List(jen.Id(i), jen.Id(item)).Op(":=").Range().Add(val())).Block(
				append([]jen.Code{
					jen.Id(path).Op(":=").Add(p.add("[").code()).Op("+").Qual("strconv", "Itoa").Call(jen.Id(i)).Op("+").Lit("]"),
					jen.If(jen.Id(item).Op("==").Nil()).Block(fail(elem, "required")),
				}, body.value(f.Items, func() *jen.Statement { return jen.Id(item) },
					func() *jen.Statement { return dst().Index(jen.Id(i)) }, elem, "elem")...)...,
			),
		)
	}
	set := val()
	if ptr {
		set = src()
	}
	return append(checks(f, val(), p), dst().Op("=").Add(set))
}

// limits are a field's bounds as Go source ("" when unset), with the problem
// each names when broken and the unit the struct field's comment counts in.
type limits struct {
	lo, hi               string
	loProblem, hiProblem string
	unit                 string
}

func limitsOf(f *schema.Field) limits {
	var l limits
	switch f.Type {
	case schema.String:
		l = lengths(f.MinLength, f.MaxLength, "character")
		l.loProblem, l.hiProblem = "shorter than "+l.loProblem, "longer than "+l.hiProblem
	case schema.List:
		l = lengths(f.MinItems, f.MaxItems, "item")
		l.loProblem, l.hiProblem = "fewer than "+l.loProblem, "more than "+l.hiProblem
	case schema.Integer:
		l.lo, l.hi = format(f.MinInt, func(v int64) string { return strconv.FormatInt(v, 10) }),
			format(f.MaxInt, func(v int64) string { return strconv.FormatInt(v, 10) })
		l.loProblem, l.hiProblem = "less than "+l.lo, "more than "+l.hi
	case schema.Number:
		l.lo, l.hi = format(f.MinNum, formatFloat), format(f.MaxNum, formatFloat)
		l.loProblem, l.hiProblem = "less than "+l.lo, "more than "+l.hi
	}
	if l.lo == "1" && (f.Type == schema.String || f.Type == schema.List) {
		l.loProblem = "empty"
	}
	return l
}

// lengths are length bounds; a minimum of 0 is left out since every length
// meets it. The problems hold the counted unit, still to be prefixed.
func lengths(lo, hi *int, unit string) limits {
	l := limits{hi: format(hi, strconv.Itoa), unit: " " + unit + "s"}
	if lo != nil && *lo > 0 {
		l.lo = strconv.Itoa(*lo)
	}
	l.loProblem, l.hiProblem = count(l.lo, unit), count(l.hi, unit)
	return l
}

func count(n, unit string) string {
	if n == "1" {
		return n + " " + unit
	}
	return n + " " + unit + "s"
}

func format[T any](v *T, f func(T) string) string {
	if v == nil {
		return ""
	}
	return f(*v)
}

func formatFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// describeBounds states f's bounds for the comment of its struct field.
func describeBounds(f *schema.Field) string {
	l := limitsOf(f)
	switch {
	case l.lo != "" && l.hi != "":
		return l.lo + " to " + l.hi + l.unit
	case l.lo != "":
		return "at least " + l.lo + l.unit
	case l.hi != "":
		return "at most " + l.hi + l.unit
	}
	return ""
}

// checks emits the bound checks of value v of field f at path p.
func checks(f *schema.Field, v jen.Code, p fieldPath) []jen.Code {
	l := limitsOf(f)
	subject := jen.Add(v)
	if f.Type == schema.String {
		subject = jen.Qual("unicode/utf8", "RuneCountInString").Call(v)
	}
	switch {
	case l.lo == "" && l.hi == "":
		return nil
	case l.hi == "":
		return []jen.Code{jen.If(subject.Op("<").Id(l.lo)).Block(fail(p, l.loProblem))}
	case l.lo == "":
		return []jen.Code{jen.If(subject.Op(">").Id(l.hi)).Block(fail(p, l.hiProblem))}
	}
	// Both bounds share one count of a string's characters.
	var init jen.Code = jen.Null()
	if f.Type == schema.String {
		init, subject = jen.Id("n").Op(":=").Add(subject), jen.Id("n")
	}
	return []jen.Code{jen.Switch(init, jen.Empty()).Block(
		jen.Case(jen.Add(subject).Op("<").Id(l.lo)).Block(fail(p, l.loProblem)),
		jen.Case(jen.Add(subject).Op(">").Id(l.hi)).Block(fail(p, l.hiProblem)),
	)}
}
