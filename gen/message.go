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
			reader(j, o)
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

func extractor(j *jen.File, m *schema.Message, v *schema.Version) {
	name := "Extract" + v.GoName
	j.Commentf("%s decodes an application/json body and checks every bound of the schema.", name)
	if v.HeadersName == "" {
		j.Comment("It fails with a *wire.FieldError.")
	} else {
		j.Comment("It fails with a *wire.FieldError. It leaves Headers empty: the route fills them in.")
	}
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
	j.Commentf("%s are the members of %s, in schema order.", membersVar(o.name), o.name)
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
			Custom(jen.Options{Multi: true}, s.block().read(f, dst, f.Name, lowerCamel(f.GoName))...))
	}
	loop := jen.For(jen.Id("o").Dot("Next").Call()).Block()
	if len(cases) > 0 {
		loop = jen.For(jen.Id("o").Dot("Next").Call()).Block(jen.Switch(jen.Id("o").Dot("Member").Call()).Block(cases...))
	}
	body = append(body, loop, jen.Return(jen.Id("o").Dot("End").Call()))
	j.Commentf("readJSON reads %s from r and checks it against the schema. Its FieldError paths", o.name)
	j.Comment("are relative to the object: the caller prefixes them on failure only, so success")
	j.Comment("builds no path.")
	j.Func().Params(jen.Id("out").Op("*").Id(o.name)).Id("readJSON").Params(jen.Id("r").Op("*").Qual(wire, "JSONReader")).
		Error().Block(body...)
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
	for _, name := range strings.Fields(`r o out err n header raw ok p body msg messageID
		base64 context encoding errors json maps regexp runtime slices strconv time utf8 wire
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

// failWith returns a FieldError at path, after zero (the function's first
// result) unless zero is nil.
func failWith(zero jen.Code, path, problem string) jen.Code {
	err := fieldError(jen.Lit(path), jen.Lit(problem))
	if path == "" { // an element's: the runtime adds its path
		err = jen.Op("&").Qual(wire, "FieldError").Values(jen.Id("Problem").Op(":").Lit(problem))
	}
	if zero == nil {
		return jen.Return(err)
	}
	return jen.Return(zero, err)
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
		out = []jen.Code{
			jen.List(jen.Id(v), jen.Err()).Op(":=").Qual(wire, call).Call(jen.Id("r"), s.elemReader(f.Items)),
			jen.If(jen.Err().Op("!=").Nil()).Block(failed),
		}
		out = append(out, checks(f, jen.Len(jen.Id(v)), path, nil)...)
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

// elemReader is the function that reads one element of a list or map: an
// object's readJSON, or a literal that reads and checks the element.
func (s *scope) elemReader(f *schema.Field) jen.Code {
	if f.Type == schema.Object {
		return jen.Parens(jen.Op("*").Id(f.GoPath)).Dot("readJSON")
	}
	b := s.block()
	elem := b.name("elem")
	body := b.read(f, func() *jen.Statement { return jen.Op("*").Id(elem) }, "", "item")
	return jen.Func().Params(jen.Id(elem).Op("*").Add(valueType(f)), jen.Id("r").Op("*").Qual(wire, "JSONReader")).Error().
		Block(append(body, jen.Return(jen.Nil()))...)
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

// enumCheck fails unless v, a string, is one of f's values.
func enumCheck(f *schema.Field, v jen.Code, path string, zero jen.Code) jen.Code {
	values := make([]jen.Code, len(f.Values))
	for i, val := range f.Values {
		values[i] = jen.Lit(val)
	}
	return jen.Switch(v).Block(
		jen.Case(values...),
		jen.Default().Block(failWith(zero, path, f.EnumProblem())),
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

// checks emits the bound checks of value v of field f at path, failing
// with zero as the function's first result (none if nil).
func checks(f *schema.Field, v jen.Code, path string, zero jen.Code) []jen.Code {
	l := f.Limits()
	subject := jen.Add(v)
	if f.Type == schema.String {
		subject = jen.Qual("unicode/utf8", "RuneCountInString").Call(v)
	}
	var out []jen.Code
	switch {
	case l.Lo == "" && l.Hi == "":
	case l.Hi == "":
		out = append(out, jen.If(subject.Op("<").Id(l.Lo)).Block(failWith(zero, path, l.LoProblem)))
	case l.Lo == "":
		out = append(out, jen.If(subject.Op(">").Id(l.Hi)).Block(failWith(zero, path, l.HiProblem)))
	default:
		// Both bounds share one count of a string's characters.
		var init jen.Code = jen.Null()
		if f.Type == schema.String {
			init, subject = jen.Id("n").Op(":=").Add(subject), jen.Id("n")
		}
		out = append(out, jen.Switch(init, jen.Empty()).Block(
			jen.Case(jen.Add(subject).Op("<").Id(l.Lo)).Block(failWith(zero, path, l.LoProblem)),
			jen.Case(jen.Add(subject).Op(">").Id(l.Hi)).Block(failWith(zero, path, l.HiProblem)),
		))
	}
	if f.Pattern != "" {
		out = append(out, jen.If(jen.Op("!").Id(patternVar(f)).Dot("MatchString").Call(v)).Block(failWith(zero, path, f.PatternProblem())))
	}
	return out
}
