package schema

import (
	"errors"
	"fmt"
	"go/token"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lily-mq/lily/schema/rules"
)

// Load reads and checks the schema file at name and the files it includes.
func Load(name string) (*File, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	return Parse(name, data)
}

// Parse checks data, the contents of the schema file name; the files it
// includes are read from disk, relative to name's directory. On failure the
// error is an ErrorList with every problem found in every file, sorted.
func Parse(name string, data []byte) (*File, error) {
	return parse(name, data, os.ReadFile)
}

func parse(name string, data []byte, read func(string) ([]byte, error)) (*File, error) {
	p := &parser{read: read, decls: map[string]decl{}}
	f := p.schema(name, data)
	if len(p.errs) > 0 {
		return nil, p.errs.sorted(p.files)
	}
	return f, nil
}

type parser struct {
	name  string   // the file being checked, for errors
	files []string // every file read, root first
	read  func(string) ([]byte, error)
	docs  []doc
	errs  ErrorList
	decls map[string]decl // Go names the generated file declares
}

// doc is one file's top-level mapping.
type doc struct {
	name string
	root *yaml.Node
	m    map[string]entry
}

// decl is where a generated Go name comes from, to report two that clash.
type decl struct {
	what string
	at   Pos
}

type entry struct{ k, v *yaml.Node }

func (p *parser) pos(n *yaml.Node) Pos { return Pos{File: p.name, Line: n.Line, Column: n.Column} }

// errorf reports a problem at n; the caller may add a hint to the result.
func (p *parser) errorf(n *yaml.Node, rule, format string, args ...any) *Error {
	e := &Error{File: p.name, Line: n.Line, Column: n.Column, Rule: rule, Msg: fmt.Sprintf(format, args...)}
	p.errs = append(p.errs, e)
	return e
}

// where names a position for a message about another node: its line in the
// same file, or file:line in another.
func (p *parser) where(at Pos) string {
	if at.File == p.name {
		return fmt.Sprintf("line %d", at.Line)
	}
	return fmt.Sprintf("%s:%d", at.File, at.Line)
}

// yaml.v3 names a syntax error's line but not its column.
var syntaxLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError reports a YAML syntax error at its line, pointing at the line's
// first non-blank character since the YAML library gives no column.
func (p *parser) syntaxError(data []byte, err error) {
	line, msg := 1, strings.TrimPrefix(err.Error(), "yaml: ")
	if m := syntaxLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	lines := strings.Split(string(data), "\n")
	line = min(max(line, 1), len(lines))
	col := 1 + len(lines[line-1]) - len(strings.TrimLeft(lines[line-1], " \t"))
	p.errorf(&yaml.Node{Line: line, Column: col}, RuleSyntax, "YAML syntax error: %s", msg)
}

// declare records the Go names the generated file declares for one schema
// entity, and reports the first that another entity already took.
func (p *parser) declare(what string, at *yaml.Node, names ...string) {
	for _, name := range names {
		if first, ok := p.decls[name]; ok {
			p.errorf(at, RuleNameClash, "%s gives the Go name %s, already taken by %s (%s)", what, name, first.what, p.where(first.at))
			return
		}
	}
	for _, name := range names {
		p.decls[name] = decl{what: what, at: p.pos(at)}
	}
}

var (
	rootKeys     = []string{"version", "package", "output", "include", "messages", "queues", "acknowledge"}
	includedKeys = []string{"version", "include", "messages", "queues"}
)

func (p *parser) schema(name string, data []byte) *File {
	f := &File{Name: name, Output: DefaultOutput}
	p.load(name, data, nil)
	if len(p.docs) == 0 || p.docs[0].name != name {
		return nil
	}
	root := p.docs[0]
	p.name = name
	if e, ok := root.m["package"]; ok {
		f.Package = p.packageName(e.v)
	} else {
		p.errorf(root.root, RuleMissingKey, "missing package: the Go package name of the generated code")
	}
	if e, ok := root.m["output"]; ok {
		f.Output = p.output(e.v)
	}
	if e, ok := root.m["acknowledge"]; ok {
		f.Acknowledged = p.acknowledgements(e.v)
	}
	f.Includes = p.files[1:]
	declared := false
	for _, d := range p.docs {
		p.name = d.name
		if e, ok := d.m["messages"]; ok {
			declared = true
			f.Messages = append(f.Messages, p.messages(e.v, f.Messages)...)
		}
	}
	if !declared {
		p.name = name
		p.errorf(root.root, RuleMissingKey, "missing messages")
	}
	for _, d := range p.docs {
		p.name = d.name
		if e, ok := d.m["queues"]; ok {
			p.entries(e.v, "queues", func(k, v *yaml.Node) {
				if q := p.queue(k, v, f); q != nil {
					f.Queues = append(f.Queues, q)
				}
			})
		}
	}
	return f
}

// load reads one file's top level, then the files it includes, each once.
// at is the include entry that names the file, nil for the root.
func (p *parser) load(name string, data []byte, at *yaml.Node) {
	p.files = append(p.files, name)
	p.name = name
	root := p.top(data)
	if root == nil {
		return
	}
	keys := rootKeys
	if at != nil {
		keys = includedKeys
		for _, key := range []string{"package", "output"} {
			if k := keyNode(root, key); k != nil {
				p.errorf(k, RuleInclude, "%s belongs in the root schema file, not in an included one", key)
				keys = append(slices.Clip(keys), key) // reported once, as above
			}
		}
	}
	m := p.object(root, "the schema", keys...)
	p.docs = append(p.docs, doc{name: name, root: root, m: m})
	e, ok := m["include"]
	if !ok {
		return
	}
	items, _ := p.seq(e.v, "include")
	for _, item := range items {
		s, ok := p.str(item, "include")
		if !ok {
			continue
		}
		if s == "" || filepath.IsAbs(s) || strings.HasPrefix(s, "/") {
			p.errorf(item, RuleInclude, "include %q must be a file name relative to this file", s)
			continue
		}
		target := filepath.Join(filepath.Dir(name), filepath.FromSlash(s))
		if slices.Contains(p.files, target) {
			continue // each file is read once, so includes may form a diamond or a cycle
		}
		data, err := p.read(target)
		if err != nil {
			p.errorf(item, RuleInclude, "cannot read include %q: %v", s, unwrapPath(err))
			continue
		}
		p.load(target, data, item)
		p.name = name
	}
}

// unwrapPath drops the path an os error repeats, since the message names it.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// top parses data and checks its version; it returns the top-level mapping,
// or nil when nothing more can be read.
func (p *parser) top(data []byte) *yaml.Node {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		p.syntaxError(data, err)
		return nil
	}
	if len(doc.Content) == 0 {
		p.errorf(&yaml.Node{Line: 1, Column: 1}, RuleEmpty, "the schema is empty: want a mapping with version, package and messages")
		return nil
	}
	root := doc.Content[0]
	if !p.kind(root, yaml.MappingNode, "the schema") {
		return nil
	}
	// The version decides what every other key means, so it is read first
	// and nothing else is read under a version this generator does not know.
	k := keyNode(root, "version")
	if k == nil {
		p.errorf(root, RuleVersion, "missing version: add version: 1")
		return nil
	}
	version := root.Content[slices.Index(root.Content, k)+1]
	if v, ok := p.integer(version, "version"); !ok {
		return nil
	} else if v != 1 {
		p.errorf(version, RuleVersion, "schema version %d is unknown: this lilygen reads version 1", v)
		return nil
	}
	return root
}

// keyNode returns the key node of key in mapping n, or nil.
func keyNode(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i]
		}
	}
	return nil
}

func (p *parser) packageName(n *yaml.Node) string {
	s, ok := p.str(n, "package")
	if !ok {
		return ""
	}
	if !isIdent(s, false) || strings.ToLower(s) != s || token.IsKeyword(s) {
		p.errorf(n, RuleName, "package %q is not a lower-case Go package name such as ordersmsg", s)
	}
	return s
}

func (p *parser) output(n *yaml.Node) string {
	s, ok := p.str(n, "output")
	if !ok {
		return DefaultOutput
	}
	clean := filepath.ToSlash(filepath.Clean(strings.ReplaceAll(s, `\`, "/")))
	if s == "" || strings.HasPrefix(clean, "/") || strings.Contains(clean, ":") {
		p.errorf(n, RuleOutput, "output %q must be a directory relative to the schema file", s)
	}
	return clean
}

// messages reads one file's messages; known are those of files read before.
func (p *parser) messages(n *yaml.Node, known []*Message) []*Message {
	var out []*Message
	p.entries(n, "messages", func(k, v *yaml.Node) {
		if i := slices.IndexFunc(known, func(m *Message) bool { return m.Name == k.Value }); i >= 0 {
			p.errorf(k, RuleDuplicate, "message %s is already declared (%s)", k.Value, p.where(known[i].Pos))
			return
		}
		if !isIdent(k.Value, true) {
			p.errorf(k, RuleName, "message name %q is not an UpperCamel Go identifier such as OrderPlaced", k.Value)
		}
		msg := &Message{Name: k.Value, Pos: p.pos(k)}
		p.declare("message "+msg.Name, k, msg.Name+"Type")
		m := p.object(v, k.Value, "versions")
		if m == nil {
			return
		}
		if e, ok := m["versions"]; ok {
			msg.Versions = p.versions(msg, e.v)
		} else {
			p.errorf(k, RuleMissingKey, "message %s has no versions", msg.Name)
		}
		out = append(out, msg)
	})
	if n.Kind == yaml.MappingNode && len(n.Content) == 0 {
		p.errorf(n, RuleEmpty, "messages: want at least one message")
	}
	return out
}

var versionKeys = []string{"content_types", "fields", "headers", "examples", "deprecated_since", "remove_after"}

func (p *parser) versions(msg *Message, n *yaml.Node) []*Version {
	var out []*Version
	first := map[int]*yaml.Node{}
	// Not p.entries: a repeated key here is a repeated version, said so.
	if !p.kind(n, yaml.MappingNode, "versions") {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		num, ok := p.intRange(k, "version", 1, math.MaxInt32)
		if !ok {
			continue
		}
		if prev, dup := first[num]; dup {
			p.errorf(k, RuleDuplicateVersion, "duplicate version %d of %s (first at line %d)", num, msg.Name, prev.Line).
				Hint = fmt.Sprintf("a changed payload needs a new version number, such as %d", slices.Max(slices.Collect(maps.Keys(first)))+1)
			continue
		}
		first[num] = k
		ver := &Version{Number: num, GoName: fmt.Sprintf("%sV%d", msg.Name, num), Pos: p.pos(k), ContentTypes: []string{DefaultContentType}}
		what := fmt.Sprintf("%s version %d", msg.Name, num)
		p.declare(what, k, ver.GoName, "Extract"+ver.GoName, "New"+ver.GoName)
		m := p.object(v, what, versionKeys...)
		before := len(p.errs)
		if e, ok := m["content_types"]; ok {
			ver.ContentTypes = p.contentTypes(e.v)
		}
		if e, ok := m["fields"]; ok {
			ver.Fields = p.fields(e.v, ver.GoName)
		}
		if e, ok := m["headers"]; ok {
			ver.HeadersName = ver.GoName + "Headers"
			p.declare(what+" headers", e.k, ver.HeadersName)
			ver.Headers = p.headers(e.v, ver.HeadersName)
			// The payload struct holds the typed headers in its field Headers.
			if i := slices.IndexFunc(ver.Fields, func(f *Field) bool { return f.GoName == "Headers" }); i >= 0 {
				p.errorf(e.k, RuleNameClash, "typed headers go in the Go field Headers of %s, already taken by field %q (line %d)",
					ver.GoName, ver.Fields[i].Name, ver.Fields[i].Pos.Line).Hint = "rename the field"
			}
		}
		fieldsOK := len(p.errs) == before
		p.dates(m, ver)
		if e, ok := m["examples"]; ok {
			ver.Examples = p.examples(e.v, ver, fieldsOK)
		}
		out = append(out, ver)
	}
	if len(n.Content) == 0 {
		p.errorf(n, RuleEmpty, "versions: want at least one version")
	}
	slices.SortFunc(out, func(a, b *Version) int { return a.Number - b.Number })
	return out
}

// dates reads deprecated_since and remove_after: dates, in that order.
func (p *parser) dates(m map[string]entry, ver *Version) {
	read := func(key string) string {
		e, ok := m[key]
		if !ok {
			return ""
		}
		s, ok := p.date(e.v, key)
		if !ok {
			return ""
		}
		return s
	}
	ver.DeprecatedSince, ver.RemoveAfter = read("deprecated_since"), read("remove_after")
	switch e, ok := m["remove_after"]; {
	case !ok || ver.RemoveAfter == "":
	case ver.DeprecatedSince == "" && m["deprecated_since"].k == nil:
		p.errorf(e.k, RuleDate, "remove_after needs deprecated_since: a version is deprecated before it is removed")
	case ver.DeprecatedSince != "" && ver.RemoveAfter < ver.DeprecatedSince:
		p.errorf(e.v, RuleDate, "remove_after %s is before deprecated_since %s", ver.RemoveAfter, ver.DeprecatedSince)
	}
}

// date reads a YYYY-MM-DD date. YAML reads an unquoted one as a timestamp,
// which is accepted too.
func (p *parser) date(n *yaml.Node, what string) (string, bool) {
	if !p.scalar(n, what, "a date such as 2026-06-30", "!!str", "!!timestamp") {
		return "", false
	}
	if _, err := parseDate(n.Value); err != nil {
		p.errorf(n, RuleDate, "%s: %q is not a date such as 2026-06-30", what, n.Value)
		return "", false
	}
	return n.Value, true
}

func (p *parser) contentTypes(n *yaml.Node) []string {
	var out []string
	items, ok := p.seq(n, "content_types")
	if !ok {
		return nil
	}
	if len(items) == 0 {
		p.errorf(n, RuleEmpty, "content_types: want at least one content type")
	}
	for _, item := range items {
		s, ok := p.str(item, "a content type")
		switch {
		case !ok:
		case s != DefaultContentType:
			p.errorf(item, RuleContentType, "content type %q is not supported (only %s)", s, DefaultContentType)
		case slices.Contains(out, s):
			p.errorf(item, RuleDuplicate, "duplicate content type %q", s)
		default:
			out = append(out, s)
		}
	}
	return out
}

// place is where a field appears, which decides the keys it may have.
type place int

const (
	inPayload place = iota // a field of a payload or object
	inElement              // the element of a list or map
	inHeaders              // a typed header
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

func validKey(s string) bool { return validName(s, "_-") }

func validHeader(s string) bool { return len(s) <= 255 && validName(s, "_-.") }

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

// field reads one field, element or header. at is the key that names it;
// goPath is its unique Go name in the file.
func (p *parser) field(key, n *yaml.Node, goPath string, at place) *Field {
	m := p.object(n, key.Value, fieldKeys...)
	if m == nil {
		return nil
	}
	allowed := types
	if at == inHeaders {
		allowed = headerTypes
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
	switch {
	case f.Type == Integer:
		f.Int = Int64
	case slices.Contains(intTypes, IntType(t)):
		f.Type, f.Int = Integer, IntType(t)
	}
	if !slices.Contains(allowed, f.Type) {
		what := "type"
		if at == inHeaders && slices.Contains(types, f.Type) {
			what = "header type"
		}
		e := p.errorf(te.v, RuleUnknownType, "unknown %s %q", what, t)
		e.Hint = hint(t, typeNames(allowed), "one of "+typeList(allowed))
		if t == "uint64" {
			e.Hint = "Lily carries integers as int64, and AMQP headers have no uint64: use int64 with min: 0, or uint32"
		}
		return nil
	}
	p.flags(m, f, at)
	for _, k := range fieldKeys[4:] {
		if e, ok := m[k]; ok && !slices.Contains(typeKeys[f.Type], k) {
			p.errorf(e.k, RuleBoundType, "%s does not apply to a field of type %s", k, f.TypeName())
			delete(m, k)
		}
	}
	switch f.Type {
	case String:
		f.MinLength, f.MaxLength = p.lengths(m, "min_length", "max_length")
		if e, ok := m["pattern"]; ok {
			if f.Pattern = p.pattern(e.v); f.Pattern != "" {
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
		} else {
			p.errorf(key, RuleMissingKey, "%s %q has no items", f.Type, key.Value).Hint = "add items: {type: ...}, the element's type"
		}
	case Object:
		p.declare(fmt.Sprintf("object field %q", key.Value), key, goPath)
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
	if e, ok := m["default"]; ok && f.Default == nil && !f.Required && !f.Nullable {
		p.defaultValue(e, f)
	}
	return f
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
	if problem := checkScalar(f, v); problem != "" {
		p.errorf(e.v, RuleDefault, "default %s breaks the field's own bounds: %s", e.v.Value, problem)
		return
	}
	f.Default = v
}

func (p *parser) pattern(n *yaml.Node) string {
	s, ok := p.str(n, "pattern")
	if !ok {
		return ""
	}
	if _, err := regexp.Compile(s); err != nil {
		p.errorf(n, RulePattern, "pattern %q is not an RE2 regular expression: %s", s, strings.TrimPrefix(err.Error(), "error parsing regexp: "))
		return ""
	}
	return s
}

// enum reads an enum's values; each gives a Go constant of the enum's type.
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
	for _, item := range items {
		s, ok := p.str(item, "an enum value")
		if !ok {
			continue
		}
		goName := GoName(s)
		switch prev, dup := goNames[goName]; {
		case goName == "":
			p.errorf(item, RuleName, "enum value %q has no letter or digit to give a Go constant name", s)
		case dup && prev.Value == s:
			p.errorf(item, RuleDuplicate, "duplicate enum value %q (first at line %d)", s, prev.Line)
		case dup:
			p.errorf(item, RuleNameClash, "enum values %q and %q (line %d) both give the Go name %s", s, prev.Value, prev.Line, f.GoPath+goName)
		default:
			goNames[goName] = item
			f.Values = append(f.Values, s)
			names = append(names, f.GoPath+goName)
		}
	}
	p.declare(fmt.Sprintf("enum %q", key.Value), key, names...)
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

var queueKeys = []string{
	"type", "prefetch", "concurrency", "consumes", "retry", "dlq",
	"max_body_bytes", "handler_timeout", "settlement_budget", "inbox",
}

// maxBodyBytes is RabbitMQ's own ceiling on a message body.
const maxBodyBytes = 512 << 20

func (p *parser) queue(k, v *yaml.Node, f *File) *Queue {
	if i := slices.IndexFunc(f.Queues, func(q *Queue) bool { return q.Name == k.Value }); i >= 0 {
		p.errorf(k, RuleDuplicate, "queue %q is already declared (%s)", k.Value, p.where(f.Queues[i].Pos))
		return nil
	}
	q := &Queue{
		Name:           k.Value,
		GoName:         GoName(k.Value),
		Pos:            p.pos(k),
		Type:           DefaultQueueType,
		Prefetch:       DefaultPrefetch,
		Concurrency:    DefaultConcurrency,
		DLQ:            k.Value + DLQSuffix,
		MaxBodyBytes:   DefaultMaxBodyBytes,
		HandlerTimeout: DefaultHandlerTimeout,
		Inbox:          DefaultInbox,
	}
	if r := []rune(q.GoName); q.Name != "" && (len(r) == 0 || !(r[0] >= 'A' && r[0] <= 'Z')) {
		p.errorf(k, RuleName, "queue name %q must start with a letter to give a Go name", q.Name)
	} else {
		p.declare(fmt.Sprintf("queue %q", q.Name), k,
			q.GoName+"Handler", "Unimplemented"+q.GoName+"Handler", q.GoName+"QueueSpec", q.GoName+"Routes", "New"+q.GoName+"Consumer")
	}
	m := p.object(v, k.Value, queueKeys...)
	if m == nil {
		return nil
	}
	if e, ok := m["type"]; ok {
		if s, ok := p.str(e.v, "type"); ok {
			q.Type = QueueType(s)
			if q.Type != Classic && q.Type != Quorum {
				p.errorf(e.v, RuleUnknownType, "unknown queue type %q", s).Hint = hint(s, []string{string(Classic), string(Quorum)}, "classic or quorum")
			}
		}
	}
	if e, ok := m["inbox"]; ok {
		if s, ok := p.str(e.v, "inbox"); ok {
			q.Inbox = Inbox(s)
			if known := []string{string(InboxNone), string(InboxOptional), string(InboxRequired)}; !slices.Contains(known, s) {
				p.errorf(e.v, RuleInbox, "unknown inbox policy %q", s).Hint = hint(s, known, "required, optional or none")
			}
		}
	}
	// RabbitMQ's prefetch count is 16 bits wide.
	p.setInt(m, "prefetch", &q.Prefetch, 1, math.MaxUint16)
	p.setInt(m, "concurrency", &q.Concurrency, 1, math.MaxUint16)
	p.setInt(m, "max_body_bytes", &q.MaxBodyBytes, 1, maxBodyBytes)
	dlqAt := k
	if e, ok := m["dlq"]; ok {
		if s, ok := p.str(e.v, "dlq"); ok {
			q.DLQ, dlqAt = s, e.v
			if s == q.Name {
				p.errorf(e.v, RuleQueueName, "dlq must differ from the queue it serves")
			}
		}
	}
	if e, ok := m["handler_timeout"]; ok {
		if d, ok := p.duration(e.v, "handler_timeout", false); ok {
			q.HandlerTimeout = d
		}
	}
	if e, ok := m["settlement_budget"]; ok {
		d, ok := p.duration(e.v, "settlement_budget", true)
		if ok && d > 0 && d < q.HandlerTimeout {
			p.errorf(e.v, RuleRetry, "settlement_budget %s is shorter than handler_timeout %s", d, q.HandlerTimeout).
				Hint = "a delivery's budget must cover its handler; use 0 for the runtime's default"
		}
		q.SettlementBudget = d
	}
	q.Retry = p.retry(m)
	p.queueNames(q, k, dlqAt)
	if e, ok := m["consumes"]; ok {
		q.Consumes = p.consumes(e.v, f.Messages)
	} else {
		p.errorf(k, RuleMissingKey, "queue %q consumes nothing: add consumes", q.Name)
	}
	return q
}

// maxQueueName is the longest queue name Lily's runtime accepts. RabbitMQ
// allows 255 bytes; the rest is room for the retry buckets' suffixes.
const maxQueueName = 200

// queueNames checks the names RabbitMQ will be asked to declare for q: the
// queue, its DLQ and its retry buckets.
func (p *parser) queueNames(q *Queue, at, dlqAt *yaml.Node) {
	check := func(n *yaml.Node, what, name string, limit int) bool {
		switch {
		case name == "":
			p.errorf(n, RuleQueueName, "%s is empty: RabbitMQ would name the queue itself", what)
		case len(name) > limit:
			why := "RabbitMQ would refuse it"
			if limit < 255 {
				why = fmt.Sprintf("longer than %d, which leaves room for retry bucket names within RabbitMQ's 255", limit)
			}
			p.errorf(n, RuleQueueName, "%s %q is %d bytes: %s", what, shorten(name), len(name), why).
				Hint = fmt.Sprintf("use 1 to %d bytes", limit)
		case strings.HasPrefix(name, "amq."):
			p.errorf(n, RuleQueueName, "%s %q starts with amq., which RabbitMQ reserves for itself (403 ACCESS_REFUSED)", what, name)
		case strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }):
			p.errorf(n, RuleQueueName, "%s %q holds control characters", what, name)
		default:
			return true
		}
		return false
	}
	// Names made from a refused one would only repeat its error.
	if !check(at, "queue name", q.Name, maxQueueName) {
		if dlqAt != at {
			check(dlqAt, "dlq", q.DLQ, 255)
		}
		return
	}
	check(dlqAt, "dlq", q.DLQ, 255)
	for _, d := range q.Retry.Delays {
		check(at, "retry bucket", q.Name+".retry."+d.String(), 255)
	}
}

// shorten keeps a long name readable in a message.
func shorten(s string) string {
	if len(s) <= 40 {
		return s
	}
	return s[:37] + "..."
}

func (p *parser) setInt(m map[string]entry, key string, dst *int, lo, hi int) {
	if e, ok := m[key]; ok {
		if v, ok := p.intRange(e.v, key, lo, hi); ok {
			*dst = v
		}
	}
}

// maxAttempts stays within the runtime's default bound on x-lily-attempt,
// beyond which it treats the header as forged.
const maxAttempts = 1000

func (p *parser) retry(q map[string]entry) Retry {
	r := Retry{MaxAttempts: 1}
	e, ok := q["retry"]
	if !ok {
		return r
	}
	m := p.object(e.v, "retry", "delays", "max_attempts")
	if d, ok := m["delays"]; ok {
		items, _ := p.seq(d.v, "delays")
		for i, item := range items {
			v, ok := p.duration(item, "a retry delay", false)
			if !ok {
				continue
			}
			if v%time.Millisecond != 0 {
				p.errorf(item, RuleDuration, "retry delay %s is not a whole number of milliseconds, as RabbitMQ message TTLs are", v)
			}
			if i > 0 && len(r.Delays) == i && v <= r.Delays[i-1] {
				p.errorf(item, RuleRetryOrder, "retry delay %s does not increase on the one before it (%s)", v, r.Delays[i-1]).
					Hint = "list each delay once, shortest first: the last one repeats until max_attempts"
			}
			r.Delays = append(r.Delays, v)
		}
	}
	r.MaxAttempts = 1 + len(r.Delays)
	if a, ok := m["max_attempts"]; ok {
		if v, ok := p.intRange(a.v, "max_attempts", 1, maxAttempts); ok {
			r.MaxAttempts = v
			if v > 1 && len(r.Delays) == 0 {
				p.errorf(a.v, RuleRetry, "max_attempts %d needs at least one retry delay", v).Hint = "add delays: [5s]"
			}
		}
	}
	return r
}

// acknowledgements reads the breaking changes a schema accepts on purpose:
// each needs its rule and a reason a reviewer can read.
func (p *parser) acknowledgements(n *yaml.Node) []Acknowledgement {
	items, _ := p.seq(n, "acknowledge")
	var out []Acknowledgement
	for _, item := range items {
		m := p.object(item, "acknowledge", "rule", "subject", "reason")
		if m == nil {
			continue
		}
		a := Acknowledgement{Pos: p.pos(item)}
		for _, f := range []struct {
			key string
			dst *string
		}{{"rule", &a.Rule}, {"subject", &a.Subject}, {"reason", &a.Reason}} {
			if e, ok := m[f.key]; ok {
				if *f.dst, ok = p.str(e.v, f.key); ok && *f.dst == "" {
					// An empty subject would accept the rule everywhere, unseen.
					p.errorf(e.v, RuleEmpty, "%s is empty", f.key)
				}
			} else if f.key != "subject" {
				p.errorf(item, RuleMissingKey, "missing %s: an acknowledgement names the rule it accepts and why", f.key)
			}
		}
		if e, ok := m["rule"]; ok && a.Rule != "" {
			if problem, help := AcknowledgementProblem(a.Rule); problem != "" {
				p.errorf(e.v, RuleAcknowledge, "%s", problem).Hint = help
				continue
			}
		}
		if _, hasSubject := m["subject"]; a.Rule != "" && a.Reason != "" && (!hasSubject || a.Subject != "") {
			out = append(out, a)
		}
	}
	return out
}

// AcknowledgementProblem says why an acknowledgement may not name rule, with
// a hint, or returns "" when rule is a breaking-change rule. Lint rules are
// refused: only lilygen breaking reads acknowledgements.
func AcknowledgementProblem(rule string) (problem, help string) {
	r, ok := rules.Lookup(rule)
	switch {
	case !ok:
		return fmt.Sprintf("unknown rule %q", rule), hint(rule, rules.Breaking(), "lilygen breaking -h lists the rules")
	case r.Category == rules.Lint:
		return fmt.Sprintf("%s is a lint rule: acknowledge accepts breaking changes only", rule), ""
	}
	return "", ""
}

func (p *parser) consumes(n *yaml.Node, msgs []*Message) []Consume {
	items, ok := p.seq(n, "consumes")
	if !ok {
		return nil
	}
	if len(items) == 0 {
		p.errorf(n, RuleEmpty, "consumes: want at least one message")
	}
	var out []Consume
	first := map[*Version]*yaml.Node{}
	for _, item := range items {
		m := p.object(item, "consumes", "message", "versions")
		if m == nil {
			continue
		}
		e, ok := m["message"]
		if !ok {
			p.errorf(item, RuleMissingKey, "missing message")
			continue
		}
		name, ok := p.str(e.v, "message")
		if !ok {
			continue
		}
		i := slices.IndexFunc(msgs, func(m *Message) bool { return m.Name == name })
		if i < 0 {
			names := make([]string, len(msgs))
			for j, m := range msgs {
				names[j] = m.Name
			}
			p.errorf(e.v, RuleUnknownRef, "unknown message %q", name).Hint = hint(name, names, "messages: "+strings.Join(names, ", "))
			continue
		}
		c := Consume{Message: msgs[i], Versions: msgs[i].Versions}
		if v, ok := m["versions"]; ok {
			c.Versions = p.consumedVersions(v.v, msgs[i])
		}
		for _, ver := range c.Versions {
			if prev, dup := first[ver]; dup {
				p.errorf(e.v, RuleDuplicate, "%s version %d is consumed twice (first at line %d)", name, ver.Number, prev.Line)
			}
			first[ver] = e.v
		}
		out = append(out, c)
	}
	return out
}

func (p *parser) consumedVersions(n *yaml.Node, msg *Message) []*Version {
	items, ok := p.seq(n, "versions")
	if !ok {
		return nil
	}
	if len(items) == 0 {
		p.errorf(n, RuleEmpty, "versions: want at least one version, or leave versions out to consume them all")
	}
	var out []*Version
	for _, item := range items {
		num, ok := p.integer(item, "a version")
		if !ok {
			continue
		}
		i := slices.IndexFunc(msg.Versions, func(v *Version) bool { return int64(v.Number) == num })
		switch {
		case i < 0:
			have := make([]string, len(msg.Versions))
			for j, v := range msg.Versions {
				have[j] = strconv.Itoa(v.Number)
			}
			p.errorf(item, RuleUnknownRef, "message %s has no version %d", msg.Name, num).Hint = "it has " + strings.Join(have, ", ")
		case slices.Contains(out, msg.Versions[i]):
			p.errorf(item, RuleDuplicate, "duplicate version %d", num)
		default:
			out = append(out, msg.Versions[i])
		}
	}
	slices.SortFunc(out, func(a, b *Version) int { return a.Number - b.Number })
	return out
}

// kind checks that n is of kind k; YAML aliases are refused so that a schema
// reads as written and cannot expand without bound.
func (p *parser) kind(n *yaml.Node, k yaml.Kind, what string) bool {
	if n.Kind == yaml.AliasNode {
		p.errorf(n, RuleAlias, "%s: YAML aliases are not supported", what)
		return false
	}
	if n.Kind == k {
		return true
	}
	want := map[yaml.Kind]string{yaml.MappingNode: "a mapping", yaml.SequenceNode: "a list"}[k]
	p.errorf(n, RuleKind, "%s: want %s, got %s", what, want, describe(n))
	return false
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	switch n.ShortTag() {
	case "!!str":
		return fmt.Sprintf("the string %q", shorten(n.Value))
	case "!!null":
		return "null"
	case "!!int":
		return "the integer " + shorten(n.Value)
	case "!!float":
		return "the number " + shorten(n.Value)
	case "!!bool":
		return n.Value
	}
	return strconv.Quote(shorten(n.Value))
}

// entries calls fn with each key and value of mapping n in file order, after
// checking that the keys are distinct plain values.
func (p *parser) entries(n *yaml.Node, what string, fn func(k, v *yaml.Node)) {
	if !p.kind(n, yaml.MappingNode, what) {
		return
	}
	first := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			p.errorf(k, RuleKind, "%s: a key must be a plain value, not %s", what, describe(k))
			continue
		}
		if prev, dup := first[k.Value]; dup {
			p.errorf(k, RuleDuplicateKey, "duplicate key %q (first at line %d)", k.Value, prev.Line)
			continue
		}
		first[k.Value] = k
		fn(k, v)
	}
}

// object reads mapping n whose keys must be among known, reporting the others
// with the nearest known key. It returns nil when n is not a mapping.
func (p *parser) object(n *yaml.Node, what string, known ...string) map[string]entry {
	if n.Kind != yaml.MappingNode {
		p.kind(n, yaml.MappingNode, what)
		return nil
	}
	m := map[string]entry{}
	p.entries(n, what, func(k, v *yaml.Node) {
		if !slices.Contains(known, k.Value) {
			p.errorf(k, RuleUnknownKey, "unknown key %q", k.Value).
				Hint = hint(k.Value, known, "known keys: "+strings.Join(slices.Sorted(slices.Values(known)), ", "))
			return
		}
		m[k.Value] = entry{k, v}
	})
	return m
}

func (p *parser) scalar(n *yaml.Node, what, want string, tags ...string) bool {
	if n.Kind == yaml.ScalarNode && slices.Contains(tags, n.ShortTag()) {
		return true
	}
	if n.Kind == yaml.AliasNode {
		return p.kind(n, yaml.ScalarNode, what)
	}
	p.errorf(n, RuleKind, "%s: want %s, got %s", what, want, describe(n))
	return false
}

func (p *parser) str(n *yaml.Node, what string) (string, bool) {
	if !p.scalar(n, what, "a string", "!!str") {
		return "", false
	}
	return n.Value, true
}

func (p *parser) boolean(n *yaml.Node, what string) (bool, bool) {
	var v bool
	if !p.scalar(n, what, "true or false", "!!bool") || n.Decode(&v) != nil {
		return false, false
	}
	return v, true
}

func (p *parser) integer(n *yaml.Node, what string) (int64, bool) {
	var v int64
	if !p.scalar(n, what, "an integer", "!!int") {
		return 0, false
	}
	if err := n.Decode(&v); err != nil {
		p.errorf(n, RuleRange, "%s: %s does not fit in 64 bits", what, shorten(n.Value))
		return 0, false
	}
	return v, true
}

func (p *parser) intRange(n *yaml.Node, what string, lo, hi int) (int, bool) {
	v, ok := p.integer(n, what)
	switch {
	case !ok:
	case v < int64(lo):
		p.errorf(n, RuleRange, "%s must be at least %d, not %d", what, lo, v)
	case v > int64(hi):
		p.errorf(n, RuleRange, "%s must be at most %d, not %d", what, hi, v)
	default:
		return int(v), true
	}
	return 0, false
}

func (p *parser) number(n *yaml.Node, what string) (float64, bool) {
	var v float64
	if !p.scalar(n, what, "a number", "!!int", "!!float") || n.Decode(&v) != nil {
		return 0, false
	}
	if math.IsInf(v, 0) || math.IsNaN(v) {
		p.errorf(n, RuleRange, "%s: want a finite number, got %s", what, n.Value)
		return 0, false
	}
	return v, true
}

// duration reads a Go duration; zeroOK allows 0 as "not set".
func (p *parser) duration(n *yaml.Node, what string, zeroOK bool) (time.Duration, bool) {
	s, ok := p.str(n, what)
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		p.errorf(n, RuleDuration, "%s: %q is not a Go duration", what, shorten(s)).Hint = "such as 500ms, 5s or 1m30s"
	case d < 0 || d == 0 && !zeroOK:
		p.errorf(n, RuleDuration, "%s: %s must be positive", what, s)
	default:
		return d, true
	}
	return 0, false
}

func (p *parser) seq(n *yaml.Node, what string) ([]*yaml.Node, bool) {
	if !p.kind(n, yaml.SequenceNode, what) {
		return nil, false
	}
	return n.Content, true
}
