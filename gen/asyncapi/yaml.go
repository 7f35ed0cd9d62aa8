package asyncapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

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
		o.n.Content = append(o.n.Content, str(key), v)
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

// str is s as a string scalar, as a value or a key. The encoder quotes
// only what YAML 1.2 would read as another type, and writes a string with
// line breaks as a block or single-quoted. Readers misread some of that:
// YAML 1.1 ones (PyYAML, and tools built on it) take on, No and the like
// for booleans, 10:30 for the base-60 number 630, a plain << or = for a
// merge or a value key, which PyYAML refuses to load as a value; yaml.v3,
// js-yaml and AsyncAPI's parser lose or gain a block's leading and trailing
// line breaks ("\n" is written as an empty |2+ block, read as ""); a
// single-quoted U+2028 or U+2029 is a line break to YAML 1.1 and a
// character to 1.2. Such a string is double-quoted, where every reader
// reads it alike, its line breaks as escapes. So is one that escapes
// writes as escapes, which only a double-quoted string may hold.
func str(s string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
	if yaml11.MatchString(s) || strings.ContainsAny(s, "\n\r\u0085\u2028\u2029") || unsafe(s) {
		n.Style = yaml.DoubleQuotedStyle
	}
	return n
}

// unsafe reports whether s holds what escapes rewrites: ##[, which the
// GitHub Actions runner reads anywhere in a line of its log as a legacy
// workflow command (##[stop-commands]tok would have it ignore the
// annotations after it), a :: that a key would start a line with, or a
// character that is not printable, which yaml.v3 writes as itself when
// YAML deems it printable: a bidi override such as U+202E, which reorders
// what follows it where the document is shown.
func unsafe(s string) bool {
	return strings.Contains(s, "##[") || strings.HasPrefix(s, "::") || strings.ContainsFunc(s, notPrintable)
}

func notPrintable(r rune) bool { return !unicode.IsPrint(r) }

// escapes rewrites what unsafe finds in the encoded document doc, each
// within a double-quoted string (str), as that string's escapes, which
// read back as the same characters: a [ after ## as \x5b, and each
// character that is not printable as \u or \U and its code. The newlines
// left are the document's own, between its lines; a string starting with ::
// starts with a quote once double-quoted.
func escapes(doc []byte) []byte {
	doc = bytes.ReplaceAll(doc, []byte("##["), []byte(`##\x5b`))
	if !bytes.ContainsFunc(doc, func(r rune) bool { return r != '\n' && notPrintable(r) }) {
		return doc
	}
	var b bytes.Buffer
	for _, r := range string(doc) {
		switch {
		case r == '\n' || !notPrintable(r):
			b.WriteRune(r)
		case r > 0xffff:
			fmt.Fprintf(&b, `\U%08x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.Bytes()
}

// yaml11 matches the strings that yaml.v3 writes plain and YAML 1.1 reads
// as another type: its booleans, its base-60 integers and floats, and its
// merge and value keys.
var yaml11 = regexp.MustCompile(`^(?:y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF` +
	`|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|<<|=)$`)

func integer[T int | int64](v T) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(int64(v), 10)}
}

// number writes a float as YAML reads it back: an integral value as an
// integer, since yaml.v3 would tag a float written "1" explicitly.
func number(v float64) *yaml.Node {
	if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
		return integer(int64(v))
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: floatText(strconv.FormatFloat(v, 'g', -1, 64))}
}

// floatText is the number s, written with an exponent, as YAML 1.1 readers
// (PyYAML) read a float too: with a dot in its mantissa and a sign in its
// exponent ("1.0e+20", not "1e+20" or "1e20"), which they would read as a
// string. Its value is unchanged; other numbers are left as they are.
func floatText(s string) string {
	i := strings.IndexAny(s, "eE")
	if i < 0 {
		return s
	}
	mantissa, exp := s[:i], s[i+1:]
	if !strings.Contains(mantissa, ".") {
		mantissa += ".0"
	}
	if exp != "" && exp[0] != '+' && exp[0] != '-' {
		exp = "+" + exp
	}
	return mantissa + s[i:i+1] + exp
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
				n.Content = append(n.Content, str(k.(string)))
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
		return &yaml.Node{Kind: yaml.ScalarNode, Value: floatText(t.String())}, nil
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
	return escapes(b.Bytes()), nil
}
