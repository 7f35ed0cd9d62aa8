package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lily-mq/lily/schema"
	"github.com/lily-mq/lily/schema/rules"
)

// probeSchema has a place, @NAME, in every kind of mapping the language has;
// the test puts an unknown key in one of them at a time.
const probeSchema = `version: 1
package: probe
asyncapi: {file: probe.yaml @asyncapi}
envelopes:
  spring: {kind: headers @envelope}
messages:
  Ping:
    versions:
      1:
        fields:
          id: {type: string, max_length: 5 @field}
        headers:
          x-a: {type: string @header}
        examples:
          - {body: {id: a} @example}
@version
@message
queues:
  pings:
    consumes: [{message: Ping @consume}]
    retry: {delays: [1s] @retry}
@queue
@root
`

// indents are the block mappings' indentation; the rest are flow mappings.
var indents = map[string]string{"root": "", "message": "    ", "version": "        ", "queue": "    "}

// knownKeys asks the parser which keys the mapping at place takes: its error
// about an unknown key lists them.
func knownKeys(t *testing.T, place string) []string {
	t.Helper()
	src := probeSchema
	for _, m := range []string{"asyncapi", "envelope", "field", "header", "example", "version", "message", "consume", "retry", "queue", "root"} {
		insert := ""
		if m == place {
			insert = ", zzzzzzzzzzzz: 1"
			if indent, block := indents[m]; block {
				insert = indent + "zzzzzzzzzzzz: 1"
			}
		}
		src = strings.Replace(src, "@"+m, insert, 1)
	}
	_, err := schema.Parse("probe.lily.yaml", []byte(src))
	var list schema.ErrorList
	if !errors.As(err, &list) || len(list) != 1 || list[0].Rule != schema.RuleUnknownKey {
		t.Fatalf("probe of %s: want one unknown key, got %v\n%s", place, err, src)
	}
	keys, ok := strings.CutPrefix(list[0].Hint, "known keys: ")
	if !ok {
		t.Fatalf("probe of %s: hint %q does not list the known keys", place, list[0].Hint)
	}
	return strings.Split(keys, ", ")
}

// TestJSONSchemaKeys keeps docs/lily.schema.json in step with the parser:
// each mapping of the language takes the keys the JSON Schema lists for it.
func TestJSONSchemaKeys(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "lily.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	type object struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	var doc struct {
		object
		Defs map[string]object `json:"$defs"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	for place, def := range map[string]string{
		"root": "", "message": "message", "version": "version", "field": "field", "header": "field",
		"example": "example", "queue": "queue", "consume": "consume", "retry": "retry", "asyncapi": "asyncapi",
		"envelope": "envelope",
	} {
		props := doc.Properties
		if def != "" {
			props = doc.Defs[def].Properties
		}
		got := slices.Sorted(maps.Keys(props))
		if diff := cmp.Diff(knownKeys(t, place), got); diff != "" {
			t.Errorf("keys of %s (-parser +docs/lily.schema.json):\n%s", place, diff)
		}
	}
}

// TestJSONSchemaRules keeps the rule ids the JSON Schema offers for an
// acknowledgement those the parser accepts.
func TestJSONSchemaRules(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "lily.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Properties struct {
			Acknowledge struct {
				Items struct {
					Properties struct {
						Rule struct {
							Enum []string `json:"enum"`
						} `json:"rule"`
					} `json:"properties"`
				} `json:"items"`
			} `json:"acknowledge"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rules.Breaking(), doc.Properties.Acknowledge.Items.Properties.Rule.Enum); diff != "" {
		t.Errorf("acknowledge rules (-parser +docs/lily.schema.json):\n%s", diff)
	}
}

// TestJSONSchemaEnums keeps the JSON Schema's lists of field types, queue
// types and inbox policies in step with the parser's, read from its hints.
func TestJSONSchemaEnums(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "lily.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	type enum struct {
		Enum []string `json:"enum"`
	}
	var doc struct {
		Defs map[string]struct {
			Properties map[string]struct {
				enum
				// AnyOf holds a field type's list beside a shared type's name.
				AnyOf []enum `json:"anyOf"`
			} `json:"properties"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	base := strings.NewReplacer("@asyncapi", "", "@envelope", "", "@field", "", "@header", "", "@example", "", "@version", "", "@message", "",
		"@consume", "", "@retry", "", "@root", "").Replace(probeSchema)
	for _, tc := range []struct {
		def, key, from, to, prefix string
	}{
		{"field", "type", "id: {type: string", "id: {type: zzzzzzzzzzzz", "one of "},
		{"queue", "type", "@queue", "    type: zzzzzzzzzzzz", ""},
		{"queue", "inbox", "@queue", "    inbox: zzzzzzzzzzzz", ""},
	} {
		src := strings.Replace(strings.Replace(base, tc.from, tc.to, 1), "@queue", "", 1)
		_, err := schema.Parse("probe.lily.yaml", []byte(src))
		var list schema.ErrorList
		if !errors.As(err, &list) || len(list) != 1 {
			t.Fatalf("probe of %s.%s: %v\n%s", tc.def, tc.key, err, src)
		}
		hint := strings.TrimPrefix(list[0].Hint, tc.prefix)
		got := strings.FieldsFunc(strings.ReplaceAll(hint, " or ", ", "), func(r rune) bool { return r == ',' || r == ' ' })
		prop := doc.Defs[tc.def].Properties[tc.key]
		want := prop.Enum
		for _, alt := range prop.AnyOf {
			want = append(want, alt.Enum...)
		}
		if diff := cmp.Diff(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))); diff != "" {
			t.Errorf("%s.%s (-parser +docs/lily.schema.json):\n%s", tc.def, tc.key, diff)
		}
	}
}

// TestJSONSchemaPatterns keeps the JSON Schema's patterns of a version key and
// of a duration in step with the parser: of many spellings, each takes those
// lilygen accepts and no other. A duration's range (at most 2^32-1 ms, at
// least 1ns) is in its description, not its pattern, so none here is out of
// it.
func TestJSONSchemaPatterns(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "lily.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Defs map[string]struct {
			Pattern    string `json:"pattern"`
			Properties map[string]struct {
				PropertyNames struct {
					Pattern string `json:"pattern"`
				} `json:"propertyNames"`
			} `json:"properties"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	// The patterns are ECMA 262's, and RE2 reads these alike.
	versionKey := regexp.MustCompile(doc.Defs["message"].Properties["versions"].PropertyNames.Pattern)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, key := range versionKeys(rng) {
		src := fmt.Sprintf("version: 1\npackage: p\nmessages:\n  Ping:\n    versions:\n      %s: {}\nqueues:\n  q: {consumes: [{message: Ping}]}\n", key)
		_, err := schema.Parse("p.lily.yaml", []byte(src))
		if want := err == nil; versionKey.MatchString(key) != want {
			t.Errorf("version key %q: lilygen accepts it: %v; the pattern: %v", key, want, !want)
		}
	}
	for key, def := range map[string]string{"handler_timeout": "duration", "settlement_budget": "budget"} {
		pattern := regexp.MustCompile(doc.Defs[def].Pattern)
		for _, d := range durations(rng) {
			src := fmt.Sprintf("version: 1\npackage: p\nmessages:\n  Ping:\n    versions:\n      1: {}\nqueues:\n  q: {consumes: [{message: Ping}], %s: %s}\n", key, strconv.Quote(d))
			_, err := schema.Parse("p.lily.yaml", []byte(src))
			var list schema.ErrorList
			errors.As(err, &list)
			want := !slices.ContainsFunc(list, func(e *schema.Error) bool { return e.Rule == schema.RuleDuration })
			if pattern.MatchString(d) != want {
				t.Errorf("%s %q: lilygen accepts it: %v; the pattern: %v", key, d, want, !want)
			}
		}
	}
}

// versionKeys are spellings of versions in and out of range, as YAML
// integers in each base and sign, with and without underscores, and text
// that is no integer.
func versionKeys(rng *rand.Rand) []string {
	numbers := []int64{0, 1, 2, 7, 8, 9, 10, 15, 16, 63, 64, 100, 511, 512, 4095, 4096, 65535, 99999, 100000,
		262143, 262144, 524287, 524288, 999999, 1000000, 1000001, 1000008, 1048575, 1048576, 1 << 21, 1 << 40}
	for range 200 {
		numbers = append(numbers, rng.Int64N(1_100_000))
	}
	var keys []string
	for _, n := range numbers {
		dec, oct, hex, bin := strconv.FormatInt(n, 10), strconv.FormatInt(n, 8), strconv.FormatInt(n, 16), strconv.FormatInt(n, 2)
		for _, s := range []string{dec, "+" + dec, "-" + dec, "0" + oct, "00" + oct, "0o" + oct, "0O" + oct,
			"0x" + hex, "0X" + strings.ToUpper(hex), "0x0" + hex, "0b" + bin, "0B0" + bin, "+0x" + hex} {
			// YAML drops an underscore anywhere but first.
			at := 1 + rng.IntN(len(s))
			keys = append(keys, s, s[:at]+"_"+s[at:])
		}
	}
	return append(keys, "1.0", "1e3", "_1", "0x", "0o", "0b", "0b2", "08", "09", "0o8", "0xg", "+", "2_", "+_2", "1__0",
		"0_x_1", "++1", "+-1", "0.5", ".5", "0x1p2", "1_000_000", "1_000_001", "0b_1", "0_b1", "x1", "1x")
}

// durations are Go durations and near misses: signs, zeros, every unit,
// fractions with and without digits on either side.
func durations(rng *rand.Rand) []string {
	out := []string{"1s", ".5s", "+2s", "-2s", "0", "+0", "-0", "0s", "+0s", "-0s", "-0.0h", "00s", "1.s", ".s", "1", "s", "",
		"+", "-", "1h2m3.5s", "1\u00b5s", "1\u03bcs", "1us", "1ns", "1ms", "1m", "1h", "1d", "1 s", "1S", "1h1", "0.000s",
		"1.5.5s", "1e3s", "1_0s", "1h-1m", "2h0m", "0h0m0s", "+1.0m", "1msh", "1sm", "1ss", "0.25us", ".0s", "0.s", " 1s", "1s "}
	units := []string{"ns", "us", "\u00b5s", "\u03bcs", "ms", "s", "m", "h"}
	for range 300 {
		var b strings.Builder
		switch rng.IntN(4) {
		case 0:
			b.WriteString("+")
		case 1:
			b.WriteString("-")
		}
		for range 1 + rng.IntN(3) {
			whole, frac := strconv.Itoa(rng.IntN(3)*rng.IntN(40)), strconv.Itoa(rng.IntN(2)*rng.IntN(10))
			switch rng.IntN(4) {
			case 0:
				b.WriteString(whole)
			case 1:
				b.WriteString(whole + "." + frac)
			case 2:
				b.WriteString("." + frac)
			default:
				b.WriteString(whole + ".")
			}
			b.WriteString(units[2+rng.IntN(len(units)-2)]) // not below 1ns
		}
		out = append(out, b.String())
	}
	return out
}
