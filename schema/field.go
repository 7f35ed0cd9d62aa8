package schema

import (
	"errors"
	"fmt"
	"math"
	"regexp/syntax"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/lily-mq/lily/envelope"
)

// place is where a field appears, which decides the keys it may have.
type place int

const (
	inPayload place = iota // a field of a payload or object
	inElement              // the element of a list or map
	inHeaders              // a typed header
	inType                 // a shared type, under types
)

var fieldKeys = []string{
	"type", "required", "nullable", "default",
	"min_length", "max_length", "pattern", "min", "max", "min_items", "max_items",
	"values", "fields", "items",
}

// typeKeys are the keys, beyond type, required, nullable and default, that
// each field type takes.
var typeKeys = map[Type][]string{
	String:  {"min_length", "max_length", "pattern"},
	Integer: {"min", "max"},
	Number:  {"min", "max"},
	Bytes:   {"min_length", "max_length"},
	Enum:    {"values"},
	Object:  {"fields"},
	List:    {"min_items", "max_items", "items"},
	Map:     {"min_items", "max_items", "items"},
}

// sharedKinds are the types a shared type may be: those that give a Go type
// of their own. A bounded string is written where it is used, so that its Go
// type stays a plain string.
var sharedKinds = []Type{Object, Enum}

// defaultTypes are the types a default may be given for: scalars with a
// literal Go value.
var defaultTypes = []Type{String, Integer, Number, Bool, Enum}

// fields reads an object's fields; parent is the GoPath of the struct that
// holds them.
func (p *parser) fields(n *yaml.Node, parent string) []*Field {
	return p.named(n, "fields", parent, inPayload, validKey)
}

// named reads the fields (or headers) of mapping n, keyed by their names.
func (p *parser) named(n *yaml.Node, what, parent string, at place, valid func(string) bool) []*Field {
	var out []*Field
	goNames, folded := map[string]*yaml.Node{}, map[string]*yaml.Node{}
	p.entries(n, what, func(k, v *yaml.Node) {
		name := k.Value
		if at != inHeaders && len(name) > maxFieldName {
			p.errorf(k, RuleName, "field name %q is %d bytes: at most %d", shorten(name), len(name), maxFieldName)
			return
		}
		if at == inHeaders && len(name) > envelope.MaxHeaderKeyBytes {
			p.errorf(k, RuleName, "header name %q is %d bytes: at most %d, the longest key a consumer's guard accepts", shorten(name), len(name), envelope.MaxHeaderKeyBytes)
			return
		}
		if !valid(name) {
			if at == inHeaders {
				p.errorf(k, RuleName, "header name %q must start with a letter and hold only letters, digits, _, - and .", name)
			} else {
				p.errorf(k, RuleName, "field name %q must start with a letter and hold only letters, digits, _ and -", name)
			}
			return
		}
		if at == inHeaders && strings.HasPrefix(strings.ToLower(name), "x-lily-") {
			p.errorf(k, RuleReservedHeader, "header %q: names starting x-lily- are Lily's own", name)
			return
		}
		// A typed header must reach every attempt as it was sent, as an
		// envelope's or an ordering's header must. A limit set after
		// lilygen accepted such headers: the header is read all the same.
		if at == inHeaders && !envelope.CarriedHeader(name) {
			p.limitf(k, RuleReservedHeader, "header %q %s", name, uncarried(name))
		}
		goName := GoName(name)
		if prev, dup := goNames[goName]; dup {
			p.errorf(k, RuleNameClash, "%s %q and %q (line %d) both give the Go name %s", what, name, prev.Value, prev.Line, goName)
			return
		}
		// encoding/json matches keys ignoring case, and AMQP peers often do
		// too, so two such names could not be told apart.
		if prev, dup := folded[strings.ToLower(name)]; dup {
			p.errorf(k, RuleNameClash, "%s %q and %q (line %d) differ only in case", what, name, prev.Value, prev.Line)
			return
		}
		goNames[goName], folded[strings.ToLower(name)] = k, k
		if f := p.field(k, v, parent+goName, at); f != nil {
			f.Name, f.GoName = name, goName
			out = append(out, f)
		}
	})
	return out
}

// uncarried says why a header name that is not envelope.CarriedHeader
// cannot be a typed header.
func uncarried(name string) string {
	if envelope.Routing(name) {
		return "names a routing header (RabbitMQ's sender-selected distribution): the broker refuses a CC that is not a list of routing keys and removes BCC, and a retry copy leaves both behind"
	}
	if envelope.BrokerRecord(name) {
		return "is the broker's record of the message's queues, which it writes itself and a retry copy leaves behind"
	}
	return "is one a retry copy does not carry as it came"
}

func validKey(s string) bool { return validName(s, "_-") }

func validHeader(s string) bool { return validName(s, "_-.") }

// validName reports whether s is an ASCII letter followed by letters, digits
// and the characters of extra.
func validName(s, extra string) bool {
	for i, r := range s {
		letter := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
		if !letter && (i == 0 || !(r >= '0' && r <= '9' || strings.ContainsRune(extra, r))) {
			return false
		}
	}
	return s != ""
}

func (p *parser) headers(n *yaml.Node, structName string) []*Field {
	return p.named(n, "headers", structName, inHeaders, validHeader)
}

// maxDepth bounds how deep fields nest (objects, lists and maps within one
// another), shared types written out, and maxFieldName a field's name:
// each nested object's Go name repeats the path to it, so the generated
// code grows with the square of the depth times the names' length, and
// the extractor, an example and a review page go as deep as the payload.
const (
	maxDepth     = 32
	maxFieldName = 128
)

// maxName bounds the name of a message, shared type or envelope, whatever
// the message's type: each is a Go name, which the generated code repeats
// in the names it derives from it, and a typo hint compares a name with
// the others (maxHinted). It is envelope.MaxTypeBytes, so that a message
// without type: travels as a type a consumer's guard takes.
const maxName = envelope.MaxTypeBytes

// maxFields bounds the fields of one schema, all its versions' and shared
// types' together, and maxVersionFields those of one version, its nested
// fields, elements and headers counted. Each field costs lilygen some
// 20 KB as it generates its struct field, checks and example code, and a
// 4 MiB schema could hold 200,000 of them; the fields of one version make
// one extractor, which Go compiles as one function. A schema of 1,000
// versions of a dozen fields each holds 12,000.
const (
	maxFields        = 50_000
	maxVersionFields = 1_000
)

// pastFieldCap counts key, the key of a field, element or header, and
// reports whether it is past maxVersionFields or maxFields: the one that
// crosses either is reported, and neither it nor any after it is read.
func (p *parser) pastFieldCap(key *yaml.Node) bool {
	if p.inVersion != "" {
		p.versionFields++
		if p.versionFields > maxVersionFields {
			if p.versionFields == maxVersionFields+1 {
				p.errorf(key, RuleRange, "field %q takes %s past %d fields, the most a version may have, its nested fields, elements and headers together (those after it are not read)",
					shorten(key.Value), p.inVersion, maxVersionFields).Hint = "move what travels together into messages of their own"
			}
			return true
		}
	}
	p.fieldsRead++
	if p.fieldsRead == maxFields+1 {
		p.errorf(key, RuleRange, "field %q takes the schema past %d fields, the most it may have, all versions' and types' together (those after it are not read)",
			shorten(key.Value), maxFields).Hint = "split the messages into schemas of their own"
	}
	return p.fieldsRead > maxFields
}

// field reads one field, element or header. at is the key that names it;
// goPath is its unique Go name in the file.
func (p *parser) field(key, n *yaml.Node, goPath string, at place) *Field {
	if p.pastFieldCap(key) {
		return nil
	}
	if p.depth >= maxDepth {
		p.errorf(key, RuleRange, "%s nests deeper than %d levels of objects, lists and maps", key.Value, maxDepth).
			Hint = "flatten the payload"
		return nil
	}
	p.depth++
	defer func() { p.depth-- }()
	p.deepest = max(p.deepest, p.depth)
	m := p.object(n, key.Value, fieldKeys...)
	if m == nil {
		return nil
	}
	allowed := types
	switch at {
	case inHeaders:
		allowed = headerTypes
	case inType:
		allowed = sharedKinds
	}
	te, ok := m["type"]
	if !ok {
		p.errorf(key, RuleMissingKey, "%q has no type", key.Value).Hint = "one of " + typeList(allowed)
		return nil
	}
	t, ok := p.str(te.v, "type")
	if !ok {
		return nil
	}
	f := &Field{Type: Type(t), GoPath: goPath, Pos: p.pos(key), Required: at == inElement}
	_, shared := p.types[t]
	uses := shared && at != inType // a use of a shared type, not its declaration
	switch {
	case uses:
		if p.types[t].state == typeUnread && len(p.reading) >= maxDepth {
			// Each type being read holds the next a level or more deeper,
			// so this one would start past maxDepth whatever it holds; and
			// reading it here would recurse as deep as the chain is long.
			p.errorf(key, RuleRange, "%s nests deeper than %d levels of objects, lists and maps: its type %s is held within %d types, %s to %s, each in the one before",
				key.Value, maxDepth, shorten(t), len(p.reading), shorten(p.reading[0]), shorten(p.reading[len(p.reading)-1])).
				Hint = "flatten the payload or the types it uses"
			return nil
		}
		def, height := p.sharedType(t, te.v)
		if def == nil {
			return nil // reported where it is declared, or the cycle where it closes
		}
		deepest := p.depth + height - 1 // the type's first level is this field's
		if deepest > maxDepth {
			p.errorf(key, RuleRange, "%s nests deeper than %d levels of objects, lists and maps: type %s is %d deep, used here at level %d", key.Value, maxDepth, t, height, p.depth).
				Hint = "flatten the payload or the types it uses"
			return nil
		}
		p.deepest = max(p.deepest, deepest)
		f.Type, f.Named, f.GoPath, f.Values, f.Fields = def.Type, def.Named, def.GoPath, def.Values, def.Fields
	case at == inType:
		f.Named = goPath
	case f.Type == Integer:
		f.Int = Int64
	case slices.Contains(intTypes, IntType(t)):
		f.Type, f.Int = Integer, IntType(t)
	}
	if !slices.Contains(allowed, f.Type) {
		p.unknownType(te.v, t, f, allowed, at)
		return nil
	}
	p.flags(m, f, at)
	for _, k := range fieldKeys[4:] {
		if e, ok := m[k]; ok && (uses || !slices.Contains(typeKeys[f.Type], k)) {
			e := p.errorf(e.k, RuleBoundType, "%s does not apply to a field of type %s", k, f.TypeName())
			if uses && slices.Contains(typeKeys[f.Type], k) {
				e.Hint = "the declaration of " + t + " under types sets it"
			}
			delete(m, k)
		}
	}
	if !uses { // a shared type's declaration was read once; a use adds only presence and a default
		p.typeKeys(key, m, f)
	}
	if at == inHeaders && f.Type == String {
		p.headerMinLength(key, m, f)
	}
	if e, ok := m["default"]; ok && f.Default == nil && !f.Required && !f.Nullable {
		p.defaultValue(e, f)
	}
	return f
}

// typeKeys reads the keys of f's type, f.GoPath naming what they declare.
func (p *parser) typeKeys(key *yaml.Node, m map[string]entry, f *Field) {
	goPath := f.GoPath
	switch f.Type {
	case String:
		f.MinLength, f.MaxLength = p.lengths(m, "min_length", "max_length")
		if e, ok := m["pattern"]; ok {
			if f.Pattern = p.pattern(key, e.v); f.Pattern != "" {
				p.declare(fmt.Sprintf("the pattern of %q", key.Value), e.k, "pattern"+goPath)
			}
		}
	case Bytes:
		f.MinLength, f.MaxLength = p.lengths(m, "min_length", "max_length")
	case Enum:
		p.enum(key, m, f)
	case List, Map:
		f.MinItems, f.MaxItems = p.lengths(m, "min_items", "max_items")
		if e, ok := m["items"]; ok {
			f.Items = p.field(e.k, e.v, goPath+"Item", inElement)
			if f.Type == List && f.Items != nil && f.Items.Type == Integer && f.Items.Int == Uint8 {
				p.errorf(e.k, RuleUnknownType, "a list of uint8 would be a []uint8 in Go, which encoding/json writes as base64, not as the numbers the extractor reads").Hint = "use items: {type: uint16, max: 255} for small numbers, or a field of type bytes for binary data"
			}
		} else {
			p.errorf(key, RuleMissingKey, "%s %q has no items", f.Type, key.Value).Hint = "add items: {type: ...}, the element's type"
		}
	case Object:
		p.declare(declaring(f, "object field", key), key, goPath)
		if e, ok := m["fields"]; ok {
			f.Fields = p.fields(e.v, goPath)
		} else {
			p.errorf(key, RuleMissingKey, "object %q has no fields", key.Value)
		}
	case Integer:
		p.intBounds(m, f)
	case Number:
		f.MinNum, f.MaxNum = bounds(p, m, "min", "max", p.number)
	}
}

// flags reads required, nullable and default, which apply only to some
// places and types.
func (p *parser) flags(m map[string]entry, f *Field, at place) {
	for _, key := range []string{"required", "nullable", "default"} {
		e, ok := m[key]
		switch {
		case !ok:
		case at == inElement && key == "required":
			p.errorf(e.k, RuleItemRequired, "an element is always required: remove required")
		case at == inElement:
			p.errorf(e.k, RuleBoundType, "%s does not apply to an element of a list or map", key)
		case at == inHeaders && key != "required":
			p.errorf(e.k, RuleBoundType, "%s does not apply to a header", key)
		case at == inType:
			p.errorf(e.k, RuleBoundType, "%s does not apply to a shared type", key).Hint = "set it where the type is used"
		case key == "required":
			f.Required, _ = p.boolean(e.v, key)
		case key == "nullable":
			f.Nullable, _ = p.boolean(e.v, key)
		case !slices.Contains(defaultTypes, f.Type):
			p.errorf(e.k, RuleDefault, "default does not apply to a field of type %s", f.TypeName())
		default:
			continue
		}
		delete(m, key)
	}
	if e, ok := m["default"]; ok && (f.Required || f.Nullable) {
		p.errorf(e.k, RuleDefault, "a default applies to an optional field that is not nullable").
			Hint = "a required field is always present, and a nullable one keeps its null"
	}
}

// defaultValue reads the default of f and checks it against f's bounds.
func (p *parser) defaultValue(e entry, f *Field) {
	var v any
	var ok bool
	switch f.Type {
	case String, Enum:
		v, ok = p.str(e.v, "default")
	case Integer:
		v, ok = p.integer(e.v, "default")
	case Number:
		v, ok = p.number(e.v, "default")
	case Bool:
		v, ok = p.boolean(e.v, "default")
	}
	if !ok {
		return
	}
	if problem := checkScalar(f, v, true); problem != "" {
		p.errorf(e.v, RuleDefault, "default %s breaks the field's own bounds: %s", shorten(e.v.Value), problem)
		return
	}
	f.Default = v
}

// maxPatternInsts bounds the instructions a schema's patterns compile to,
// all together. Each is compiled by lilygen and by the consumer as it
// starts, and a bounded repeat compiles its expression once a repeat:
// [a-z]{1000} takes 1,002 instructions and a fifth of a millisecond,
// ^[a-z0-9-]+$ 6, a UUID's 40.
const maxPatternInsts = 1_000_000

// pattern reads the pattern n of the field whose key is key, compiled as
// regexp.Compile does, to count what it compiles to; past
// maxPatternInsts none is compiled.
func (p *parser) pattern(key, n *yaml.Node) string {
	s, ok := p.str(n, "pattern")
	if !ok || p.patternInsts > maxPatternInsts {
		return ""
	}
	re, err := syntax.Parse(s, syntax.Perl)
	var prog *syntax.Prog
	if err == nil {
		prog, err = syntax.Compile(re.Simplify())
	}
	if err != nil {
		// The error quotes the part of the pattern at fault, shortened too.
		why := err.Error()
		var se *syntax.Error
		if errors.As(err, &se) {
			why = fmt.Sprintf("%s: `%s`", se.Code, shorten(se.Expr))
		}
		p.errorf(n, RulePattern, "pattern %q is not an RE2 regular expression: %s", shorten(s), why)
		return ""
	}
	if p.patternInsts += len(prog.Inst); p.patternInsts > maxPatternInsts {
		p.errorf(n, RuleRange, "pattern of %q takes the schema's patterns past %d instructions compiled, the most they may have together (those after it are not read)",
			shorten(key.Value), maxPatternInsts).Hint = "a bounded repeat such as {1000} compiles its expression once a repeat: bound the length with max_length instead"
		return ""
	}
	return s
}

// maxEnumValues and maxEnumValueBytes bound an enum. Each value is a Go
// constant named after it, a case of the extractor's check, and part of
// the problem a value outside the enum gets, which lists them all, so the
// generated file and a consumer's error grow with the values' count and
// length: a 4 MiB schema of one enum could hold half a million values, or
// one of 4 MiB, each generating several times its size in Go. Real enums are
// far within both: the 249 ISO 3166 country codes, the 600 IANA time zones. A
// value within 256 bytes also travels in any header, within the 4096 a
// consumer's guard takes in one value.
const (
	maxEnumValues     = 1000
	maxEnumValueBytes = 256
)

// enum reads an enum's values; each gives a Go constant of the enum's type.
// The value past maxEnumValues is refused, and none after it is read; a
// value over maxEnumValueBytes is a limit set after lilygen accepted
// schemas beyond it (limitf), and is read all the same.
func (p *parser) enum(key *yaml.Node, m map[string]entry, f *Field) {
	e, ok := m["values"]
	if !ok {
		p.errorf(key, RuleMissingKey, "enum %q has no values", key.Value).Hint = "add values: [a, b]"
		return
	}
	items, ok := p.seq(e.v, "values")
	if !ok {
		return
	}
	if len(items) == 0 {
		p.errorf(e.v, RuleEmpty, "values: want at least one value")
	}
	names := []string{f.GoPath}
	goNames := map[string]*yaml.Node{}
	for i, item := range items {
		if i == maxEnumValues {
			p.errorf(item, RuleRange, "%s has more than %d values, the most an enum may have (those after the %dth are not read)",
				declaring(f, "enum", key), maxEnumValues, maxEnumValues).Hint = "carry the value in a string field with max_length, and check it in the handler"
			break
		}
		s, ok := p.str(item, "an enum value")
		if !ok {
			continue
		}
		if len(s) > maxEnumValueBytes {
			p.limitf(item, RuleRange, "enum value %q is %d bytes: at most %d", shorten(s), len(s), maxEnumValueBytes).Hint =
				"shorten it: it travels in every message that holds it, and names a Go constant"
		}
		goName := GoName(s)
		switch prev, dup := goNames[goName]; {
		case goName == "":
			p.errorf(item, RuleName, "enum value %q has no letter or digit to give a Go constant name", shorten(s))
		case dup && prev.Value == s:
			p.errorf(item, RuleDuplicate, "duplicate enum value %q (first at line %d)", shorten(s), prev.Line)
		case dup:
			p.errorf(item, RuleNameClash, "enum values %q and %q (line %d) both give the Go name %s", shorten(s), shorten(prev.Value), prev.Line, f.GoPath+goName)
		default:
			goNames[goName] = item
			f.Values = append(f.Values, s)
			names = append(names, f.GoPath+goName)
		}
	}
	p.declare(declaring(f, "enum", key), key, names...)
}

// declaring names the field or shared type that declares Go names, for a
// clash.
func declaring(f *Field, what string, key *yaml.Node) string {
	if f.Named != "" {
		return "type " + f.Named
	}
	return fmt.Sprintf("%s %q", what, key.Value)
}

// typeNames are the names of types ts, each integer type among them.
func typeNames(ts []Type) []string {
	var out []string
	for _, t := range ts {
		out = append(out, string(t))
		if t == Integer {
			for _, it := range intTypes {
				out = append(out, string(it))
			}
		}
	}
	return out
}

func typeList(ts []Type) string { return strings.Join(typeNames(ts), ", ") }

// lengths reads a pair of length bounds, which are never negative.
func (p *parser) lengths(m map[string]entry, minKey, maxKey string) (lo, hi *int) {
	return bounds(p, m, minKey, maxKey, func(n *yaml.Node, what string) (int, bool) {
		return p.intRange(n, what, 0, math.MaxInt32)
	})
}

// intBounds reads an integer field's bounds, each of which must lie within
// the range of its type, and bounds a type narrower than int64 by its range
// where the schema does not.
func (p *parser) intBounds(m map[string]entry, f *Field) {
	f.MinInt, f.MaxInt = bounds(p, m, "min", "max", p.integer)
	lo, hi := f.Int.Range()
	for _, b := range []struct {
		key      string
		v        **int64
		implicit int64
	}{{"min", &f.MinInt, lo}, {"max", &f.MaxInt, hi}} {
		switch {
		case *b.v == nil && f.Int != Int64:
			*b.v = &b.implicit
		case *b.v != nil && (**b.v < lo || **b.v > hi):
			p.errorf(m[b.key].v, RuleRange, "%s %d is outside the range of %s, %d to %d", b.key, **b.v, f.Int, lo, hi).
				Hint = holding(f.Int, **b.v)
		}
	}
}

// holding suggests the narrowest integer type that holds v, of t's
// signedness if one does.
func holding(t IntType, v int64) string {
	order := intTypes
	if t[0] == 'u' {
		order = append(slices.Clone(intTypes[4:]), intTypes[:4]...)
	}
	for _, c := range order {
		if lo, hi := c.Range(); lo <= v && v <= hi {
			return "use a type that holds it, such as " + string(c)
		}
	}
	return ""
}

// bounds reads a minimum and a maximum with read, and reports a pair that no
// value fits.
func bounds[T int | int64 | float64](p *parser, m map[string]entry, minKey, maxKey string, read func(*yaml.Node, string) (T, bool)) (lo, hi *T) {
	get := func(key string) *T {
		e, ok := m[key]
		if !ok {
			return nil
		}
		v, ok := read(e.v, key)
		if !ok {
			return nil
		}
		return &v
	}
	lo, hi = get(minKey), get(maxKey)
	if lo != nil && hi != nil && *lo > *hi {
		p.errorf(m[minKey].v, RuleImpossibleBound, "%s %s is greater than %s %s: no value fits", minKey, m[minKey].v.Value, maxKey, m[maxKey].v.Value).
			Hint = "swap them, or raise " + maxKey
	}
	return lo, hi
}
