package main

import (
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
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
