package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lily-mq/lily/wire"
)

// examples reads a version's examples and checks each against the version;
// fieldsOK says whether its fields and headers read without error, since an
// example cannot be judged against a broken schema.
func (p *parser) examples(n *yaml.Node, ver *Version, fieldsOK bool) []Example {
	items, ok := p.seq(n, "examples")
	if !ok {
		return nil
	}
	var out []Example
	for i, item := range items {
		m := p.object(item, "an example", "body", "headers")
		if m == nil {
			continue
		}
		e, ok := m["body"]
		if !ok {
			p.errorf(item, RuleMissingKey, "example %d has no body", i+1).Hint = "body: {field: value, ...}"
			continue
		}
		var buf bytes.Buffer
		if e.v.ShortTag() == "!!str" {
			// A string is JSON text, as copied from a log or a test.
			if err := json.Compact(&buf, []byte(e.v.Value)); err != nil {
				p.errorf(e.v, RuleExample, "example %d: the body is not JSON: %v", i+1, err)
				continue
			}
			if doc, err := wire.ParseJSON(buf.Bytes()); err == nil && refMember(doc) {
				p.errorf(e.v, RuleExample, "example %d: the body has a key %q: %s", i+1, refKey, refWhy).Hint = refHint
				continue
			}
		} else if bad := p.toJSON(&buf, e.v); bad {
			continue
		}
		ex := Example{Pos: p.pos(item), Body: buf.Bytes()}
		if h, ok := m["headers"]; ok {
			if ex.Headers, ok = p.headerValues(h.v); !ok {
				continue
			}
		}
		if !fieldsOK || p.brokenTypes() {
			continue
		}
		if err := ver.CheckExample(ex.Body, ex.Headers); err != nil {
			at := e.v
			var ve *wire.FieldError
			if errors.As(err, &ve) {
				at = locate(m, ve.Path)
			}
			p.errorf(at, RuleExample, "example %d of %s breaks the schema: %v", i+1, ver.GoName, err)
		}
		out = append(out, ex)
	}
	return out
}

// toJSON writes YAML node n as JSON, mappings keeping their order. It
// reports a node JSON cannot hold and returns true if there was one.
func (p *parser) toJSON(buf *bytes.Buffer, n *yaml.Node) (bad bool) {
	switch n.Kind {
	case yaml.MappingNode:
		buf.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode {
				p.errorf(k, RuleKind, "an example's keys must be plain values, not %s", describe(k))
				return true
			}
			if k.Value == refKey {
				p.errorf(k, RuleExample, "an example's key %q: %s", refKey, refWhy).Hint = refHint
				return true
			}
			if i > 0 {
				buf.WriteByte(',')
			}
			writeString(buf, k.Value)
			buf.WriteByte(':')
			if p.toJSON(buf, n.Content[i+1]) {
				return true
			}
		}
		buf.WriteByte('}')
	case yaml.SequenceNode:
		buf.WriteByte('[')
		for i, item := range n.Content {
			if i > 0 {
				buf.WriteByte(',')
			}
			if p.toJSON(buf, item) {
				return true
			}
		}
		buf.WriteByte(']')
	case yaml.ScalarNode:
		return p.scalarJSON(buf, n)
	default:
		p.kind(n, yaml.ScalarNode, "an example")
		return true
	}
	return false
}

func (p *parser) scalarJSON(buf *bytes.Buffer, n *yaml.Node) (bad bool) {
	switch n.ShortTag() {
	case "!!null":
		var v any
		if !p.decode(n, "a value", &v) {
			return true
		}
		buf.WriteString("null")
	case "!!bool":
		v, ok := p.boolean(n, "a value")
		if !ok {
			return true
		}
		buf.WriteString(strconv.FormatBool(v))
	case "!!int":
		v, ok := p.integer(n, "a value")
		if !ok {
			return true
		}
		buf.WriteString(strconv.FormatInt(v, 10))
	case "!!float":
		var v float64
		if n.Decode(&v) != nil || math.IsInf(v, 0) || math.IsNaN(v) {
			p.errorf(n, RuleExample, "%s is not a JSON number", shorten(n.Value))
			return true
		}
		buf.WriteString(FormatFloat(v))
	default: // strings, and timestamps or binary as written
		var v any
		if !p.decode(n, "a value", &v) {
			return true
		}
		writeString(buf, n.Value)
	}
	return false
}

// refKey is the key JSON Reference gives its meaning: AsyncAPI's and JSON
// Schema's tools take any object with a member $ref for a reference, and
// would fetch its URL or put another part of the document in its place.
// lilygen refuses it where a schema's keys go into the AsyncAPI document as
// they are: the members of an example's body, and header names.
const refKey = "$ref"

const (
	refWhy  = "the AsyncAPI document holds it as written, and AsyncAPI and JSON Schema tools read a $ref member as a JSON reference"
	refHint = "name it otherwise"
)

// refMember reports whether a JSON value holds an object with a member
// named refKey, at any depth.
func refMember(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		if _, ok := v[refKey]; ok {
			return true
		}
		for _, x := range v {
			if refMember(x) {
				return true
			}
		}
	case []any:
		return slices.ContainsFunc(v, refMember)
	}
	return false
}

func writeString(buf *bytes.Buffer, s string) {
	b, _ := json.Marshal(s) // a string always marshals
	buf.Write(b)
}

// headerValues reads an example's headers as an AMQP table holds them.
func (p *parser) headerValues(n *yaml.Node) (map[string]any, bool) {
	out := map[string]any{}
	ok := true
	p.entries(n, "headers", func(k, v *yaml.Node) {
		if k.Value == refKey {
			p.errorf(k, RuleName, "header %q: %s", refKey, refWhy).Hint = refHint
			ok = false
			return
		}
		var val any
		var good bool
		// An alias's tag is its anchor's, but its Value the anchor's name.
		switch tag := v.ShortTag(); {
		case v.Kind != yaml.ScalarNode:
		case tag == "!!str":
			val, good = v.Value, true
		case tag == "!!int":
			val, good = p.integer(v, "a header")
		case tag == "!!float":
			val, good = p.number(v, "a header")
		case tag == "!!bool":
			val, good = p.boolean(v, "a header")
		case tag == "!!timestamp":
			var t time.Time
			good = p.decode(v, "a header", &t)
			val = t
		}
		if !good {
			// Reported above when of a tag it takes, here when not.
			p.scalar(v, "a header", "a string, number, bool or timestamp", "!!str", "!!int", "!!float", "!!bool", "!!timestamp")
			ok = false
			return
		}
		out[k.Value] = val
	})
	return out, ok && n.Kind == yaml.MappingNode
}

// locate finds the node of an example at a wire.FieldError path, such as
// items[2].sku, headers.x-tenant or tags["a"], or the nearest node it can.
func locate(m map[string]entry, path string) *yaml.Node {
	root := m["body"]
	if name, ok := strings.CutPrefix(path, HeaderPath("")); ok {
		if h, ok := m["headers"]; ok {
			return child(h.v, name, h.k)
		}
		return root.k
	}
	at := root.v
	for path != "" {
		var key string
		switch {
		case strings.HasPrefix(path, `["`):
			end := strings.Index(path, `"]`)
			if end < 0 {
				return at
			}
			key, _ = strconv.Unquote(path[1 : end+1])
			path = path[end+2:]
		case strings.HasPrefix(path, "["):
			end := strings.IndexByte(path, ']')
			i, err := strconv.Atoi(path[1:max(end, 1)])
			if end < 0 || err != nil || at.Kind != yaml.SequenceNode || i >= len(at.Content) {
				return at
			}
			at, path = at.Content[i], path[end+1:]
			continue
		default:
			path = strings.TrimPrefix(path, ".")
			end := strings.IndexAny(path, ".[")
			if end < 0 {
				end = len(path)
			}
			key, path = path[:end], path[end:]
		}
		next := child(at, key, nil)
		if next == nil {
			return at
		}
		at = next
	}
	return at
}

// child returns the value of key in mapping n, matched as encoding/json
// matches keys, or fallback.
func child(n *yaml.Node, key string, fallback *yaml.Node) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return fallback
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if strings.EqualFold(n.Content[i].Value, key) {
			return n.Content[i+1]
		}
	}
	return fallback
}
