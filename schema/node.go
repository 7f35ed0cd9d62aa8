package schema

import (
	"fmt"
	"math"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lily-mq/lily/internal/queue"
	"gopkg.in/yaml.v3"
)

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
	if number, _ := unfit(n); number {
		return "the number " + shorten(n.Value)
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
	case "!!timestamp":
		if plainTimestamp(n) {
			what := "the time"
			if len(n.Value) == len(time.DateOnly) {
				what = "the date"
			}
			return what + " " + shorten(n.Value) + ", which YAML reads unquoted as a timestamp"
		}
	}
	// Named by its tag: "want a string, got "a.b"" would read as if it
	// contradicted itself.
	return fmt.Sprintf("%q tagged %s", shorten(n.Value), shorten(n.Tag))
}

// plainTimestamp reports whether n is a date or time YAML reads as a
// timestamp only because it is not quoted.
func plainTimestamp(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Style&(yaml.TaggedStyle|yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) == 0 && n.ShortTag() == "!!timestamp"
}

// YAML 1.2's core schema writes an integer and a float so.
var (
	yamlInt   = regexp.MustCompile(`^([-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$`)
	yamlFloat = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)
)

// integerText matches an integer in every form yaml.v3 reads one as
// !!int, its underscores removed: signed, decimal or with a 0x, 0o or 0b
// prefix (in either case, as Go's strconv reads them).
var integerText = regexp.MustCompile(`^[-+]?(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|[0-9]+)$`)

// unfit reports whether n is a plain scalar written as a YAML 1.2 number
// that yaml.v3 read as a string, as it does one its Go types cannot hold
// (1e400, 0x1ffffffffffffffff), and whether it is written as an integer:
// "got the string" would miss what is wrong with it.
func unfit(n *yaml.Node) (number, integer bool) {
	if n.Kind != yaml.ScalarNode || n.Style != 0 || n.ShortTag() != "!!str" {
		return false, false
	}
	integer = yamlInt.MatchString(n.Value)
	return integer || yamlFloat.MatchString(n.Value), integer
}

// shorten keeps a long name readable in a message.
func shorten(s string) string {
	if len(s) <= 40 {
		return s
	}
	return s[:37] + "..."
}

// overLong shortens a name of more than maxName bytes, a limit that
// leaves such a name read (limitf), for an error that quotes a name
// within it whole.
func overLong(s string) string {
	if len(s) <= maxName {
		return s
	}
	return shorten(s)
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
			p.errorf(k, RuleDuplicateKey, "duplicate key %q (first at line %d)", shorten(k.Value), prev.Line)
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
			p.nearest(p.errorf(k, RuleUnknownKey, "unknown key %q", shorten(k.Value)),
				k.Value, known, "known keys: "+strings.Join(slices.Sorted(slices.Values(known)), ", "))
			return
		}
		m[k.Value] = entry{k, v}
	})
	return m
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

func (p *parser) scalar(n *yaml.Node, what, want string, tags ...string) bool {
	if n.Kind == yaml.ScalarNode && slices.Contains(tags, n.ShortTag()) {
		return true
	}
	if n.Kind == yaml.AliasNode {
		return p.kind(n, yaml.ScalarNode, what)
	}
	e := p.errorf(n, RuleKind, "%s: want %s, got %s", what, want, describe(n))
	if want == "a string" && plainTimestamp(n) {
		e.Hint = "quote it: " + strconv.Quote(shorten(n.Value))
	}
	return false
}

func (p *parser) str(n *yaml.Node, what string) (string, bool) {
	if !p.scalar(n, what, "a string", "!!str") {
		return "", false
	}
	return n.Value, true
}

// decode reads scalar n, whose tag the caller has checked, into v. Only an
// explicit tag its text does not fit (!!bool foo, !!float abc) fails to
// decode: that is the wrong kind, reported rather than dropped.
func (p *parser) decode(n *yaml.Node, what string, v any) bool {
	if n.Decode(v) != nil {
		p.errorf(n, RuleKind, "%s: YAML cannot read %q as %s, its tag", what, shorten(n.Value), n.ShortTag())
		return false
	}
	return true
}

func (p *parser) boolean(n *yaml.Node, what string) (bool, bool) {
	var v bool
	if !p.scalar(n, what, "true or false", "!!bool") || !p.decode(n, what, &v) {
		return false, false
	}
	return v, true
}

func (p *parser) integer(n *yaml.Node, what string) (int64, bool) {
	var v int64
	if p.leadingZero(n, what) {
		return 0, false
	}
	if _, integer := unfit(n); !integer && !p.scalar(n, what, "an integer", "!!int") {
		return 0, false
	}
	if n.Decode(&v) == nil {
		return v, true
	}
	// An integer past int64 fails as a tag its text does not fit does, or
	// past uint64 in hex or octal is read as a string. Its text tells it,
	// in time of its length: big.Int would read a MiB of digits in
	// seconds, growing with the square of their count.
	if integerText.MatchString(strings.ReplaceAll(n.Value, "_", "")) {
		p.errorf(n, RuleRange, "%s: %s does not fit in 64 bits", what, shorten(n.Value))
		return 0, false
	}
	p.decode(n, what, &v)
	return 0, false
}

// leadingZero reports, as an error, a plain integer written with a leading
// 0 (010): YAML 1.1, and so yaml.v3, reads it as octal (8) where YAML 1.2
// tools and a reviewer read 10, and one holding an 8 or a 9 becomes a float.
func (p *parser) leadingZero(n *yaml.Node, what string) bool {
	quoted := yaml.SingleQuotedStyle | yaml.DoubleQuotedStyle | yaml.LiteralStyle | yaml.FoldedStyle
	if n.Kind != yaml.ScalarNode || n.Style&quoted != 0 || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") {
		return false
	}
	unsigned := strings.TrimLeft(n.Value, "+-")
	digits := strings.ReplaceAll(unsigned, "_", "")
	if len(digits) < 2 || digits[0] != '0' || strings.Trim(digits, "0123456789") != "" {
		return false
	}
	sign, value := strings.TrimPrefix(n.Value[:len(n.Value)-len(unsigned)], "+"), strings.TrimLeft(digits, "0")
	if value == "" {
		sign, value = "", "0"
	}
	e := p.errorf(n, RuleKind, "%s: %s has a leading 0, which YAML 1.1 reads as octal and YAML 1.2 as decimal", what, shorten(n.Value))
	e.Hint = "write " + shorten(sign+value)
	if !strings.ContainsAny(digits, "89") {
		e.Hint += ", or " + shorten(sign+"0o"+value) + " for octal"
	}
	return true
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
	if p.leadingZero(n, what) {
		return 0, false
	}
	switch number, integer := unfit(n); {
	case integer:
		p.errorf(n, RuleRange, "%s: %s does not fit in 64 bits", what, shorten(n.Value))
		return 0, false
	case number:
		p.errorf(n, RuleRange, "%s: %s is beyond float64's range", what, shorten(n.Value))
		return 0, false
	}
	if !p.scalar(n, what, "a number", "!!int", "!!float") || !p.decode(n, what, &v) {
		return 0, false
	}
	if math.IsInf(v, 0) || math.IsNaN(v) {
		p.errorf(n, RuleRange, "%s: want a finite number, got %s", what, shorten(n.Value))
		return 0, false
	}
	// A bound is checked as a float64: one that does not read as the
	// number written would check another.
	if v == 0 && strings.ContainsAny(strings.Split(strings.ToLower(n.Value), "e")[0], "123456789") {
		p.errorf(n, RuleRange, "%s: %s is too small for a float64, which reads it as 0", what, shorten(n.Value))
		return 0, false
	}
	if v == 0 {
		// A negative zero, written -0.0, is 0: as a bound it checks the
		// same, and generated code that wrote it -0.0 would fail vet's
		// peers (staticcheck SA4026) and mean 0 to Go all the same.
		v = 0
	}
	// An integer past uint64 comes tagged !!float: read as written, still.
	if i, ok := new(big.Int).SetString(strings.ReplaceAll(n.Value, "_", ""), 0); ok {
		if _, exact := new(big.Float).SetInt(i).Float64(); exact != big.Exact {
			p.errorf(n, RuleRange, "%s: %s has no float64 of its own: it reads as %s", what, shorten(n.Value), new(big.Float).SetFloat64(v).Text('f', 0))
			return 0, false
		}
	}
	return v, true
}

// MaxDuration is the longest duration a schema holds: RabbitMQ's longest
// message TTL, 2³²−1 ms (about 49.7 days). A retry delay or a message_ttl
// past it is refused by the broker when the queue is declared; a handler
// timeout or a settlement budget past it would hold a delivery longer than
// any broker timer.
const MaxDuration = queue.MaxDuration

// duration reads a Go duration of at most MaxDuration; zeroOK allows 0 as
// "not set".
func (p *parser) duration(n *yaml.Node, what string, zeroOK bool) (time.Duration, bool) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() != "!!str" {
		// A number without its unit (handler_timeout: 10) is the likely
		// slip: "want a string" alone does not say which string.
		e := p.errorf(n, RuleKind, "%s: want a duration, got %s", what, describe(n))
		e.Hint = "such as 500ms, 5s or 1m30s"
		if tag := n.ShortTag(); tag == "!!int" || tag == "!!float" {
			e.Hint = fmt.Sprintf("a duration has a unit, such as %ss or %sms", shorten(n.Value), shorten(n.Value))
		}
		return 0, false
	}
	s, ok := p.str(n, what)
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		p.errorf(n, RuleDuration, "%s: %q is not a Go duration", what, shorten(s)).Hint = "such as 500ms, 5s or 1m30s"
	case d < 0 || d == 0 && !zeroOK:
		p.errorf(n, RuleDuration, "%s: %s must be positive", what, shorten(s))
	case d > MaxDuration:
		p.errorf(n, RuleRange, "%s: %s is longer than RabbitMQ's longest message TTL, %s (2³²−1 ms)", what, shorten(s), MaxDuration)
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
