package schema

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const valid = `version: 1
package: ordersmsg
messages:
  OrderPlaced:
    versions:
      2:
        fields:
          order_id: {type: string, required: true, min_length: 1, max_length: 64}
          items:
            type: list
            min_items: 1
            items: {type: object, fields: {sku: {type: string, required: true}}}
      1:
        fields:
          order_id: {type: string, required: true}
queues:
  billing.payments-v2:
    type: quorum
    consumes:
      - message: OrderPlaced
        versions: [2]
    retry: {delays: [1s, 5s]}
`

func TestParseModel(t *testing.T) {
	f, err := Parse("orders.lily.yaml", []byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	msg := f.Messages[0]
	if got := []int{msg.Versions[0].Number, msg.Versions[1].Number}; !cmp.Equal(got, []int{1, 2}) {
		t.Errorf("versions %v, want ascending [1 2]", got)
	}
	v2 := msg.Versions[1]
	if v2.GoName != "OrderPlacedV2" || !cmp.Equal(v2.ContentTypes, []string{"application/json"}) {
		t.Errorf("version 2: GoName %s, content types %v", v2.GoName, v2.ContentTypes)
	}
	items := v2.Fields[1]
	if items.GoName != "Items" || items.Required || *items.MinItems != 1 || items.Items.StructName != "OrderPlacedV2ItemsItem" || !items.Items.Required {
		t.Errorf("items field: %+v, element %+v", items, items.Items)
	}
	q := f.Queues[0]
	want := &Queue{
		Name: "billing.payments-v2", GoName: "BillingPaymentsV2", Type: Quorum,
		Prefetch: DefaultPrefetch, Concurrency: DefaultConcurrency,
		Consumes:     []Consume{{Message: msg, Versions: []*Version{v2}}},
		Retry:        Retry{Delays: []time.Duration{time.Second, 5 * time.Second}, MaxAttempts: 3},
		DLQ:          "billing.payments-v2.dlq",
		MaxBodyBytes: DefaultMaxBodyBytes, HandlerTimeout: DefaultHandlerTimeout,
	}
	if diff := cmp.Diff(want, q); diff != "" {
		t.Errorf("queue (-want +got):\n%s", diff)
	}
	if f.Output != "." || f.Package != "ordersmsg" {
		t.Errorf("output %q, package %q", f.Output, f.Package)
	}
}

// errorsOf parses src and returns its errors, one "line:column: message" each.
func errorsOf(t *testing.T, src string) []string {
	t.Helper()
	_, err := Parse("s.yaml", []byte(src))
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("want an ErrorList, got %v", err)
	}
	var out []string
	for _, e := range list {
		out = append(out, strings.TrimPrefix(e.Error(), "s.yaml:"))
	}
	return out
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		{
			name: "unknown keys with suggestions, sorted by position",
			src: valid + `    prefech: 3
    concurrenc: 2
` + "    dlx: x\n",
			want: []string{
				`23:5: unknown key "prefech" (did you mean "prefetch"?)`,
				`24:5: unknown key "concurrenc" (did you mean "concurrency"?)`,
				`25:5: unknown key "dlx" (did you mean "dlq"?)`,
			},
		},
		{
			name: "version is read first",
			src:  "package: 7\nversion: 2\n",
			want: []string{`2:10: schema version 2 is unknown: this lilygen reads version 1`},
		},
		{
			name: "missing version",
			src:  "package: x\n",
			want: []string{`1:1: missing version: add version: 1`},
		},
		{
			name: "empty file",
			src:  "",
			want: []string{`1:1: the schema is empty: want a mapping with version, package and messages`},
		},
		{
			name: "syntax error points at the line's text",
			src:  "version: 1\n  package: [x\n",
			want: []string{`2:3: YAML syntax error: mapping values are not allowed in this context`},
		},
		{
			name: "aliases are refused",
			src:  "version: 1\npackage: &p x\noutput: *p\nmessages: {A: {versions: {1: {}}}}\n",
			want: []string{`3:9: output: YAML aliases are not supported`},
		},
		{
			name: "duplicate keys",
			src:  "version: 1\npackage: x\npackage: y\nmessages: {A: {versions: {1: {}}}}\n",
			want: []string{`3:1: duplicate key "package" (first at line 2)`},
		},
		{
			name: "required keys",
			src:  "version: 1\nqueues: {q: {}}\n",
			want: []string{
				`1:1: missing package: the Go package name of the generated code`,
				`1:1: missing messages`,
				`2:10: queue "q" consumes nothing: add consumes`,
			},
		},
		{
			name: "bounds",
			src: `version: 1
package: x
messages:
  A:
    versions:
      1:
        fields:
          a: {type: number, min: .inf}
          b: {type: list, items: {type: string, required: true}}
          c: {type: integer, min: 1.5}
          d: {type: object}
`,
			want: []string{
				`8:34: min: want a finite number, got .inf`,
				`9:49: list elements are always required: remove required`,
				`10:35: min: want an integer, got the number 1.5`,
				`11:11: object "d" has no fields`,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, errorsOf(t, tc.src)); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSuggest(t *testing.T) {
	known := []string{"prefetch", "concurrency", "consumes", "dlq"}
	for got, want := range map[string]string{
		"prefech":     ` (did you mean "prefetch"?)`,
		"Prefetch":    ` (did you mean "prefetch"?)`,
		"consume":     ` (did you mean "consumes"?)`,
		"dl":          ` (did you mean "dlq"?)`,
		"temperature": "",
	} {
		if s := suggest(got, known); s != want {
			t.Errorf("suggest(%q) = %q, want %q", got, s, want)
		}
	}
}

func TestGoName(t *testing.T) {
	for in, want := range map[string]string{
		"order_id":            "OrderID",
		"orderId":             "OrderID",
		"home_url":            "HomeURL",
		"api-key":             "APIKey",
		"sku":                 "SKU",
		"billing.payments-v2": "BillingPaymentsV2",
		"uuid":                "UUID",
		"ratio":               "Ratio",
		"x":                   "X",
		"...":                 "",
	} {
		if got := GoName(in); got != want {
			t.Errorf("GoName(%q) = %q, want %q", in, got, want)
		}
	}
}
