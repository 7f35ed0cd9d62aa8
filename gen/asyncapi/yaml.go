package asyncapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// The document is built as YAML nodes, so that keys come out in the order
// they are added (AsyncAPI's own order: asyncapi, info, channels, …) rather
// than sorted, and each scalar says what it is: the encoder quotes a string
// that would read as another type, such as "1.0".

// object is a YAML mapping under construction.
type object struct{ n *yaml.Node }

func newObject() object { return object{&yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}} }

// set adds key: v; a nil v adds nothing, so that a part the document may
// leave out is passed as it is, without a test at each call.
func (o object) set(key string, v *yaml.Node) object {
	if v != nil {
		o.n.Content = append(o.n.Content, mappingKey(key), v)
	}
	return o
}

// node is the mapping, or nil when it is empty, so that an object with
// nothing to say is left out.
func (o object) node() *yaml.Node {
	if len(o.n.Content) == 0 {
		return nil
	}
	return o.n
}

// mapping is o's node even when empty.
func (o object) mapping() *yaml.Node { return o.n }

// str is s as a string scalar. The encoder writes a string holding U+2028
// or U+2029 single-quoted, that character raw and the next line indented,
// as YAML 1.1 reads a line break; YAML 1.2 readers, AsyncAPI's parser among
// them, take it for a character and keep the indentation. Double quotes
// write it, and U+0085, as an escape that both read alike.
func str(s string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
	if strings.ContainsAny(s, "\u0085\u2028\u2029") {
		n.Style = yaml.DoubleQuotedStyle
	}
	return n
}

// mappingKey is key as a mapping's key. The encoder writes << plain, and
// YAML 1.1 readers (yaml.v3 among them) take a plain << for a merge key: a
// key << of the schema's, such as an example's member, is quoted.
func mappingKey(key string) *yaml.Node {
	n := str(key)
	if key == "<<" {
		n.Style = yaml.DoubleQuotedStyle
	}
	return n
}

func integer[T int | int64](v T) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(int64(v), 10)}
}

// number writes a float as YAML reads it back: an integral value as an
// integer, since yaml.v3 would tag a float written "1" explicitly.
func number(v float64) *yaml.Node {
	if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
		return integer(int64(v))
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: strconv.FormatFloat(v, 'g', -1, 64)}
}

func boolean(v bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v)}
}

func list(items ...*yaml.Node) *yaml.Node {
	return &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: items}
}

func strs(ss []string) *yaml.Node {
	items := make([]*yaml.Node, len(ss))
	for i, s := range ss {
		items[i] = str(s)
	}
	return list(items...)
}

// ref is a reference object: {$ref: pointer}.
func ref(pointer string) *yaml.Node { return newObject().set("$ref", str(pointer)).mapping() }

// value writes a value the schema model holds: a default, a header's value,
// a queue argument. A time is written as RFC 3339 text, as JSON carries it.
func value(v any) *yaml.Node {
	switch v := v.(type) {
	case string:
		return str(v)
	case int64:
		return integer(v)
	case float64:
		return number(v)
	case bool:
		return boolean(v)
	case time.Time:
		return str(v.Format(time.RFC3339Nano))
	case map[string]any:
		o := newObject()
		for _, k := range slices.Sorted(maps.Keys(v)) {
			o.set(k, value(v[k]))
		}
		return o.mapping()
	}
	panic(fmt.Sprintf("asyncapi: no YAML for %T", v))
}

// jsonValue writes JSON text (an example's body) as YAML, member order
// kept. It reads the JSON itself rather than as YAML, which would refuse a
// member name over 1,024 characters.
func jsonValue(text []byte) (*yaml.Node, error) {
	d := json.NewDecoder(bytes.NewReader(text))
	d.UseNumber()
	n, err := jsonNode(d)
	if err != nil {
		return nil, fmt.Errorf("reading JSON: %w", err)
	}
	return n, nil
}

func jsonNode(d *json.Decoder) (*yaml.Node, error) {
	t, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t := t.(type) {
	case json.Delim:
		n := list()
		if t == '{' {
			n = newObject().mapping()
		}
		for d.More() {
			if t == '{' {
				k, err := d.Token()
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, mappingKey(k.(string)))
			}
			item, err := jsonNode(d)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, item)
		}
		_, err := d.Token() // the closing delimiter
		return n, err
	case string:
		return str(t), nil
	case json.Number:
		// Untagged: YAML reads the number's own text as the number it is.
		return &yaml.Node{Kind: yaml.ScalarNode, Value: t.String()}, nil
	case bool:
		return boolean(t), nil
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}, nil
}

// encode writes n as YAML, indented by two spaces.
func encode(n *yaml.Node) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
