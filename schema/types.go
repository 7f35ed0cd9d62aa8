package schema

import (
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// sharedType is one entry of types:, read when first referred to, so that a
// type may use another declared after it or in another file.
type sharedType struct {
	file string // the file that declares it, for its errors
	k, v *yaml.Node
	// field is the type as read; nil until read, and nil when its
	// declaration is broken, so that no use of it is judged against half
	// a type.
	field *Field
	// height is how many levels of objects, lists and maps the type
	// nests, itself the first, with the types it uses written out.
	height int
	state  typeState
}

type typeState int

const (
	typeUnread typeState = iota
	typeReading
	typeRead
)

// sharedTypes collects the types of every file, then reads them in file
// order. They are read before messages, so their Go names are declared
// first.
func (p *parser) sharedTypes() []*Field {
	var names []string
	for _, d := range p.docs {
		e, ok := d.m["types"]
		if !ok {
			continue
		}
		p.name = d.name
		p.entries(e.v, "types", func(k, v *yaml.Node) {
			if prev, dup := p.types[k.Value]; dup {
				p.errorf(k, RuleDuplicate, "type %s is already declared (%s)", overLong(k.Value), p.where(Pos{File: prev.file, Line: prev.k.Line}))
				return
			}
			if len(k.Value) > maxName {
				// A limit set after lilygen accepted such names: the
				// type is read all the same.
				p.limitf(k, RuleName, "type name %q is %d bytes: at most %d", shorten(k.Value), len(k.Value), maxName)
			}
			if !isIdent(k.Value, true) {
				p.errorf(k, RuleName, "type name %q is not an UpperCamel Go identifier such as Card", overLong(k.Value)).Hint = "it names the Go type"
				return
			}
			p.types[k.Value] = &sharedType{file: d.name, k: k, v: v}
			names = append(names, k.Value)
		})
	}
	var out []*Field
	for _, name := range names {
		if f, _ := p.sharedType(name, nil); f != nil {
			out = append(out, f)
		}
	}
	return out
}

// sharedType reads the type name, once, and returns it and its height; ref
// is the field's type value that refers to it, nil when the type is read
// for its own sake.
func (p *parser) sharedType(name string, ref *yaml.Node) (*Field, int) {
	t := p.types[name]
	switch t.state {
	case typeRead:
		return t.field, t.height
	case typeReading:
		// A Go struct could hold itself through a pointer, but a recursive
		// payload has no bounded depth for its extractor to read, for a
		// review page to show or for an example to cover.
		cycle := append(p.reading[slices.Index(p.reading, name):], name)
		p.errorf(ref, RuleTypeCycle, "type %s refers to itself: %s", name, strings.Join(cycle, " → ")).
			Hint = "a shared type may not contain itself, directly or through another: break the cycle"
		return nil, 0
	}
	t.state = typeReading
	p.reading = append(p.reading, name)
	// A shared type's Go names start from its own: the depth of the uses
	// that reach it does not lengthen them. Its height is its own too, and
	// each use checks that it fits where it is.
	file, before, depth, deepest := p.name, p.faults(), p.depth, p.deepest
	p.name, p.depth, p.deepest = t.file, 0, 0
	f := p.field(t.k, t.v, name, inType)
	t.height = p.deepest
	p.name, p.depth, p.deepest = file, depth, deepest
	p.reading = p.reading[:len(p.reading)-1]
	t.state = typeRead
	if p.faults() == before { // a limit leaves it whole (an enum value's length)
		t.field = f
	}
	return t.field, t.height
}

// brokenTypes reports whether a shared type failed to read. Its uses are
// left out of their versions, so no example is judged until it is fixed.
func (p *parser) brokenTypes() bool {
	for _, t := range p.types {
		if t.state == typeRead && t.field == nil {
			return true
		}
	}
	return false
}

// sharedNames are the names of the declared types of the kinds of, and of
// those whose kind is unknown, unread or broken, for hints.
func (p *parser) sharedNames(of ...Type) []string {
	var out []string
	for name, t := range p.types {
		if t.field == nil || slices.Contains(of, t.field.Type) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// typeAliases are other languages' names of Lily's types, each suggested
// as the type it names: the nearest by spelling can be another (int is
// nearest int8, and integer, int64, is meant).
var typeAliases = map[string]Type{
	"int": Integer, "long": Integer, "str": String, "text": String, "boolean": Bool,
	"float": Number, "double": Number, "float32": Number, "float64": Number,
	"datetime": Time, "timestamp": Time, "array": List, "dict": Map,
}

// unknownType reports type t of a field, element, header or shared type at
// n that cannot be used there.
func (p *parser) unknownType(n *yaml.Node, t string, f *Field, allowed []Type, at place) {
	_, shared := p.types[t]
	switch {
	case at == inType && (shared || slices.Contains(typeNames(types), t)):
		e := p.errorf(n, RuleUnknownType, "a shared type is an object or an enum, not %s", t)
		e.Hint = "write it, with its bounds, where it is used"
		if shared {
			e.Hint = "use type: " + t + " where this type is used"
		}
	case at == inHeaders && shared:
		p.errorf(n, RuleUnknownType, "header type %s is a shared %s: a header holds a scalar or an enum", t, f.Type)
	case isIdent(t, true):
		if e := p.errorf(n, RuleUnknownType, "unknown type %q", shorten(t)); e.listed() {
			p.nearest(e, t, p.sharedNames(allowed...), fmt.Sprintf("declare it under types, or use one of %s", typeList(allowed)))
		}
	default:
		what := "type"
		if at == inHeaders && slices.Contains(types, f.Type) {
			what = "header type"
		}
		e := p.errorf(n, RuleUnknownType, "unknown %s %q", what, shorten(t))
		if alias, ok := typeAliases[t]; ok && slices.Contains(allowed, alias) {
			e.Hint = fmt.Sprintf("did you mean %q?", alias)
		} else if e.listed() {
			p.nearest(e, t, append(typeNames(allowed), p.sharedNames(allowed...)...), "one of "+typeList(allowed))
		}
		if t == "uint64" {
			e.Hint = "Lily carries integers as int64, and AMQP headers have no uint64: use int64 with min: 0, or uint32"
		}
	}
}

// UsedTypes are the shared types some message version uses, directly or
// through another, in file order: those the generated code declares.
func (f *File) UsedTypes() []*Field {
	used := map[string]bool{}
	for _, m := range f.Messages {
		for _, v := range m.Versions {
			for _, name := range v.SharedTypes() {
				used[name] = true
			}
		}
	}
	return slices.DeleteFunc(slices.Clone(f.Types), func(t *Field) bool { return !used[t.Named] })
}

// SharedTypes names the shared types v uses, directly or through another,
// in the order its fields and headers first meet them.
func (v *Version) SharedTypes() []string {
	var out []string
	var visit func(fs []*Field)
	visit = func(fs []*Field) {
		for _, fd := range fs {
			for t := fd; t != nil; t = t.Items {
				if slices.Contains(out, t.Named) {
					break // its fields, shared by every use, were visited
				}
				if t.Named != "" {
					out = append(out, t.Named)
				}
				visit(t.Fields)
			}
		}
	}
	visit(v.Fields)
	visit(v.Headers)
	return out
}
