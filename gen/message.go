package gen

import (
	"fmt"
	"go/token"
	"slices"
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
		for i, o := range objs {
			j.Comment(o.doc)
			if i == 0 {
				deprecated(j, m, v)
			}
			j.Type().Id(o.name).StructFunc(func(g *jen.Group) {
				for _, f := range o.fields {
					tag := f.Name
					if !f.Required && f.Default == nil {
						tag += ",omitempty"
					}
					field := g.Id(f.GoName).Add(publicType(f)).Tag(map[string]string{"json": tag})
					if c := describe(f); c != "" {
						field.Comment(c)
					}
				}
				if i == 0 && v.HeadersName != "" {
					g.Comment("Headers are the typed headers: the route fills them in, a producer sends them.")
					g.Id("Headers").Id(v.HeadersName).Tag(map[string]string{"json": "-"})
				}
			})
		}
		walk(v, func(f *schema.Field, role string) {
			if f.Type == schema.Enum {
				enum(j, f, role)
			}
			if f.Pattern != "" {
				j.Commentf("%s checks %s; compiled once, when the package loads.", patternVar(f), role)
				j.Var().Id(patternVar(f)).Op("=").Qual("regexp", "MustCompile").Call(jen.Lit(f.Pattern))
			}
		})
		if v.HeadersName != "" {
			headers(j, v)
		}
		extractor(j, m, v)
		producer(j, m, v)
		for _, o := range objs {
			wire(j, o)
		}
	}
}

// deprecated writes the Deprecated paragraph of a version's declarations.
func deprecated(g interface{ Comment(string) *jen.Statement }, m *schema.Message, v *schema.Version) {
	if v.DeprecatedSince == "" {
		return
	}
	text := fmt.Sprintf("Deprecated: version %d of %s is deprecated since %s", v.Number, m.Name, v.DeprecatedSince)
	if v.RemoveAfter != "" {
		text += " and may be removed after " + v.RemoveAfter
	}
	g.Comment("")
	g.Comment(text + ".")
}

// walk calls fn for every field, element and header of v, with its role in
// words, such as "the sku field of OrderPlacedV2ItemsItem".
func walk(v *schema.Version, fn func(f *schema.Field, role string)) {
	var visit func(parent, kind string, fields []*schema.Field)
	visit = func(parent, kind string, fields []*schema.Field) {
		for _, f := range fields {
			role := fmt.Sprintf("the %s %s of %s", f.Name, kind, parent)
			for t := f; t != nil; t = t.Items {
				fn(t, role)
				visit(t.GoPath, "field", t.Fields)
				role = "an element of " + role
			}
		}
	}
	visit(v.GoName, "field", v.Fields)
	visit(v.GoName, "header", v.Headers)
}

func patternVar(f *schema.Field) string { return "pattern" + f.GoPath }

// commentText keeps schema text that holds control characters, such as a
// newline in a pattern, from breaking out of a comment: it is quoted.
func commentText(s string) string {
	if strings.ContainsFunc(s, unicode.IsControl) {
		return strconv.Quote(s)
	}
	return s
}

// enum emits an enum's string type and one constant per value.
func enum(j *jen.File, f *schema.Field, role string) {
	j.Commentf("%s is the type of %s: one of %s.", f.GoPath, role, commentText(strings.Join(f.Values, ", ")))
	j.Type().Id(f.GoPath).String()
	j.Commentf("The values of %s.", f.GoPath)
	j.Const().DefsFunc(func(g *jen.Group) {
		for _, val := range f.Values {
			g.Id(enumConst(f, val)).Id(f.GoPath).Op("=").Lit(val)
		}
	})
}

func enumConst(f *schema.Field, value string) string { return f.GoPath + schema.GoName(value) }

// object is one Go struct of a version: the payload or an object field's.
type object struct {
	name, doc string
	fields    []*schema.Field
}

// objects lists the structs of version v: the payload, then each object
// field's struct, depth first in field order.
func objects(m *schema.Message, v *schema.Version) []object {
	out := []object{{name: v.GoName, doc: fmt.Sprintf("%s is version %d of %s.", v.GoName, v.Number, m.Name), fields: v.Fields}}
	var visit func(parent string, fields []*schema.Field)
	visit = func(parent string, fields []*schema.Field) {
		for _, f := range fields {
			role := "the " + f.Name + " field"
			for t := f; t != nil; t = t.Items {
				if t.Type == schema.Object {
					out = append(out, object{name: t.GoPath, doc: fmt.Sprintf("%s is %s of %s.", t.GoPath, role, parent), fields: t.Fields})
					visit(t.GoPath, t.Fields)
				}
				role = "an element of " + role
			}
		}
	}
	visit(v.GoName, v.Fields)
	return out
}

// valueType is the Go type of a present value of f.
func valueType(f *schema.Field) jen.Code {
	switch f.Type {
	case schema.String:
		return jen.String()
	case schema.Integer:
		return jen.Id(string(f.Int))
	case schema.Number:
		return jen.Float64()
	case schema.Bool:
		return jen.Bool()
	case schema.Time:
		return jen.Qual("time", "Time")
	case schema.Bytes:
		return jen.Index().Byte()
	case schema.Enum, schema.Object:
		return jen.Id(f.GoPath)
	case schema.Map:
		return jen.Map(jen.String()).Add(valueType(f.Items))
	}
	return jen.Index().Add(valueType(f.Items))
}

// publicType is f's type in a payload or headers struct: a pointer where nil
// may be its value.
func publicType(f *schema.Field) jen.Code {
	if f.Pointer() {
		return jen.Op("*").Add(valueType(f))
	}
	return valueType(f)
}

// wireValue is f's type as decoded, before the pointer that shows a missing
// or null value. Strings that need parsing stay strings, so that a bad one is
// reported at its own path; integers are int64, narrowed once their range is
// checked.
func wireValue(f *schema.Field) jen.Code {
	switch f.Type {
	case schema.Time, schema.Bytes, schema.Enum:
		return jen.String()
	case schema.Integer:
		return jen.Int64()
	case schema.Object:
		return jen.Id(wireName(f.GoPath))
	case schema.List:
		return jen.Index().Add(wireType(f.Items))
	case schema.Map:
		return jen.Map(jen.String()).Add(wireType(f.Items))
	}
	return valueType(f)
}

func wireType(f *schema.Field) jen.Code { return jen.Op("*").Add(wireValue(f)) }

// presenceShown is true for a field that must be present but may be null:
// its wire type tells absent from null.
func presenceShown(f *schema.Field) bool { return f.Required && f.Nullable }

func wireName(structName string) string { return "wire" + structName }

// nullableType is the generic wire type of fields that must be present but
// may be null; emitted only when a schema has one.
const nullableType = "wireNullable"

func nullable(j *jen.File) {
	j.Commentf("%s is a value that must be present but may be null: set tells the two apart.", nullableType)
	j.Type().Id(nullableType).Types(jen.Id("T").Any()).Struct(
		jen.Id("set").Bool(),
		jen.Id("v").Op("*").Id("T"),
	)
	j.Comment("UnmarshalJSON records that the value is present, even when it is null.")
	j.Func().Params(jen.Id("n").Op("*").Id(nullableType).Types(jen.Id("T"))).Id("UnmarshalJSON").
		Params(jen.Id("b").Index().Byte()).Error().Block(
		jen.Id("n").Dot("set").Op("=").True(),
		jen.Return(jen.Qual("encoding/json", "Unmarshal").Call(jen.Id("b"), jen.Op("&").Id("n").Dot("v"))),
	)
}

func extractor(j *jen.File, m *schema.Message, v *schema.Version) {
	name := "Extract" + v.GoName
	j.Commentf("%s decodes an application/json body and checks every bound of the schema.", name)
	if v.HeadersName == "" {
		j.Comment("It fails with a *runtime.FieldError.")
	} else {
		j.Comment("It fails with a *runtime.FieldError. It leaves Headers empty: the route fills them in.")
	}
	deprecated(j, m, v)
	j.Func().Id(name).Params(jen.Id("body").Index().Byte()).Params(jen.Op("*").Id(v.GoName), jen.Error()).Block(
		jen.Var().Id("w").Id(wireName(v.GoName)),
		jen.If(jen.Err().Op(":=").Qual("encoding/json", "Unmarshal").Call(jen.Id("body"), jen.Op("&").Id("w")), jen.Err().Op("!=").Nil()).Block(
			jen.Return(jen.Nil(), jen.Qual(rt, "DecodeError").Call(jen.Err())),
		),
		jen.List(jen.Id("out"), jen.Err()).Op(":=").Id("w").Dot("extract").Call(),
		jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Nil(), jen.Err())),
		jen.Return(jen.Op("&").Id("out"), jen.Nil()),
	)
}

// wire emits the decoded form of struct o and the method that checks it and
// converts it to o.
func wire(j *jen.File, o object) {
	name := wireName(o.name)
	if slices.ContainsFunc(o.fields, presenceShown) {
		j.Commentf("%s is %s as decoded: every field is a pointer, or a %s, so a missing one shows.", name, o.name, nullableType)
	} else {
		j.Commentf("%s is %s as decoded: every field is a pointer, so a missing one shows.", name, o.name)
	}
	j.Type().Id(name).StructFunc(func(g *jen.Group) {
		for _, f := range o.fields {
			t := wireType(f)
			if presenceShown(f) {
				t = jen.Id(nullableType).Types(wireValue(f))
			}
			g.Id(f.GoName).Add(t).Tag(map[string]string{"json": f.Name})
		}
	})
	s := newScope()
	var body []jen.Code
	body = append(body, jen.Var().Id("out").Id(o.name))
	for _, f := range o.fields {
		body = append(body, s.field(f)...)
	}
	body = append(body, jen.Return(jen.Id("out"), jen.Nil()))
	j.Comment("extract checks w against the schema and converts it, by value so that nested values")
	j.Comment("need no allocation of their own. Its FieldError paths are relative to w: the caller")
	j.Comment("prefixes them on failure only, so success builds no path.")
	j.Func().Params(jen.Id("w").Op("*").Id(name)).Id("extract").Params().
		Params(jen.Id(o.name), jen.Error()).Block(body...)
}

// scope hands out the local variable names of one generated function: a
// block's names, then those of the blocks around it.
type scope struct {
	names  []string
	parent *scope
}

// reserved are never used for a local: the generated functions' own names,
// the imported packages and Go's predeclared identifiers.
var reserved = func() map[string]bool {
	m := map[string]bool{}
	for _, name := range strings.Fields(`w out err n header raw ok p body msg messageID
		base64 context encoding errors json maps regexp runtime slices strconv time utf8
		any bool byte error false float64 int int64 len make nil rune string true`) {
		m[name] = true
	}
	return m
}()

func newScope() *scope { return &scope{} }

// block is the scope of a block inside s: its names may be reused once the
// block ends.
func (s *scope) block() *scope { return &scope{parent: s} }

func (s *scope) taken(name string) bool {
	if reserved[name] || token.IsKeyword(name) {
		return true
	}
	for b := s; b != nil; b = b.parent {
		if slices.Contains(b.names, name) {
			return true
		}
	}
	return false
}

func (s *scope) name(base string) string {
	name := base
	for i := 2; s.taken(name); i++ {
		name = base + strconv.Itoa(i)
	}
	s.names = append(s.names, name)
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

// fieldPath is the expression of a field's path for FieldError, relative to
// the struct being extracted: an expression (a list index, say) or nothing,
// then literal text. It is only evaluated where a check fails.
type fieldPath struct {
	expr func() *jen.Statement
	lit  string
}

func (p fieldPath) add(s string) fieldPath { return fieldPath{p.expr, p.lit + s} }

func (p fieldPath) code() *jen.Statement {
	switch {
	case p.expr == nil:
		return jen.Lit(p.lit)
	case p.lit == "":
		return p.expr()
	}
	return p.expr().Op("+").Lit(p.lit)
}

// failWith returns the zero value zero (nil for the extract methods) and a
// FieldError.
func failWith(zero jen.Code, p fieldPath, problem string) jen.Code {
	return jen.Return(zero, fieldError(p.code(), jen.Lit(problem)))
}

// fail returns from an extract method, which returns its value so far with
// the error.
func fail(p fieldPath, problem string) jen.Code { return failWith(jen.Id("out"), p, problem) }

// field emits the checks of struct field f and its copy into out.
func (s *scope) field(f *schema.Field) []jen.Code {
	src := func() *jen.Statement { return jen.Id("w").Dot(f.GoName) }
	dst := func() *jen.Statement { return jen.Id("out").Dot(f.GoName) }
	p := fieldPath{}.add(f.Name)
	local := lowerCamel(f.GoName)
	switch {
	case presenceShown(f):
		val := func() *jen.Statement { return src().Dot("v") }
		return []jen.Code{
			jen.If(jen.Op("!").Add(src()).Dot("set")).Block(fail(p, "required")),
			jen.If(val().Op("!=").Nil()).Block(s.block().value(f, val, dst, p, local)...),
		}
	case f.Required:
		return append([]jen.Code{jen.If(src().Op("==").Nil()).Block(fail(p, "required"))},
			s.value(f, src, dst, p, local)...)
	case f.Default != nil:
		present := jen.If(src().Op("!=").Nil()).Block(s.block().value(f, src, dst, p, local)...)
		if isZero(f.Default) {
			return []jen.Code{present} // out starts with the zero value
		}
		return []jen.Code{dst().Op("=").Add(defaultValue(f)), present}
	}
	return []jen.Code{jen.If(src().Op("!=").Nil()).Block(s.block().value(f, src, dst, p, local)...)}
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

// value emits the checks of a present wire value src (a non-nil pointer) of
// field f at path p and its conversion into dst; local names a variable that
// holds the converted value where one is needed.
func (s *scope) value(f *schema.Field, src, dst func() *jen.Statement, p fieldPath, local string) []jen.Code {
	ptr := f.Pointer()
	val := func() *jen.Statement { return jen.Op("*").Add(src()) }
	switch f.Type {
	case schema.Time:
		// runtime.ParseTime is strict RFC 3339, which time.Parse alone is not.
		v := s.name(local)
		set := jen.Id(v)
		if ptr {
			set = jen.Op("&").Id(v)
		}
		return []jen.Code{
			jen.List(jen.Id(v), jen.Id("ok")).Op(":=").Qual(rt, "ParseTime").Call(val()),
			jen.If(jen.Op("!").Id("ok")).Block(fail(p, "not an RFC 3339 time")),
			dst().Op("=").Add(set),
		}
	case schema.Object:
		v := s.name(local)
		set := jen.Id(v)
		if ptr {
			set = jen.Op("&").Id(v)
		}
		return []jen.Code{
			jen.List(jen.Id(v), jen.Err()).Op(":=").Add(src().Dot("extract").Call()),
			jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Id("out"), jen.Qual(rt, "Within").Call(p.add(".").code(), jen.Err()))),
			dst().Op("=").Add(set),
		}
	case schema.Bytes:
		v := s.name(local)
		return append([]jen.Code{
			jen.List(jen.Id(v), jen.Err()).Op(":=").Qual("encoding/base64", "StdEncoding").Dot("DecodeString").Call(val()),
			jen.If(jen.Err().Op("!=").Nil()).Block(fail(p, "not base64")),
		}, append(checks(f, jen.Len(jen.Id(v)), p, jen.Id("out")), dst().Op("=").Id(v))...)
	case schema.Enum:
		conv := jen.Id(f.GoPath).Call(val())
		out := []jen.Code{enumCheck(f, val(), p, jen.Id("out"))}
		if !ptr {
			return append(out, dst().Op("=").Add(conv))
		}
		v := s.name(local)
		return append(out, jen.Id(v).Op(":=").Add(conv), dst().Op("=").Op("&").Id(v))
	case schema.List, schema.Map:
		body := s.block()
		key, item := body.name(map[schema.Type]string{schema.List: "i", schema.Map: "k"}[f.Type]), body.name("item")
		loop := jen.List(jen.Id(key), jen.Id(item)).Op(":=").Range().Add(val())
		index := func() *jen.Statement { return jen.Qual("strconv", "Itoa").Call(jen.Id(key)) }
		var head []jen.Code
		if f.Type == schema.Map {
			// Keys are visited in order, so that the first problem reported is
			// the same on every run.
			loop = jen.List(jen.Id("_"), jen.Id(key)).Op(":=").Range().Qual("slices", "Sorted").Call(jen.Qual("maps", "Keys").Call(val()))
			head = []jen.Code{jen.Id(item).Op(":=").Parens(val()).Index(jen.Id(key))}
			index = func() *jen.Statement { return jen.Qual("strconv", "Quote").Call(jen.Id(key)) }
		}
		at := p.add("[")
		elem := fieldPath{expr: func() *jen.Statement { return at.code().Op("+").Add(index()) }, lit: "]"}
		inner := append(head, jen.If(jen.Id(item).Op("==").Nil()).Block(fail(elem, "required")))
		inner = append(inner, body.value(f.Items, func() *jen.Statement { return jen.Id(item) },
			func() *jen.Statement { return dst().Index(jen.Id(key)) }, elem, "elem")...)
		return append(checks(f, jen.Len(val()), p, jen.Id("out")),
			dst().Op("=").Make(valueType(f), jen.Len(val())),
			jen.For(loop).Block(inner...),
		)
	}
	checked := checks(f, val(), p, jen.Id("out"))
	switch conv := narrowed(f); {
	case conv != nil && ptr:
		v := s.name(local)
		return append(checked, jen.Id(v).Op(":=").Add(conv).Call(val()), dst().Op("=").Op("&").Id(v))
	case conv != nil:
		return append(checked, dst().Op("=").Add(conv).Call(val()))
	case ptr:
		return append(checked, dst().Op("=").Add(src()))
	}
	return append(checked, dst().Op("=").Add(val()))
}

// narrowed is the conversion of a checked value of f to its Go type: the
// integer type of an integer narrower than int64, whose checks have kept the
// value within its range; nil when none is needed.
func narrowed(f *schema.Field) *jen.Statement {
	if f.Type != schema.Integer || f.Int == schema.Int64 {
		return nil
	}
	return jen.Id(string(f.Int))
}

// enumCheck fails unless v, a string, is one of f's values.
func enumCheck(f *schema.Field, v jen.Code, p fieldPath, zero jen.Code) jen.Code {
	values := make([]jen.Code, len(f.Values))
	for i, val := range f.Values {
		values[i] = jen.Lit(val)
	}
	return jen.Switch(v).Block(
		jen.Case(values...),
		jen.Default().Block(failWith(zero, p, f.EnumProblem())),
	)
}

// describe states f's bounds, pattern and default for the comment of its
// struct field.
func describe(f *schema.Field) string {
	l := f.Limits()
	var parts []string
	unit := func(n string) string {
		if n == "1" {
			return strings.TrimSuffix(l.Unit, "s")
		}
		return l.Unit
	}
	switch {
	case l.Lo != "" && l.Lo == l.Hi:
		parts = append(parts, "exactly "+l.Lo+unit(l.Lo))
	case l.Lo != "" && l.Hi != "":
		parts = append(parts, l.Lo+" to "+l.Hi+l.Unit)
	case l.Lo != "":
		parts = append(parts, "at least "+l.Lo+unit(l.Lo))
	case l.Hi != "":
		parts = append(parts, "at most "+l.Hi+unit(l.Hi))
	}
	if f.Pattern != "" {
		parts = append(parts, "matches "+commentText(f.Pattern))
	}
	if f.Default != nil {
		parts = append(parts, fmt.Sprintf("default %#v", f.Default))
	}
	if f.Nullable && f.Required {
		parts = append(parts, "present, may be null")
	}
	return strings.Join(parts, "; ")
}

// checks emits the bound checks of value v of field f at path p, failing
// with zero as the function's first result.
func checks(f *schema.Field, v jen.Code, p fieldPath, zero jen.Code) []jen.Code {
	l := f.Limits()
	subject := jen.Add(v)
	if f.Type == schema.String {
		subject = jen.Qual("unicode/utf8", "RuneCountInString").Call(v)
	}
	var out []jen.Code
	switch {
	case l.Lo == "" && l.Hi == "":
	case l.Hi == "":
		out = append(out, jen.If(subject.Op("<").Id(l.Lo)).Block(failWith(zero, p, l.LoProblem)))
	case l.Lo == "":
		out = append(out, jen.If(subject.Op(">").Id(l.Hi)).Block(failWith(zero, p, l.HiProblem)))
	default:
		// Both bounds share one count of a string's characters.
		var init jen.Code = jen.Null()
		if f.Type == schema.String {
			init, subject = jen.Id("n").Op(":=").Add(subject), jen.Id("n")
		}
		out = append(out, jen.Switch(init, jen.Empty()).Block(
			jen.Case(jen.Add(subject).Op("<").Id(l.Lo)).Block(failWith(zero, p, l.LoProblem)),
			jen.Case(jen.Add(subject).Op(">").Id(l.Hi)).Block(failWith(zero, p, l.HiProblem)),
		))
	}
	if f.Pattern != "" {
		out = append(out, jen.If(jen.Op("!").Id(patternVar(f)).Dot("MatchString").Call(v)).Block(failWith(zero, p, f.PatternProblem())))
	}
	return out
}
