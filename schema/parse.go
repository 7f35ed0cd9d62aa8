package schema

import (
	"fmt"
	"go/token"
	"math"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Load reads and checks the schema file at name.
func Load(name string) (*File, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	return Parse(name, data)
}

// Parse checks data, the contents of the schema file name. On failure the
// error is an ErrorList with every problem found, sorted by position.
func Parse(name string, data []byte) (*File, error) {
	p := &parser{name: name, decls: map[string]decl{}}
	f := p.file(data)
	if len(p.errs) > 0 {
		return nil, p.errs.sorted()
	}
	return f, nil
}

type parser struct {
	name  string
	errs  ErrorList
	decls map[string]decl // Go names the generated file declares
}

// decl is where a generated Go name comes from, to report two that clash.
type decl struct {
	what string
	at   *yaml.Node
}

type entry struct{ k, v *yaml.Node }

func (p *parser) errorf(n *yaml.Node, format string, args ...any) {
	p.errs = append(p.errs, &Error{File: p.name, Line: n.Line, Column: n.Column, Msg: fmt.Sprintf(format, args...)})
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
	col := 1
	if lines := strings.Split(string(data), "\n"); line <= len(lines) {
		col += len(lines[line-1]) - len(strings.TrimLeft(lines[line-1], " \t"))
	}
	p.errs = append(p.errs, &Error{File: p.name, Line: line, Column: col, Msg: "YAML syntax error: " + msg})
}

// declare records the Go names the generated file declares for one schema
// entity, and reports the first that another entity already took.
func (p *parser) declare(what string, at *yaml.Node, names ...string) {
	for _, name := range names {
		if first, ok := p.decls[name]; ok {
			p.errorf(at, "%s gives the Go name %s, already taken by %s (line %d)", what, name, first.what, first.at.Line)
			return
		}
	}
	for _, name := range names {
		p.decls[name] = decl{what: what, at: at}
	}
}

func (p *parser) file(data []byte) *File {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		p.syntaxError(data, err)
		return nil
	}
	if len(doc.Content) == 0 {
		p.errs = append(p.errs, &Error{File: p.name, Line: 1, Column: 1, Msg: "the schema is empty: want a mapping with version, package and messages"})
		return nil
	}
	root := doc.Content[0]
	if !p.kind(root, yaml.MappingNode, "the schema") {
		return nil
	}
	// The version decides what every other key means, so it is read first
	// and nothing else is read under a version this generator does not know.
	var version *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "version" {
			version = root.Content[i+1]
			break
		}
	}
	if version == nil {
		p.errorf(root, "missing version: add version: 1")
		return nil
	}
	if v, ok := p.integer(version, "version"); !ok {
		return nil
	} else if v != 1 {
		p.errorf(version, "schema version %d is unknown: this lilygen reads version 1", v)
		return nil
	}

	m := p.object(root, "the schema", "package", "output", "version", "messages", "queues")
	f := &File{Name: p.name, Output: DefaultOutput}
	if e, ok := m["package"]; ok {
		f.Package = p.packageName(e.v)
	} else {
		p.errorf(root, "missing package: the Go package name of the generated code")
	}
	if e, ok := m["output"]; ok {
		f.Output = p.output(e.v)
	}
	if e, ok := m["messages"]; ok {
		f.Messages = p.messages(e.v)
	} else {
		p.errorf(root, "missing messages")
	}
	if e, ok := m["queues"]; ok {
		p.entries(e.v, "queues", func(k, v *yaml.Node) {
			if q := p.queue(k, v, f.Messages); q != nil {
				f.Queues = append(f.Queues, q)
			}
		})
	}
	return f
}

func (p *parser) packageName(n *yaml.Node) string {
	s, ok := p.str(n, "package")
	if !ok {
		return ""
	}
	if !isIdent(s, false) || strings.ToLower(s) != s || token.IsKeyword(s) {
		p.errorf(n, "package %q is not a lower-case Go package name such as ordersmsg", s)
	}
	return s
}

func (p *parser) output(n *yaml.Node) string {
	s, ok := p.str(n, "output")
	if !ok {
		return DefaultOutput
	}
	clean := path.Clean(strings.ReplaceAll(s, `\`, "/"))
	if s == "" || path.IsAbs(clean) || strings.Contains(clean, ":") {
		p.errorf(n, "output %q must be a directory relative to the schema file", s)
	}
	return clean
}

func (p *parser) messages(n *yaml.Node) []*Message {
	var out []*Message
	p.entries(n, "messages", func(k, v *yaml.Node) {
		if !isIdent(k.Value, true) {
			p.errorf(k, "message name %q is not an UpperCamel Go identifier such as OrderPlaced", k.Value)
		}
		msg := &Message{Name: k.Value}
		p.declare("message "+msg.Name, k, msg.Name+"Type")
		m := p.object(v, k.Value, "versions")
		if m == nil {
			return
		}
		if e, ok := m["versions"]; ok {
			msg.Versions = p.versions(msg, e.v)
		} else {
			p.errorf(k, "message %s has no versions", msg.Name)
		}
		out = append(out, msg)
	})
	if n.Kind == yaml.MappingNode && len(n.Content) == 0 {
		p.errorf(n, "messages: want at least one message")
	}
	return out
}

func (p *parser) versions(msg *Message, n *yaml.Node) []*Version {
	var out []*Version
	first := map[int]*yaml.Node{}
	p.entries(n, "versions", func(k, v *yaml.Node) {
		num, ok := p.intRange(k, "version", 1, math.MaxInt32)
		if !ok {
			return
		}
		if prev, dup := first[num]; dup {
			p.errorf(k, "duplicate version %d (first at line %d)", num, prev.Line)
			return
		}
		first[num] = k
		ver := &Version{Number: num, GoName: fmt.Sprintf("%sV%d", msg.Name, num), ContentTypes: []string{DefaultContentType}}
		what := fmt.Sprintf("%s version %d", msg.Name, num)
		p.declare(what, k, ver.GoName, "Extract"+ver.GoName)
		m := p.object(v, what, "content_types", "fields")
		if e, ok := m["content_types"]; ok {
			ver.ContentTypes = p.contentTypes(e.v)
		}
		if e, ok := m["fields"]; ok {
			ver.Fields = p.fields(e.v, ver.GoName)
		}
		out = append(out, ver)
	})
	if n.Kind == yaml.MappingNode && len(n.Content) == 0 {
		p.errorf(n, "versions: want at least one version")
	}
	slices.SortFunc(out, func(a, b *Version) int { return a.Number - b.Number })
	return out
}

func (p *parser) contentTypes(n *yaml.Node) []string {
	var out []string
	items, ok := p.seq(n, "content_types")
	if !ok {
		return nil
	}
	if len(items) == 0 {
		p.errorf(n, "content_types: want at least one content type")
	}
	for _, item := range items {
		s, ok := p.str(item, "a content type")
		switch {
		case !ok:
		case s != DefaultContentType:
			p.errorf(item, "content type %q is not supported (only %s)", s, DefaultContentType)
		case slices.Contains(out, s):
			p.errorf(item, "duplicate content type %q", s)
		default:
			out = append(out, s)
		}
	}
	return out
}

var fieldKeys = []string{"type", "required", "min_length", "max_length", "min", "max", "min_items", "max_items", "fields", "items"}

// typeKeys are the keys, beyond type and required, that each field type takes.
var typeKeys = map[Type][]string{
	String:  {"min_length", "max_length"},
	Integer: {"min", "max"},
	Number:  {"min", "max"},
	Object:  {"fields"},
	List:    {"min_items", "max_items", "items"},
}

// fields reads an object's fields; structName is the Go struct that holds them.
func (p *parser) fields(n *yaml.Node, structName string) []*Field {
	var out []*Field
	goNames := map[string]*yaml.Node{}
	p.entries(n, "fields", func(k, v *yaml.Node) {
		name := k.Value
		if !validKey(name) {
			p.errorf(k, "field name %q must start with a letter and hold only letters, digits, _ and -", name)
			return
		}
		goName := GoName(name)
		if prev, dup := goNames[goName]; dup {
			p.errorf(k, "fields %q and %q (line %d) both give the Go name %s", name, prev.Value, prev.Line, goName)
			return
		}
		goNames[goName] = k
		if f := p.field(k, v, structName+goName, false); f != nil {
			f.Name, f.GoName = name, goName
			out = append(out, f)
		}
	})
	return out
}

func validKey(s string) bool {
	for i, r := range s {
		letter := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
		if !letter && (i == 0 || !(r >= '0' && r <= '9' || r == '_' || r == '-')) {
			return false
		}
	}
	return s != ""
}

// field reads one field, or a list's element when item is set. at is the key
// that names it; structName is the Go struct an object field becomes.
func (p *parser) field(at, n *yaml.Node, structName string, item bool) *Field {
	m := p.object(n, at.Value, fieldKeys...)
	if m == nil {
		return nil
	}
	te, ok := m["type"]
	if !ok {
		p.errorf(at, "field %q has no type (one of %s)", at.Value, typeList())
		return nil
	}
	t, ok := p.str(te.v, "type")
	if !ok {
		return nil
	}
	f := &Field{Type: Type(t), Required: item}
	if !slices.Contains(types, f.Type) {
		p.errorf(te.v, "unknown type %q%s", t, hint(t, typeNames(), "one of "+typeList()))
		return nil
	}
	if e, ok := m["required"]; ok {
		if item {
			p.errorf(e.k, "list elements are always required: remove required")
		} else {
			f.Required, _ = p.boolean(e.v, "required")
		}
	}
	for _, key := range fieldKeys[2:] {
		if e, ok := m[key]; ok && !slices.Contains(typeKeys[f.Type], key) {
			p.errorf(e.k, "%s does not apply to a field of type %s", key, f.Type)
			delete(m, key)
		}
	}
	switch f.Type {
	case String:
		f.MinLength, f.MaxLength = p.lengths(m, "min_length", "max_length")
	case List:
		f.MinItems, f.MaxItems = p.lengths(m, "min_items", "max_items")
		if e, ok := m["items"]; ok {
			f.Items = p.field(e.k, e.v, structName+"Item", true)
		} else {
			p.errorf(at, "list %q has no items", at.Value)
		}
	case Object:
		f.StructName = structName
		p.declare(fmt.Sprintf("object field %q", at.Value), at, structName)
		if e, ok := m["fields"]; ok {
			f.Fields = p.fields(e.v, structName)
		} else {
			p.errorf(at, "object %q has no fields", at.Value)
		}
	case Integer:
		f.MinInt, f.MaxInt = bounds(p, m, "min", "max", p.integer)
	case Number:
		f.MinNum, f.MaxNum = bounds(p, m, "min", "max", p.number)
	}
	return f
}

func typeNames() []string {
	out := make([]string, len(types))
	for i, t := range types {
		out[i] = string(t)
	}
	return out
}

func typeList() string { return strings.Join(typeNames(), ", ") }

// lengths reads a pair of length bounds, which are never negative.
func (p *parser) lengths(m map[string]entry, minKey, maxKey string) (lo, hi *int) {
	return bounds(p, m, minKey, maxKey, func(n *yaml.Node, what string) (int, bool) {
		return p.intRange(n, what, 0, math.MaxInt32)
	})
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
		p.errorf(m[minKey].v, "%s %s is greater than %s %s: no value fits", minKey, m[minKey].v.Value, maxKey, m[maxKey].v.Value)
	}
	return lo, hi
}

var queueKeys = []string{
	"type", "prefetch", "concurrency", "consumes", "retry", "dlq",
	"max_body_bytes", "handler_timeout", "settlement_budget",
}

// maxBodyBytes is RabbitMQ's own ceiling on a message body.
const maxBodyBytes = 512 << 20

func (p *parser) queue(k, v *yaml.Node, msgs []*Message) *Queue {
	q := &Queue{
		Name:           k.Value,
		GoName:         GoName(k.Value),
		Type:           DefaultQueueType,
		Prefetch:       DefaultPrefetch,
		Concurrency:    DefaultConcurrency,
		DLQ:            k.Value + DLQSuffix,
		MaxBodyBytes:   DefaultMaxBodyBytes,
		HandlerTimeout: DefaultHandlerTimeout,
	}
	p.queueName(k, q.Name, "queue name")
	if r, _ := utf8.DecodeRuneInString(q.GoName); !(r >= 'A' && r <= 'Z') {
		p.errorf(k, "queue name %q must start with a letter to give a Go name", q.Name)
	} else {
		p.declare(fmt.Sprintf("queue %q", q.Name), k,
			q.GoName+"Handler", q.GoName+"QueueSpec", q.GoName+"Routes", "New"+q.GoName+"Consumer")
	}
	m := p.object(v, k.Value, queueKeys...)
	if m == nil {
		return nil
	}
	if e, ok := m["type"]; ok {
		if s, ok := p.str(e.v, "type"); ok {
			q.Type = QueueType(s)
			if q.Type != Classic && q.Type != Quorum {
				p.errorf(e.v, "unknown queue type %q%s", s, hint(s, []string{string(Classic), string(Quorum)}, "classic or quorum"))
			}
		}
	}
	// RabbitMQ's prefetch count is 16 bits wide.
	p.setInt(m, "prefetch", &q.Prefetch, 1, math.MaxUint16)
	p.setInt(m, "concurrency", &q.Concurrency, 1, math.MaxUint16)
	p.setInt(m, "max_body_bytes", &q.MaxBodyBytes, 1, maxBodyBytes)
	if e, ok := m["dlq"]; ok {
		if s, ok := p.str(e.v, "dlq"); ok {
			q.DLQ = s
			p.queueName(e.v, s, "dlq")
			if s == q.Name {
				p.errorf(e.v, "dlq must differ from the queue it serves")
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
			p.errorf(e.v, "settlement_budget %s is shorter than handler_timeout %s", d, q.HandlerTimeout)
		}
		q.SettlementBudget = d
	}
	q.Retry = p.retry(m)
	if e, ok := m["consumes"]; ok {
		q.Consumes = p.consumes(e.v, msgs)
	} else {
		p.errorf(k, "queue %q consumes nothing: add consumes", q.Name)
	}
	return q
}

// queueName checks a queue or DLQ name: RabbitMQ allows 255 bytes, and 200
// leaves room for the retry buckets' suffixes.
func (p *parser) queueName(n *yaml.Node, s, what string) {
	if s == "" || len(s) > 200 || strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		p.errorf(n, "%s %q must be 1 to 200 bytes without control characters", what, s)
	}
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
		for _, item := range items {
			v, ok := p.duration(item, "a retry delay", false)
			if ok && v%time.Millisecond != 0 {
				p.errorf(item, "retry delay %s is not a whole number of milliseconds, as RabbitMQ message TTLs are", v)
			}
			r.Delays = append(r.Delays, v)
		}
	}
	r.MaxAttempts = 1 + len(r.Delays)
	if a, ok := m["max_attempts"]; ok {
		if v, ok := p.intRange(a.v, "max_attempts", 1, maxAttempts); ok {
			r.MaxAttempts = v
			if v > 1 && len(r.Delays) == 0 {
				p.errorf(a.v, "max_attempts %d needs at least one retry delay", v)
			}
		}
	}
	return r
}

func (p *parser) consumes(n *yaml.Node, msgs []*Message) []Consume {
	items, ok := p.seq(n, "consumes")
	if !ok {
		return nil
	}
	if len(items) == 0 {
		p.errorf(n, "consumes: want at least one message")
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
			p.errorf(item, "missing message")
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
			p.errorf(e.v, "unknown message %q%s", name, hint(name, names, "messages: "+strings.Join(names, ", ")))
			continue
		}
		c := Consume{Message: msgs[i], Versions: msgs[i].Versions}
		if v, ok := m["versions"]; ok {
			c.Versions = p.consumedVersions(v.v, msgs[i])
		}
		for _, ver := range c.Versions {
			if prev, dup := first[ver]; dup {
				p.errorf(e.v, "%s version %d is consumed twice (first at line %d)", name, ver.Number, prev.Line)
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
		p.errorf(n, "versions: want at least one version, or leave versions out to consume them all")
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
			p.errorf(item, "message %s has no version %d (it has %s)", msg.Name, num, strings.Join(have, ", "))
		case slices.Contains(out, msg.Versions[i]):
			p.errorf(item, "duplicate version %d", num)
		default:
			out = append(out, msg.Versions[i])
		}
	}
	slices.SortFunc(out, func(a, b *Version) int { return a.Number - b.Number })
	return out
}

// hint suggests the candidate nearest to got, or lists what fits.
func hint(got string, candidates []string, fits string) string {
	if s := suggest(got, candidates); s != "" {
		return s
	}
	return " (" + fits + ")"
}

// kind checks that n is of kind k; YAML aliases are refused so that a schema
// reads as written and cannot expand without bound.
func (p *parser) kind(n *yaml.Node, k yaml.Kind, what string) bool {
	if n.Kind == yaml.AliasNode {
		p.errorf(n, "%s: YAML aliases are not supported", what)
		return false
	}
	if n.Kind == k {
		return true
	}
	want := map[yaml.Kind]string{yaml.MappingNode: "a mapping", yaml.SequenceNode: "a list"}[k]
	p.errorf(n, "%s: want %s, got %s", what, want, describe(n))
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
		return fmt.Sprintf("the string %q", n.Value)
	case "!!null":
		return "null"
	case "!!int":
		return "the integer " + n.Value
	case "!!float":
		return "the number " + n.Value
	case "!!bool":
		return n.Value
	}
	return n.Value
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
			p.errorf(k, "%s: a key must be a plain value, not %s", what, describe(k))
			continue
		}
		if prev, dup := first[k.Value]; dup {
			p.errorf(k, "duplicate key %q (first at line %d)", k.Value, prev.Line)
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
			p.errorf(k, "unknown key %q%s", k.Value, hint(k.Value, known, "known keys: "+strings.Join(slices.Sorted(slices.Values(known)), ", ")))
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
	p.errorf(n, "%s: want %s, got %s", what, want, describe(n))
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
		p.errorf(n, "%s: %s does not fit in 64 bits", what, n.Value)
		return 0, false
	}
	return v, true
}

func (p *parser) intRange(n *yaml.Node, what string, lo, hi int) (int, bool) {
	v, ok := p.integer(n, what)
	switch {
	case !ok:
	case v < int64(lo):
		p.errorf(n, "%s must be at least %d, not %d", what, lo, v)
	case v > int64(hi):
		p.errorf(n, "%s must be at most %d, not %d", what, hi, v)
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
		p.errorf(n, "%s: want a finite number, got %s", what, n.Value)
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
		p.errorf(n, "%s: %q is not a Go duration such as 500ms, 5s or 1m30s", what, s)
	case d < 0 || d == 0 && !zeroOK:
		p.errorf(n, "%s: %s must be positive", what, s)
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
