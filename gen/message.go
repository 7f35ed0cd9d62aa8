package gen

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dave/jennifer/jen"

	"github.com/lily-mq/lily/internal/printable"
	"github.com/lily-mq/lily/schema"
)

// message emits m's type and versions; with an envelope to produce in, not
// nil, a producer of each version too. routed are the versions a queue's
// route reads.
func message(j *jen.File, m *schema.Message, produce *schema.Envelope, routed map[*schema.Version]bool, envs envelopeNames, checks marshalChecks) {
	commentf(j, "%sType is the type %s messages travel as.", m.Name, m.Name)
	j.Const().Id(m.Name + "Type").Op("=").Lit(m.Type)
	if produce != nil {
		exchangeConst(j, m)
	}
	for _, v := range m.Versions {
		u := uses{routed: routed[v], produced: produce != nil}
		objs := objects(object{name: v.GoName, doc: fmt.Sprintf("%s is version %d of %s.", v.GoName, v.Number, m.Name), fields: v.Fields})
		for i, o := range objs {
			comment(j, o.doc)
			if i == 0 {
				deprecated(j, m, v)
			}
			structType(j, o, func(g *jen.Group) {
				if i == 0 && v.HeadersName != "" {
					doc := "Headers are the typed headers"
					if w := u.words(); w != "" {
						doc += ": " + w
					}
					g.Comment(doc + ".")
					g.Id("Headers").Id(v.HeadersName).Tag(map[string]string{"json": "-"})
				}
			})
		}
		walk(v.GoName, "field", v.Fields, enumsAndPatterns(j))
		walk(v.GoName, "header", v.Headers, enumsAndPatterns(j))
		if v.HeadersName != "" {
			headers(j, v, u)
		}
		extractor(j, m, v, u.routed)
		if produce != nil {
			producer(j, m, v, produce, envs, checks)
			if m.Publish != nil {
				publisher(j, m, v, produce)
			}
		}
		for _, o := range objs {
			reader(j, o)
			if produce != nil {
				marshalCheck(j, checks, o)
			}
		}
	}
}

// deprecated writes the Deprecated paragraph of a version's declarations.
func deprecated(g commenter, m *schema.Message, v *schema.Version) {
	if v.DeprecatedSince == "" {
		return
	}
	text := fmt.Sprintf("Deprecated: version %d of %s is deprecated since %s", v.Number, m.Name, v.DeprecatedSince)
	if v.RemoveAfter != "" {
		text += " and may be removed after " + v.RemoveAfter
	}
	g.Comment("")
	comment(g, text+".")
}

// structType emits struct o; more adds fields after the schema's.
//
// An optional field without a default is omitted when it is Go's zero
// value (omitzero): a nil pointer, list, map or bytes. An empty list, map
// or bytes is sent as empty, as a consumer's extractor reads it back, where
// omitempty would have sent it as absent.
func structType(j *jen.File, o object, more func(g *jen.Group)) {
	j.Type().Id(o.name).StructFunc(func(g *jen.Group) {
		for _, f := range o.fields {
			tag := f.Name
			if !f.Required && f.Default == nil {
				tag += ",omitzero"
			}
			field := g.Id(f.GoName).Add(publicType(f)).Tag(map[string]string{"json": tag})
			if c := describe(f); c != "" {
				field.Comment(c)
			}
		}
		more(g)
	})
}

// enumsAndPatterns emits the enum type or the compiled pattern a field
// declares.
func enumsAndPatterns(j *jen.File) func(f *schema.Field, role string) {
	return func(f *schema.Field, role string) {
		if f.Type == schema.Enum {
			enum(j, f, fmt.Sprintf("%s is the type of %s", f.GoPath, role))
		}
		if f.Pattern != "" {
			commentf(j, "%s checks %s; compiled once, when the package loads.", patternVar(f), role)
			j.Var().Id(patternVar(f)).Op("=").Qual("regexp", "MustCompile").Call(jen.Lit(f.Pattern))
		}
	}
}

// walk calls fn for every field (or header, as kind says) of struct parent
// and every element and field below it, with its role in words, such as
// "the sku field of OrderPlacedV2ItemsItem". It stops at a shared type,
// whose declarations are emitted once, with the type.
func walk(parent, kind string, fields []*schema.Field, fn func(f *schema.Field, role string)) {
	for _, f := range fields {
		role := fmt.Sprintf("the %s %s of %s", f.Name, kind, parent)
		for t := f; t != nil && t.Named == ""; t = t.Items {
			fn(t, role)
			walk(t.GoPath, "field", t.Fields, fn)
			role = "an element of " + role
		}
	}
}

func patternVar(f *schema.Field) string { return "pattern" + f.GoPath }

// commentText keeps schema text that holds a character Go does not print
// as itself, from breaking out of a comment (a newline in a pattern) or
// making gofmt refuse the file (a byte order mark in an enum value): it is
// quoted. Bytes that are not UTF-8 are quoted too: gofmt refuses them.
func commentText(s string) string {
	if printable.String(s) != s {
		return strconv.Quote(s)
	}
	return s
}

// enum emits an enum's string type and one constant per value; doc begins
// its comment.
func enum(j *jen.File, f *schema.Field, doc string) {
	commentf(j, "%s: one of %s.", doc, commentText(strings.Join(f.Values, ", ")))
	j.Type().Id(f.GoPath).String()
	commentf(j, "The values of %s.", f.GoPath)
	j.Const().DefsFunc(func(g *jen.Group) {
		for _, val := range f.Values {
			g.Id(enumConst(f, val)).Id(f.GoPath).Op("=").Lit(val)
		}
	})
}

func enumConst(f *schema.Field, value string) string { return f.GoPath + schema.GoName(value) }

// object is one Go struct: a payload, a shared type's or an object field's.
type object struct {
	name, doc string
	fields    []*schema.Field
}

// objects lists root, then the struct of each object field below it, depth
// first in field order, short of shared types, which are emitted once.
func objects(root object) []object {
	out := []object{root}
	var visit func(parent string, fields []*schema.Field)
	visit = func(parent string, fields []*schema.Field) {
		for _, f := range fields {
			role := "the " + f.Name + " field"
			for t := f; t != nil && t.Named == ""; t = t.Items {
				if t.Type == schema.Object {
					out = append(out, object{name: t.GoPath, doc: fmt.Sprintf("%s is %s of %s.", t.GoPath, role, parent), fields: t.Fields})
					visit(t.GoPath, t.Fields)
				}
				role = "an element of " + role
			}
		}
	}
	visit(root.name, root.fields)
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
