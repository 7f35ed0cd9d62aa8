package schema

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lily-mq/lily/internal/queue"
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
	if items.GoName != "Items" || items.Required || *items.MinItems != 1 || items.Items.GoPath != "OrderPlacedV2ItemsItem" || !items.Items.Required {
		t.Errorf("items field: %+v, element %+v", items, items.Items)
	}
	q := f.Queues[0]
	want := &Queue{
		Name: "billing.payments-v2", GoName: "BillingPaymentsV2", Type: Quorum,
		Pos:      Pos{File: "orders.lily.yaml", Line: 17, Column: 3},
		Inbox:    InboxOptional,
		Prefetch: DefaultPrefetch, Concurrency: DefaultConcurrency,
		Consumes:     []Consume{{Message: msg, Versions: []*Version{v2}, Envelope: lilyEnvelope, Inbox: InboxOptional, Pos: Pos{File: "orders.lily.yaml", Line: 20, Column: 18}}},
		Retry:        Retry{Delays: []time.Duration{time.Second, 5 * time.Second}, MaxAttempts: 3},
		DLQ:          "billing.payments-v2.dlq",
		MaxBodyBytes: DefaultMaxBodyBytes, HandlerTimeout: DefaultHandlerTimeout,
		DeliveryLimit: queue.DefaultDeliveryLimit,
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

// wantErrors checks that src fails with exactly want, in order.
func wantErrors(t *testing.T, src string, want []string) {
	t.Helper()
	if diff := cmp.Diff(want, errorsOf(t, src)); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}
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
				`23:5: unknown key "prefech" (did you mean "prefetch"?) [UNKNOWN-KEY]`,
				`24:5: unknown key "concurrenc" (did you mean "concurrency"?) [UNKNOWN-KEY]`,
				`25:5: unknown key "dlx" (did you mean "dlq"?) [UNKNOWN-KEY]`,
			},
		},
		{
			name: "delivery limits",
			src: valid + "    delivery_limit: 0\n" +
				"  plain:\n    consumes: [{message: OrderPlaced}]\n    delivery_limit: 5\n",
			want: []string{
				`23:21: delivery_limit must be -1 (none) or 1 to 1000000, not 0 (RabbitMQ dead-letters a message returned more times than this; 0 would dead-letter it at its first return) [OUT-OF-RANGE]`,
				`26:5: delivery_limit applies to quorum queues only: RabbitMQ keeps no delivery count for a classic queue (add type: quorum, or remove delivery_limit) [BOUND-TYPE]`,
			},
		},
		{
			name: "versions a consumer's guard refuses",
			src:  "version: 1\npackage: x\nmessages:\n  A: {versions: {1000000: {}, 1000001: {}, 0: {}}}\n",
			want: []string{
				`4:31: version must be at most 1000000, not 1000001 [OUT-OF-RANGE]`,
				`4:44: version must be at least 1, not 0 [OUT-OF-RANGE]`,
			},
		},
		{
			name: "version keys that are not numbers name their message",
			src: "version: 1\npackage: x\nmessages:\n  A:\n    versions:\n      v1: {}\n      \"2\": {}\n      first: {}\n      1.5: {}\n" +
				"      3:\n      fields: {}\n",
			want: []string{
				`6:7: message A: version key: want an integer, got the string "v1" (a version's key is its number: write 1:) [WRONG-KIND]`,
				`7:7: message A: version key: want an integer, got the string "2" (a version's key is its number: write 2:) [WRONG-KIND]`,
				`8:7: message A: version key: want an integer, got the string "first" [WRONG-KIND]`,
				`9:7: message A: version key: want an integer, got the number 1.5 [WRONG-KIND]`,
				`10:9: A version 3: want a mapping, got null [WRONG-KIND]`,
				`11:7: message A: version key: want an integer, got the string "fields" (fields is a key of a version: indent it under the version's number, such as 3:) [WRONG-KIND]`,
			},
		},
		{
			name: "version is read first",
			src:  "package: 7\nversion: 2\n",
			want: []string{`2:10: schema version 2 is unknown: this lilygen reads version 1 [SCHEMA-VERSION]`},
		},
		{
			name: "missing version",
			src:  "package: x\n",
			want: []string{`1:1: missing version: add version: 1 [SCHEMA-VERSION]`},
		},
		{
			name: "empty file",
			src:  "",
			want: []string{`1:1: the schema is empty: want a mapping with version, package and messages [EMPTY]`},
		},
		{
			name: "aliases are refused",
			src:  "version: 1\npackage: &p x\noutput: *p\nmessages: {A: {versions: {1: {}}}}\n",
			want: []string{`3:9: output: YAML aliases are not supported [YAML-ALIAS]`},
		},
		{
			name: "duplicate keys",
			src:  "version: 1\npackage: x\npackage: y\nmessages: {A: {versions: {1: {}}}}\n",
			want: []string{`3:1: duplicate key "package" (first at line 2) [DUPLICATE-KEY]`},
		},
		{
			name: "required keys",
			src:  "version: 1\nqueues: {q: {}}\n",
			want: []string{
				`1:1: missing package: the Go package name of the generated code [MISSING-KEY]`,
				`1:1: missing messages [MISSING-KEY]`,
				`2:10: queue "q" consumes nothing: add consumes [MISSING-KEY]`,
			},
		},
		{
			name: "a queue's keys at the level of the queues name queues",
			src: "version: 1\npackage: x\nmessages: {A: {versions: {1: {}}}}\nqueues:\n  q:\n  consumes:\n    - message: A\n" +
				"  handler_timeout: 10s\n  retry:\n    delays: [1s]\n",
			want: []string{
				`5:5: queue "q": want a mapping (a queue's keys), got null [WRONG-KIND]`,
				`7:5: queue "consumes": want a mapping (a queue's keys), got a list (consumes is a key of a queue: indent it under the queue's name) [WRONG-KIND]`,
				`8:20: queue "handler_timeout": want a mapping (a queue's keys), got the string "10s" (handler_timeout is a key of a queue: indent it under the queue's name) [WRONG-KIND]`,
				`9:3: queue "retry" consumes nothing: add consumes (retry is a key of a queue: indent it under the queue's name) [MISSING-KEY]`,
				`10:5: unknown key "delays" (known keys: arguments, bindings, concurrency, consumes, delivery_limit, dlq, envelope, handler_timeout, inbox, lily_arguments, max_body_bytes, ordering, ownership, prefetch, retry, settlement_budget, type) [UNKNOWN-KEY]`,
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
				`8:34: min: want a finite number, got .inf [OUT-OF-RANGE]`,
				`9:49: an element is always required: remove required [ITEM-REQUIRED]`,
				`10:35: min: want an integer, got the number 1.5 [WRONG-KIND]`,
				`11:11: object "d" has no fields [MISSING-KEY]`,
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
		"prefech":     `did you mean "prefetch"?`,
		"Prefetch":    `did you mean "prefetch"?`,
		"consume":     `did you mean "consumes"?`,
		"dl":          `did you mean "dlq"?`,
		"temperature": "",
	} {
		if s := new(hinter).suggest(got, known); s != want {
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
		"ids":                 "IDs",
		"urls":                "URLs",
		"sku_ids":             "SKUIDs",
		"skuIds":              "SKUIDs",
		"order_ids":           "OrderIDs",
		"id2":                 "ID2",
		"ids2":                "IDs2",
		"http2_url":           "HTTP2URL",
		"utf8":                "UTF8",
		"utf8s":               "UTF8s",
		"v2":                  "V2",
		"status":              "Status",
		"ipv4":                "Ipv4",
	} {
		if got := GoName(in); got != want {
			t.Errorf("GoName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLocalName(t *testing.T) {
	for in, want := range map[string]string{
		"order_id": "orderID", "orderId": "orderID", "id": "id", "url_path": "urlPath", "sku": "sku",
		"placed_at": "placedAt", "x": "x", "ids": "ids", "urls": "urls", "id2": "id2", "ids_by_key": "idsByKey",
		"url_size": "urlSize", "sku_ids": "skuIDs", "skuIds": "skuIDs", "HTTPServer": "httpServer", "ipv4": "ipv4",
	} {
		if got := LocalName(in); got != want {
			t.Errorf("LocalName(%q) = %q, want %q", in, got, want)
		}
	}
}

const features = `version: 1
package: x
messages:
  A:
    versions:
      1:
        deprecated_since: 2026-01-01
        remove_after: "2026-06-30"
        fields:
          status: {type: enum, values: [new, done], default: new}
          code: {type: string, pattern: '^[A-Z]+$'}
          note: {type: string, required: true, nullable: true}
          tags: {type: map, items: {type: integer, min: 0}}
          blob: {type: bytes, max_length: 4}
        headers:
          x-tenant: {type: string, required: true}
        examples:
          - body: {note: null, tags: {a: 1}, blob: AAEC}
            headers: {x-tenant: acme}
          - body: '{"note": "as JSON text"}'
            headers: {x-tenant: acme}
queues:
  q:
    inbox: required
    consumes: [{message: A}]
`

func TestParseFeatures(t *testing.T) {
	f, err := Parse("s.yaml", []byte(features))
	if err != nil {
		t.Fatal(err)
	}
	v := f.Messages[0].Versions[0]
	if v.DeprecatedSince != "2026-01-01" || v.RemoveAfter != "2026-06-30" {
		t.Errorf("dates %q %q", v.DeprecatedSince, v.RemoveAfter)
	}
	status, code, note, tags := v.Fields[0], v.Fields[1], v.Fields[2], v.Fields[3]
	if status.Default != "new" || status.Pointer() || !cmp.Equal(status.Values, []string{"new", "done"}) || status.GoPath != "AV1Status" {
		t.Errorf("enum %+v", status)
	}
	if code.Pattern != "^[A-Z]+$" || !code.Pointer() {
		t.Errorf("pattern %+v", code)
	}
	if !note.Nullable || !note.Required || !note.Pointer() {
		t.Errorf("nullable %+v", note)
	}
	if tags.Type != Map || tags.Items.Type != Integer || tags.Pointer() {
		t.Errorf("map %+v", tags)
	}
	if v.HeadersName != "AV1Headers" || v.Headers[0].Name != "x-tenant" || v.Headers[0].GoName != "XTenant" {
		t.Errorf("headers %q %+v", v.HeadersName, v.Headers[0])
	}
	want := Example{Pos: Pos{"s.yaml", 18, 13}, Body: []byte(`{"note":null,"tags":{"a":1},"blob":"AAEC"}`), Headers: map[string]any{"x-tenant": "acme"}}
	text := Example{Pos: Pos{"s.yaml", 20, 13}, Body: []byte(`{"note":"as JSON text"}`), Headers: map[string]any{"x-tenant": "acme"}}
	if diff := cmp.Diff([]Example{want, text}, v.Examples); diff != "" {
		t.Errorf("examples (-want +got):\n%s", diff)
	}
	if f.Queues[0].Inbox != InboxRequired {
		t.Errorf("inbox %q", f.Queues[0].Inbox)
	}
}

// An example's number of the wrong kind says which rule it fails, in the
// extractor's words.
func TestCheckNumbersOfTheWrongKind(t *testing.T) {
	f, err := Parse("s.yaml", []byte(`version: 1
package: x
messages:
  A:
    versions:
      1:
        fields:
          n: {type: integer}
          x: {type: number}
`))
	if err != nil {
		t.Fatal(err)
	}
	for body, want := range map[string]string{
		`{"n": 1.0}`:                   "field n: not an integer (a fraction or exponent)",
		`{"n": 1e0}`:                   "field n: not an integer (a fraction or exponent)",
		`{"n": 9223372036854775808}`:   "field n: beyond int64",
		`{"n": -9223372036854775809}`:  "field n: beyond int64",
		`{"n": -9223372036854775808}`:  "",
		`{"x": 1e400}`:                 "field x: beyond float64's range",
		`{"x": -1e400}`:                "field x: beyond float64's range",
		`{"x": 1e-400}`:                "",
		`{"x": 9223372036854775808.5}`: "",
	} {
		got := ""
		if err := f.Messages[0].Versions[0].Check([]byte(body), nil); err != nil {
			got = err.Error()
		}
		if got != want {
			t.Errorf("%s: %q, want %q", body, got, want)
		}
	}
}

func TestCheck(t *testing.T) {
	f, err := Parse("s.yaml", []byte(features))
	if err != nil {
		t.Fatal(err)
	}
	v := f.Messages[0].Versions[0]
	tenant := map[string]any{"x-tenant": "acme"}
	for body, want := range map[string]string{
		`{"note": "x"}`:                       "",
		`null`:                                "field note: required",
		`{"note": null, "status": "gone"}`:    "field status: not one of new, done",
		`{"note": null, "code": "abc"}`:       "field code: does not match ^[A-Z]+$",
		`{"note": null, "tags": {"b": -1}}`:   `field tags["b"]: less than 0`,
		`{"note": null, "tags": {"b": null}}`: `field tags["b"]: required`,
		`{"note": null, "tags": {"b": 1.5}}`:  `field tags["b"]: not an integer (a fraction or exponent)`,
		`{"note": null, "blob": "AAECAwQ="}`:  "field blob: longer than 4 bytes",
		`{"note": null, "blob": "!"}`:         "field blob: not base64",
		`{"note": 1}`:                         "field note: unexpected JSON number",
		`{"NOTE": 1}`:                         "field note: required",
		`{"note": null, "note": null}`:        "field note: repeated",
		`{"note": "\udc00"}`:                  "payload: invalid JSON at byte 10: a lone surrogate escape is not UTF-16",
		`{"note": null} x`:                    "payload: invalid JSON at byte 15: data after the top-level value",
	} {
		got := ""
		if err := v.Check([]byte(body), tenant); err != nil {
			got = err.Error()
		}
		if got != want {
			t.Errorf("Check(%s) = %q, want %q", body, got, want)
		}
	}
	if err := v.Check([]byte(`{"note": null}`), map[string]any{"x-tenant": int64(3)}); err == nil || err.Error() != "field headers.x-tenant: not a string" {
		t.Errorf("header of the wrong type: %v", err)
	}
	if err := v.Check([]byte(`{"note": null}`), nil); err == nil || err.Error() != "field headers.x-tenant: required" {
		t.Errorf("missing header: %v", err)
	}
	// As the generated extractor: a string header is UTF-8, and a consumer's
	// guard takes 4096 bytes of it at most.
	if err := v.Check([]byte(`{"note": null}`), map[string]any{"x-tenant": "\xff\x1b[2J"}); err == nil || err.Error() != "field headers.x-tenant: not UTF-8" {
		t.Errorf("header not UTF-8: %v", err)
	}
	if err := v.Check([]byte(`{"note": null}`), map[string]any{"x-tenant": strings.Repeat("t", 4097)}); err == nil || err.Error() != "field headers.x-tenant: longer than 4096 bytes" {
		t.Errorf("header of 4097 bytes: %v", err)
	}
	if err := v.Check([]byte(`{"note": null}`), map[string]any{"x-tenant": strings.Repeat("\xff", 4097)}); err == nil || err.Error() != "field headers.x-tenant: longer than 4096 bytes" {
		t.Errorf("header of 4097 bytes not UTF-8: %v", err)
	}
}

// A name repeated in one object is "repeated" at the path of the field or
// map key, as the generated extractor reports it, also in a list's item, a
// map's value and a shared type; a member the schema does not know, or one
// inside its value, is a syntax error with its byte offset. Any other syntax
// error still comes first.
func TestCheckRepeatedNames(t *testing.T) {
	f, err := Parse("s.yaml", []byte(`version: 1
package: x
types:
  Box: {type: object, fields: {n: {type: integer}, m: {type: map, items: {type: string}}}}
messages:
  A:
    versions:
      1:
        fields:
          order_id: {type: string, required: true}
          customer: {type: object, fields: {email: {type: string}}}
          items: {type: list, items: {type: object, fields: {sku: {type: string}}}}
          attrs: {type: map, items: {type: string}}
          boxes: {type: map, items: {type: Box}}
          box: {type: Box}
`))
	if err != nil {
		t.Fatal(err)
	}
	v := f.Messages[0].Versions[0]
	for body, want := range map[string]string{
		`{"order_id":"o-1","x":1,"order_id":"o-2"}`:                          "field order_id: repeated",
		`{"order_id":"o-1","order_id":null}`:                                 "field order_id: repeated",
		`{"order_id":"o","customer":{"email":"a","email":"b"}}`:              "field customer.email: repeated",
		`{"order_id":"o","items":[{"sku":"a"},{"sku":"a","sku":"b"}]}`:       "field items[1].sku: repeated",
		`{"order_id":"o","attrs":{"a":"1","b":"2","a":"3"}}`:                 `field attrs["a"]: repeated`,
		`{"order_id":"o","boxes":{"k":{"n":1,"n":2}}}`:                       `field boxes["k"].n: repeated`,
		`{"order_id":"o","box":{"m":{"a":"1","a":"1"}}}`:                     `field box.m["a"]: repeated`,
		`{"order_id":"o","x":1,"x":2}`:                                       `payload: invalid JSON at byte 22: repeated member name "x"`,
		`{"order_id":"o","customer":{"x":{"y":1,"y":2}}}`:                    `payload: invalid JSON at byte 39: repeated member name "y"`,
		`{"order_id":"o","order_id":"p","x":"\ud800"}`:                       "payload: invalid JSON at byte 36: a lone surrogate escape is not UTF-16",
		`{"order_id":"o","order_id":"p"} x`:                                  "payload: invalid JSON at byte 32: data after the top-level value",
		`{"order_id":"o","customer":{"email":"a"},"customer":{"email":"a"}}`: "field customer: repeated",
		// What the extractor meets before a repeat, it reports first.
		`{"order_id":"o","items":[null],"x":1,"x":2}`: "field items[0]: required",
		`[{"a":1,"a":2}]`: "payload: unexpected JSON array",
	} {
		got := ""
		if err := v.Check([]byte(body), nil); err != nil {
			got = err.Error()
		}
		if got != want {
			t.Errorf("Check(%s) = %q, want %q", body, got, want)
		}
	}
}

func TestParseFeatureErrors(t *testing.T) {
	src := `version: 1
package: x
messages:
  A:
    versions:
      1:
        remove_after: 2026-01-01
        fields:
          a: {type: string, pattern: '[a-'}
          b: {type: integer, min: 1, default: 0}
          c: {type: string, required: true, default: x}
          d: {type: enum, values: [x, x, "X"]}
          e: {type: list, items: {type: string, nullable: true}}
          f: {type: time, default: "2026-01-01T00:00:00Z"}
        headers:
          x-lily-attempt: {type: integer}
          x-obj: {type: object, fields: {}}
      2:
        deprecated_since: 2026-02-01
        remove_after: 2026-01-01
        fields:
          n: {type: integer, max: 3}
        examples:
          - body: {n: 4}
          - body: {n: x}
          - {}
      2:
        fields: {}
queues:
  amq.orders:
    consumes: [{message: A}]
    retry: {delays: [5s, 1s, 1s]}
`
	want := []string{
		`7:9: remove_after needs deprecated_since: a version is deprecated before it is removed [BAD-DATE]`,
		"9:38: pattern \"[a-\" is not an RE2 regular expression: missing closing ]: `[a-` [BAD-PATTERN]",
		`10:47: default 0 breaks the field's own bounds: less than 1 [BAD-DEFAULT]`,
		`11:45: a default applies to an optional field that is not nullable (a required field is always present, and a nullable one keeps its null) [BAD-DEFAULT]`,
		`12:39: duplicate enum value "x" (first at line 12) [DUPLICATE]`,
		`12:42: enum values "X" and "x" (line 12) both give the Go name AV1DX [NAME-CLASH]`,
		`13:49: nullable does not apply to an element of a list or map [BOUND-TYPE]`,
		`14:27: default does not apply to a field of type time [BAD-DEFAULT]`,
		`16:11: header "x-lily-attempt": names starting x-lily- are Lily's own [RESERVED-HEADER]`,
		`17:25: unknown header type "object" (one of string, integer, int8, int16, int32, int64, uint8, uint16, uint32, number, bool, time, enum) [UNKNOWN-TYPE]`,
		`20:23: remove_after 2026-01-01 is before deprecated_since 2026-02-01 [BAD-DATE]`,
		`24:23: example 1 of AV2 breaks the schema: field n: more than 3 [BAD-EXAMPLE]`,
		`25:23: example 2 of AV2 breaks the schema: field n: unexpected JSON string [BAD-EXAMPLE]`,
		`26:13: example 3 has no body (body: {field: value, ...}) [MISSING-KEY]`,
		`27:7: duplicate version 2 of A (first at line 18) (a changed payload needs a new version number, such as 3) [DUPLICATE-VERSION]`,
		`30:3: queue name "amq.orders" starts with amq., which RabbitMQ reserves for itself (403 ACCESS_REFUSED) [QUEUE-NAME]`,
		`32:26: retry delay 1s does not increase on the one before it (5s) (list each delay once, shortest first: the last one repeats until max_attempts) [RETRY-ORDER]`,
		`32:30: retry delay 1s does not increase on the one before it (1s) (list each delay once, shortest first: the last one repeats until max_attempts) [RETRY-ORDER]`,
	}
	wantErrors(t, src, want)
}

func TestQueueNamesRabbitMQRefuses(t *testing.T) {
	long := strings.Repeat("q", 201)
	src := "version: 1\npackage: x\nmessages: {A: {versions: {1: {}}}}\nqueues:\n  " + long + ":\n    consumes: [{message: A}]\n    retry: {delays: [1h2m3.5s]}\n    dlq: " + strings.Repeat("d", 256) + "\n"
	want := []string{
		`5:3: queue name "qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq..." is 201 bytes: longer than 200, which leaves room for retry bucket names within RabbitMQ's 255 (use 1 to 200 bytes) [QUEUE-NAME]`,
		`8:10: dlq "ddddddddddddddddddddddddddddddddddddd..." is 256 bytes: RabbitMQ would refuse it (use 1 to 255 bytes) [QUEUE-NAME]`,
	}
	wantErrors(t, src, want)
}

// A binding's routing key is refused with control characters, as an
// exchange's name is: the runtime refuses a spec that holds one.
func TestRoutingKeyWithControlCharacters(t *testing.T) {
	src := "version: 1\npackage: x\nmessages: {A: {versions: {1: {}}}}\nexchanges: {d: {type: direct}}\nqueues:\n  q:\n    consumes: [{message: A}]\n    bindings: [{exchange: d, routing_key: \"a\\tb\"}]\n"
	wantErrors(t, src, []string{`8:43: routing key "a\tb" holds control characters [BAD-EXCHANGE]`})
}

// A headers binding's header names are AMQP short strings: one over 255
// bytes would close the runtime's connection, and is refused.
func TestBindingHeaderNameTooLong(t *testing.T) {
	src := "version: 1\npackage: x\nmessages: {A: {versions: {1: {}}}}\nexchanges: {h: {type: headers}}\nqueues:\n  q:\n    consumes: [{message: A}]\n    bindings: [{exchange: h, headers: {" + strings.Repeat("h", 256) + ": eu}}]\n"
	wantErrors(t, src, []string{`8:39: header "hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh..." is 256 bytes: RabbitMQ allows 255 [BAD-EXCHANGE]`})
}

// Generated names beyond types and functions clash too: a pattern's
// variable, the payload's Headers field.
func TestParseGeneratedNameClashes(t *testing.T) {
	src := `version: 1
package: x
messages:
  A:
    versions:
      1:
        fields:
          customer_email: {type: string, pattern: a}
          customer: {type: object, fields: {email: {type: string, pattern: b}}}
          headers: {type: string}
        headers:
          x-tenant: {type: string}
`
	want := []string{
		`9:67: the pattern of "email" gives the Go name patternAV1CustomerEmail, already taken by the pattern of "customer_email" (line 8) [NAME-CLASH]`,
		`11:9: typed headers go in the Go field Headers of AV1, already taken by field "headers" (line 10) (rename the field) [NAME-CLASH]`,
	}
	wantErrors(t, src, want)
}

func TestExampleAsJSONText(t *testing.T) {
	src := "version: 1\npackage: x\nmessages:\n  A:\n    versions:\n      1:\n        examples:\n          - body: '{\"n\": 1'\n"
	want := []string{`8:19: example 1: the body is not JSON: unexpected end of JSON input [BAD-EXAMPLE]`}
	wantErrors(t, src, want)
}

// Included files are read once each, relative to the file that names them,
// and errors name the file that has them.
func TestIncludes(t *testing.T) {
	files := map[string]string{
		"dir/root.yaml":  "version: 1\npackage: x\ninclude: [a.yaml, sub/b.yaml]\nqueues:\n  q: {consumes: [{message: B}]}\n",
		"dir/a.yaml":     "version: 1\ninclude: [sub/b.yaml, a.yaml]\nmessages:\n  A: {versions: {1: {}}}\n",
		"dir/sub/b.yaml": "version: 1\ninclude: [../a.yaml]\nmessages:\n  B: {versions: {1: {fields: {x: {type: strin}}}}}\n",
	}
	read := func(name string, _ int) ([]byte, error) {
		if data, ok := files[filepath.ToSlash(name)]; ok {
			return []byte(data), nil
		}
		return nil, os.ErrNotExist
	}
	_, err := parse("dir/root.yaml", []byte(files["dir/root.yaml"]), read)
	want := `dir/sub/b.yaml:4:41: unknown type "strin" (did you mean "string"?) [UNKNOWN-TYPE]`
	if err == nil || filepath.ToSlash(err.Error()) != want {
		t.Errorf("got %v, want %s", err, want)
	}
	files["dir/sub/b.yaml"] = strings.Replace(files["dir/sub/b.yaml"], "strin", "string", 1)
	f, err := parse("dir/root.yaml", []byte(files["dir/root.yaml"]), read)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, inc := range f.Includes {
		names = append(names, filepath.ToSlash(inc))
	}
	if !cmp.Equal(names, []string{"dir/a.yaml", "dir/sub/b.yaml"}) || len(f.Messages) != 2 || f.Queues[0].Consumes[0].Message != f.Messages[1] {
		t.Errorf("includes %v, messages %d", names, len(f.Messages))
	}
	if pos := f.Messages[1].Pos; filepath.ToSlash(pos.File) != "dir/sub/b.yaml" || pos.Line != 4 {
		t.Errorf("B declared at %+v", pos)
	}
}

// A file is known by what it is, not by how it is named: a root named
// ./root.yaml that an include names root.yaml is read once, so the cycle
// is harmless.
func TestIncludeCycleBackToARootNamedUnclean(t *testing.T) {
	dir := t.TempDir()
	for name, src := range map[string]string{
		"root.yaml": "version: 1\npackage: x\ninclude: [a.yaml]\nmessages: {A: {versions: {1: {}}}}\n",
		"a.yaml":    "version: 1\ninclude: [root.yaml]\nmessages: {B: {versions: {1: {}}}}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	f, err := Load("./root.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(f.Includes, []string{"a.yaml"}) || len(f.Messages) != 2 {
		t.Errorf("includes %v, messages %d", f.Includes, len(f.Messages))
	}
}

// The files a schema includes are bounded: a bind mount of a directory in
// itself names new files without end.
func TestIncludesAreBounded(t *testing.T) {
	read := func(name string, _ int) ([]byte, error) {
		return []byte("version: 1\ninclude: [" + filepath.Base(name) + "x]\n"), nil
	}
	src := "version: 1\npackage: x\ninclude: [x]\nmessages: {A: {versions: {1: {}}}}\n"
	_, err := parse("root.yaml", []byte(src), read)
	var list ErrorList
	if !errors.As(err, &list) || len(list) != 1 {
		t.Fatalf("got %v, want one error", err)
	}
	want := fmt.Sprintf(`2:11: include %q would be file %d of this schema: at most %d are read [BAD-INCLUDE]`, shorten(strings.Repeat("x", maxFiles)), maxFiles+1, maxFiles)
	if got := strings.TrimPrefix(list[0].Error(), list[0].File+":"); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestIntegerSizes(t *testing.T) {
	const src = `version: 1
package: x
messages:
  A:
    versions:
      1:
        fields:
          a: {type: integer}
          b: {type: int64, min: -1}
          c: {type: int8}
          d: {type: uint16, min: 1, default: 5}
          e: {type: list, items: {type: uint32, max: 9}}
        headers:
          x-n: {type: int16, required: true}
`
	f, err := Parse("s.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	v := f.Messages[0].Versions[0]
	type sized struct {
		Int      IntType
		Name     string
		Min, Max *int64
	}
	n := func(v int64) *int64 { return &v }
	var got []sized
	for _, fd := range append([]*Field{v.Fields[0], v.Fields[1], v.Fields[2], v.Fields[3], v.Fields[4].Items}, v.Headers...) {
		got = append(got, sized{fd.Int, fd.TypeName(), fd.MinInt, fd.MaxInt})
	}
	want := []sized{
		{Int64, "integer", nil, nil},
		{Int64, "integer", n(-1), nil},
		{Int8, "int8", n(-128), n(127)},
		{Uint16, "uint16", n(1), n(65535)},
		{Uint32, "uint32", n(0), n(9)},
		{Int16, "int16", n(-32768), n(32767)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("integer fields (-want +got):\n%s", diff)
	}
	for body, want := range map[string]string{
		`{"c": 127, "d": 65535, "e": [0, 9]}`: "",
		`{"c": 128}`:                          "field c: more than 127",
		`{"c": -129}`:                         "field c: less than -128",
		`{"d": 0}`:                            "field d: less than 1",
		`{"e": [-1]}`:                         "field e[0]: less than 0",
	} {
		got := ""
		if err := v.Check([]byte(body), map[string]any{"x-n": int32(-32768)}); err != nil {
			got = err.Error()
		}
		if got != want {
			t.Errorf("Check(%s) = %q, want %q", body, got, want)
		}
	}
	if err := v.Check([]byte(`{}`), map[string]any{"x-n": int64(40000)}); err == nil || err.Error() != "field headers.x-n: more than 32767" {
		t.Errorf("header beyond int16: %v", err)
	}
}

// A bound at int64's own end checks nothing, and is left out of the limits
// the generator writes checks from, as a minimum length of 0 is; a narrower
// type's range is not, since its values are read as int64s.
// Another language's name of a type suggests Lily's, not the type nearest
// by spelling (int8 for int), where that type fits.
func TestTypeAliasesSuggestTheirType(t *testing.T) {
	src := `version: 1
package: x
messages:
  A:
    versions:
      1:
        fields:
          a: {type: int}
          b: {type: str}
          c: {type: boolean}
          d: {type: double}
          e: {type: array}
        headers:
          x-a: {type: array}
          x-b: {type: float}
`
	wantErrors(t, src, []string{
		`8:21: unknown type "int" (did you mean "integer"?) [UNKNOWN-TYPE]`,
		`9:21: unknown type "str" (did you mean "string"?) [UNKNOWN-TYPE]`,
		`10:21: unknown type "boolean" (did you mean "bool"?) [UNKNOWN-TYPE]`,
		`11:21: unknown type "double" (did you mean "number"?) [UNKNOWN-TYPE]`,
		`12:21: unknown type "array" (did you mean "list"?) [UNKNOWN-TYPE]`,
		`14:23: unknown type "array" (one of string, integer, int8, int16, int32, int64, uint8, uint16, uint32, number, bool, time, enum) [UNKNOWN-TYPE]`,
		`15:23: unknown type "float" (did you mean "number"?) [UNKNOWN-TYPE]`,
	})
}

func TestInt64EndsAreNoLimits(t *testing.T) {
	const src = `version: 1
package: x
messages:
  A:
    versions:
      1:
        fields:
          a: {type: int64, min: -9223372036854775808, max: 9223372036854775807}
          b: {type: integer, min: -9223372036854775808, max: 0}
          c: {type: int32, min: -2147483648, max: 2147483647}
`
	f, err := Parse("s.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	fields := f.Messages[0].Versions[0].Fields
	for i, want := range [][2]string{{"", ""}, {"", "0"}, {"-2147483648", "2147483647"}} {
		if l := fields[i].Limits(); l.Lo != want[0] || l.Hi != want[1] {
			t.Errorf("%s: limits %q to %q, want %q to %q", fields[i].Name, l.Lo, l.Hi, want[0], want[1])
		}
	}
}

func TestIntegerSizeErrors(t *testing.T) {
	src := `version: 1
package: x
messages:
  A:
    versions:
      1:
        fields:
          a: {type: int8, min: -200, max: 300}
          b: {type: uint8, min: -1}
          c: {type: uint16, max: 70000}
          d: {type: uint64}
          e: {type: int8, default: 200}
          f: {type: int8, min_length: 3}
          g: {type: in16}
        headers:
          x-a: {type: uint32, max: 5000000000}
        examples:
          - body: {b: 256}
`
	want := []string{
		`8:32: min -200 is outside the range of int8, -128 to 127 (use a type that holds it, such as int16) [OUT-OF-RANGE]`,
		`8:43: max 300 is outside the range of int8, -128 to 127 (use a type that holds it, such as int16) [OUT-OF-RANGE]`,
		`9:33: min -1 is outside the range of uint8, 0 to 255 (use a type that holds it, such as int8) [OUT-OF-RANGE]`,
		`10:34: max 70000 is outside the range of uint16, 0 to 65535 (use a type that holds it, such as uint32) [OUT-OF-RANGE]`,
		`11:21: unknown type "uint64" (Lily carries integers as int64, and AMQP headers have no uint64: use int64 with min: 0, or uint32) [UNKNOWN-TYPE]`,
		`12:36: default 200 breaks the field's own bounds: more than 127 [BAD-DEFAULT]`,
		`13:27: min_length does not apply to a field of type int8 [BOUND-TYPE]`,
		`14:21: unknown type "in16" (did you mean "int16"?) [UNKNOWN-TYPE]`,
		`16:36: max 5000000000 is outside the range of uint32, 0 to 4294967295 (use a type that holds it, such as int64) [OUT-OF-RANGE]`,
	}
	wantErrors(t, src, want)
	// The example is judged once the fields read without error.
	valid := strings.Join(strings.Split(src, "\n")[:7], "\n") + "\n          b: {type: uint8}\n        examples:\n          - body: {b: 256}\n"
	if diff := cmp.Diff([]string{`10:23: example 1 of AV1 breaks the schema: field b: more than 255 [BAD-EXAMPLE]`}, errorsOf(t, valid)); diff != "" {
		t.Errorf("example beyond the type's range (-want +got):\n%s", diff)
	}
}

// A DLQ is a queue no consumer reads but lilydlq: it may be shared by
// several queues, but it may not be another queue of the schema, nor a
// retry bucket; and no queue may be another's retry bucket. Each would hand
// one queue's messages to another's consumer.
func TestQueuesDoNotShareRoles(t *testing.T) {
	src := `version: 1
package: x
messages: {A: {versions: {1: {}}}}
queues:
  orders: {consumes: [{message: A}], retry: {delays: [5s]}}
  billing: {consumes: [{message: A}], dlq: orders}
  audit: {consumes: [{message: A}], dlq: orders.retry.5s}
  orders.retry.5s: {consumes: [{message: A}], dlq: shared.dlq}
  shipping: {consumes: [{message: A}], dlq: shared.dlq}
`
	want := []string{
		`6:3: queue "billing" has dlq "orders", which is queue orders (line 5): its dead letters would reach that queue's consumer (name a DLQ of its own) [QUEUE-NAME]`,
		`7:3: queue "audit" has dlq "orders.retry.5s", which is queue orders.retry.5s (line 8): its dead letters would reach that queue's consumer (name a DLQ of its own) [QUEUE-NAME]`,
		`7:3: queue "audit" has dlq "orders.retry.5s", which is a retry bucket of queue orders (line 5): its dead letters would come back into that queue (name a DLQ of its own) [QUEUE-NAME]`,
		`8:3: queue "orders.retry.5s" is a retry bucket of queue orders (line 5): that queue's retries would reach this queue's consumer (rename one of them) [QUEUE-NAME]`,
	}
	wantErrors(t, src, want)
}

// Errors that share a position come in one order, run after run: a
// binding's headers are reported by name.
func TestHeaderBindingErrorsInOneOrder(t *testing.T) {
	src := `version: 1
package: x
messages: {A: {versions: {1: {}}}}
exchanges:
  h: {type: headers}
queues:
  q:
    consumes: [{message: A}]
    bindings: [{exchange: h, headers: {x-d: 1, x-b: 1, x-a: 1, x-c: 1}}]
`
	first := errorsOf(t, src)
	if len(first) != 4 || !strings.Contains(first[0], `"x-a"`) || !strings.Contains(first[3], `"x-d"`) {
		t.Fatalf("errors %q, want the four headers by name", first)
	}
	for range 20 {
		if got := errorsOf(t, src); !slices.Equal(got, first) {
			t.Fatalf("errors %q, then %q", first, got)
		}
	}
}

// A value whose explicit tag its text does not fit is the wrong kind, said
// so at its position: dropped, it would leave a field optional, a bound
// unchecked, an example unread or a binding matching every message.
func TestMistaggedValuesAreReported(t *testing.T) {
	src := `version: 1
package: x
messages:
  A:
    versions:
      1:
        fields:
          a: {type: string, required: !!bool foo}
          b: {type: number, min: !!float abc}
          c: {type: string, max_length: !!int abc}
          d: {type: integer, max: !!int 99999999999999999999}
          e: {type: bool, default: !!bool nope}
        headers:
          x-a: {type: bool}
          x-b: {type: time}
        examples:
          - {body: {}, headers: {x-a: !!bool nope}}
          - {body: {}, headers: {x-b: !!timestamp bad}}
          - {body: {e: !!bool nope}}
          - {body: {a: !!null x}}
          - {body: {a: !!timestamp bad}}
exchanges:
  h: {type: headers}
queues:
  q:
    consumes: [{message: A}]
    bindings: [{exchange: h, headers: {region: !!float eu}}]
`
	want := []string{
		`8:39: required: YAML cannot read "foo" as !!bool, its tag [WRONG-KIND]`,
		`9:34: min: YAML cannot read "abc" as !!float, its tag [WRONG-KIND]`,
		`10:41: max_length: YAML cannot read "abc" as !!int, its tag [WRONG-KIND]`,
		`11:35: max: 99999999999999999999 does not fit in 64 bits [OUT-OF-RANGE]`,
		`12:36: default: YAML cannot read "nope" as !!bool, its tag [WRONG-KIND]`,
		`17:39: a header: YAML cannot read "nope" as !!bool, its tag [WRONG-KIND]`,
		`18:39: a header: YAML cannot read "bad" as !!timestamp, its tag [WRONG-KIND]`,
		`19:24: a value: YAML cannot read "nope" as !!bool, its tag [WRONG-KIND]`,
		`20:24: a value: YAML cannot read "x" as !!null, its tag [WRONG-KIND]`,
		`21:24: a value: YAML cannot read "bad" as !!timestamp, its tag [WRONG-KIND]`,
		`27:48: a header: YAML cannot read "eu" as !!float, its tag [WRONG-KIND]`,
	}
	wantErrors(t, src, want)
}

// A value YAML tags as other than a string is named by its tag: "want a
// string, got "2024-01-01"" read as if it contradicted itself. A date
// wanted as a string is to be quoted.
func TestValuesTaggedOtherwiseAreNamedSo(t *testing.T) {
	src := `version: 1
package: x
messages:
  A:
    versions:
      1:
        fields:
          e: {type: enum, values: [2024-01-01]}
          s: {type: string, default: 2024-01-01}
          u: {type: !custom a.b}
          w: {type: !!binary aGk=}
`
	want := []string{
		`8:36: an enum value: want a string, got the date 2024-01-01, which YAML reads unquoted as a timestamp (quote it: "2024-01-01") [WRONG-KIND]`,
		`9:38: default: want a string, got the date 2024-01-01, which YAML reads unquoted as a timestamp (quote it: "2024-01-01") [WRONG-KIND]`,
		`10:21: type: want a string, got "a.b" tagged !custom [WRONG-KIND]`,
		`11:21: type: want a string, got "aGk=" tagged !!binary [WRONG-KIND]`,
	}
	wantErrors(t, src, want)
}

// A schema file is one YAML document: a second, after ---, is refused
// rather than left unread.
// A version whose key is no version number is checked all the same, as a
// duplicate one is: fixing its key reveals no errors that were hidden. A
// version's own keys indented as versions are checked as one body.
func TestVersionBodiesBehindBadKeysAreChecked(t *testing.T) {
	src := `version: 1
package: x
messages:
  A:
    versions:
      v1:
        fields:
          a: {type: string, required: yes, maxLength: 3}
      0:
        fields:
          b: {type: strng}
      1:
        fields:
          a: {type: string}
      2:
      fields:
        c: {type: integer, max: 4}
      examples:
        - body: {c: 5}
`
	wantErrors(t, src, []string{
		`6:7: message A: version key: want an integer, got the string "v1" (a version's key is its number: write 1:) [WRONG-KIND]`,
		`8:39: required: want true or false, got the string "yes" [WRONG-KIND]`,
		`8:44: unknown key "maxLength" (did you mean "max_length"?) [UNKNOWN-KEY]`,
		`9:7: version must be at least 1, not 0 [OUT-OF-RANGE]`,
		`11:21: unknown type "strng" (did you mean "string"?) [UNKNOWN-TYPE]`,
		`15:9: A version 2: want a mapping, got null [WRONG-KIND]`,
		`16:7: message A: version key: want an integer, got the string "fields" (fields is a key of a version: indent it under the version's number, such as 2:) [WRONG-KIND]`,
		`18:7: message A: version key: want an integer, got the string "examples" (examples is a key of a version: indent it under the version's number, such as 2:) [WRONG-KIND]`,
		`19:21: example 1 of AV2 breaks the schema: field c: more than 4 [BAD-EXAMPLE]`,
	})
}

func TestSecondYAMLDocumentIsRefused(t *testing.T) {
	src := "version: 1\npackage: x\nmessages: {A: {versions: {1: {}}}}\n---\nqueues:\n  q: {consumes: [{message: A}]}\n"
	want := []string{`4:1: a second YAML document: a schema file is one document (remove the --- and join the two) [YAML-SYNTAX]`}
	wantErrors(t, src, want)
	// A file that ends with ---, or with an empty document, holds no second.
	for _, end := range []string{"---\n", "---\n# nothing more\n", "---\n...\n"} {
		if _, err := Parse("s.yaml", []byte("version: 1\npackage: x\nmessages: {A: {versions: {1: {}}}}\n"+end)); err != nil {
			t.Errorf("a schema ending %q: %v", end, err)
		}
	}
}

// Header values are plain YAML values: an alias is refused, as everywhere,
// not read as its anchor's name.
func TestHeaderValueAliasIsRefused(t *testing.T) {
	src := `version: 1
package: x
messages: {A: {versions: {1: {}}}}
exchanges:
  h: {type: headers}
queues:
  q:
    consumes: [{message: A}]
    bindings: [{exchange: h, headers: {a: &v one, b: *v}}]
`
	want := []string{`9:54: a header: YAML aliases are not supported [YAML-ALIAS]`}
	wantErrors(t, src, want)
}

// No duration is longer than RabbitMQ's longest message TTL: the broker
// refuses a retry bucket or a message_ttl past it when the queue is
// declared, and an ordered queue's budget for its in-line retries past it
// would hold a delivery longer than any broker timer.
func TestDurationsWithinRabbitMQsLongestTTL(t *testing.T) {
	src := `version: 1
package: x
messages: {A: {versions: {1: {fields: {k: {type: string, required: true}}}}}}
queues:
  a: {consumes: [{message: A}], retry: {delays: [2000000h]}, handler_timeout: 1200h}
  b: {consumes: [{message: A}], arguments: {message_ttl: 1193h3m}}
  c: {consumes: [{message: A}], retry: {delays: [1ms, 1000h], max_attempts: 4}, ordering: {field: k}}
`
	want := []string{
		`5:50: a retry delay: 2000000h is longer than RabbitMQ's longest message TTL, 1193h2m47.295s (2³²−1 ms) [OUT-OF-RANGE]`,
		`5:79: handler_timeout: 1200h is longer than RabbitMQ's longest message TTL, 1193h2m47.295s (2³²−1 ms) [OUT-OF-RANGE]`,
		`6:58: message_ttl: 1193h3m is longer than RabbitMQ's longest message TTL, 1193h2m47.295s (2³²−1 ms) [OUT-OF-RANGE]`,
		`7:91: retrying in line up to attempt 4 takes a settlement budget of 2000h4m10.001s, longer than 1193h2m47.295s (fewer attempts or shorter delays) [RETRY-POLICY]`,
	}
	wantErrors(t, src, want)
}

// A duration not written as one says how it is written: a number without
// its unit, with the unit it lacks.
func TestDurationsWithoutUnitsSayHowToWriteThem(t *testing.T) {
	src := `version: 1
package: x
messages: {A: {versions: {1: {}}}}
queues:
  a:
    consumes: [{message: A}]
    retry: {delays: [10, 1.5]}
    handler_timeout: 10
    settlement_budget: true
    arguments: {message_ttl: 60000}
`
	want := []string{
		`7:22: a retry delay: want a duration, got the integer 10 (a duration has a unit, such as 10s or 10ms) [WRONG-KIND]`,
		`7:26: a retry delay: want a duration, got the number 1.5 (a duration has a unit, such as 1.5s or 1.5ms) [WRONG-KIND]`,
		`8:22: handler_timeout: want a duration, got the integer 10 (a duration has a unit, such as 10s or 10ms) [WRONG-KIND]`,
		`9:24: settlement_budget: want a duration, got true (such as 500ms, 5s or 1m30s) [WRONG-KIND]`,
		`10:30: message_ttl: want a duration, got the integer 60000 (a duration has a unit, such as 60000s or 60000ms) [WRONG-KIND]`,
	}
	wantErrors(t, src, want)
}

// Fields nest at most maxDepth deep, and a field's name is at most
// maxFieldName bytes: each nested object's Go name repeats the path to it,
// so the generated code would grow with the square of the depth times the
// names' length (600 levels of 300-byte names made a 595 MB file).
func TestFieldsNestAndNameWithinBounds(t *testing.T) {
	var b strings.Builder
	b.WriteString("version: 1\npackage: x\nmessages:\n  A:\n    versions:\n      1:\n        fields:\n")
	indent := "          "
	for range maxDepth + 5 {
		b.WriteString(indent + "o: {type: object, fields: {\n")
		indent += "  "
	}
	b.WriteString(indent + "leaf: {type: string}\n")
	for range maxDepth + 5 {
		b.WriteString("}}")
	}
	b.WriteString("\n")
	errs := errorsOf(t, b.String())
	if len(errs) != 1 || !strings.Contains(errs[0], "nests deeper than 32 levels") {
		t.Errorf("errors %q, want one: too deep", errs)
	}

	long := strings.Repeat("n", maxFieldName+1)
	errs = errorsOf(t, "version: 1\npackage: x\nmessages:\n  A:\n    versions:\n      1:\n        fields:\n          "+long+": {type: string}\n")
	if len(errs) != 1 || !strings.Contains(errs[0], "is 129 bytes") {
		t.Errorf("errors %q, want one: the name too long", errs)
	}
}

// A schema broken everywhere costs bounded output: at most maxErrors
// problems are listed, then how many more there were, and a hint lists at
// most maxListed names.
func TestErrorsAreBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("version: 1\npackage: x\nmessages:\n")
	for i := range 3000 {
		fmt.Fprintf(&b, "  M%d: {versions: {1: {}}}\n", i)
	}
	b.WriteString("queues:\n")
	for i := range 1500 {
		fmt.Fprintf(&b, "  q%d: {consumes: [{message: Unknown%d}]}\n", i, i)
	}
	errs := errorsOf(t, b.String())
	if len(errs) != maxErrors+1 || !strings.HasSuffix(errs[maxErrors], "1:1: 500 more problems, not listed: lilygen lists the first 1000 it finds [TOO-MANY-ERRORS]") {
		t.Fatalf("%d errors, the last %q", len(errs), errs[len(errs)-1])
	}
	if !strings.Contains(errs[0], "messages: M0, M1, M2, M3, M4, M5, M6, M7, M8, M9, M10, M11, M12, M13, M14, M15, M16, M17, M18, M19 and 2980 more)") {
		t.Errorf("the first error %q, want twenty names listed and the count of the others", errs[0])
	}
}

// A schema's text reaches a printed error escaped: a name with a newline
// and an ANSI sequence cannot colour the terminal or forge an error line.
func TestErrorsPrintControlCharactersEscaped(t *testing.T) {
	src := "version: 1\npackage: x\nmessages:\n  \"A\\x1b[31mRED\\nfake.lily.yaml:1:1: injected [X]\": {}\n  \"<<\": {versions: {1: {}}}\n"
	want := []string{
		`4:3: message name "A\x1b[31mRED\nfake.lily.yaml:1:1: injected [X]" is not an UpperCamel Go identifier such as OrderPlaced (name it A31mREDFakeLilyYaml11InjectedX) [BAD-NAME]`,
		`4:3: message A\x1b[31mRED\nfake.lily.yaml:1:1: injected [X] has no versions [MISSING-KEY]`,
		`5:3: message name "<<" is not an UpperCamel Go identifier such as OrderPlaced (give it such a name and set type: <<, the type it travels as) [BAD-NAME]`,
	}
	wantErrors(t, src, want)
	_, err := Parse("s\x1b.yaml", []byte(src))
	if s := err.Error(); strings.ContainsAny(s, "\x1b") || strings.Count(s, "\n") != len(want)-1 || !strings.HasPrefix(s, `s\x1b.yaml:4:3: `) {
		t.Errorf("printed raw:\n%s", s)
	}
}

// A consumer's guard finds the version's parameter by splitting the content
// type at ; and =: a name that is not an RFC 9110 token of at most 64 bytes
// (which keeps application/json; <name>=<version> within the 128 bytes the
// guard reads) could never be read back, and every delivery would be poison.
func TestContentTypeParameterIsAToken(t *testing.T) {
	long := strings.Repeat("p", 65)
	src := "version: 1\npackage: x\nenvelopes:\n" +
		"  spaced: {kind: headers, version: {content_type_parameter: \"v n\"}}\n" +
		"  semicolon: {kind: headers, version: {content_type_parameter: \"v;n\"}}\n" +
		"  equals: {kind: headers, version: {content_type_parameter: \"v=n\"}}\n" +
		"  long: {kind: headers, version: {content_type_parameter: " + long + "}}\n" +
		"  fits: {kind: headers, version: {content_type_parameter: " + long[1:] + "}}\n" +
		"  good: {kind: headers, version: {content_type_parameter: api-version}}\n" +
		"messages:\n" +
		"  A: {envelope: fits, versions: {1000000: {}}}\n"
	why := `: it is longer, or holds a space, a character other than printable ASCII, or one of ()<>@,;:\"/[]?={}, and a consumer would never find it in the content type [BAD-ENVELOPE]`
	wantErrors(t, src, []string{
		`4:61: content_type_parameter "v n" is not an RFC 9110 token of at most 64 bytes` + why,
		`5:64: content_type_parameter "v;n" is not an RFC 9110 token of at most 64 bytes` + why,
		`6:61: content_type_parameter "v=n" is not an RFC 9110 token of at most 64 bytes` + why,
		`7:59: content_type_parameter "` + shorten(long) + `" is not an RFC 9110 token of at most 64 bytes` + why,
	})
}

// An error quotes a scalar of the schema shortened: a megabyte-long type,
// date, content type, default, pattern, type name or message reference
// gives an error line a reader can read, not a megabyte of it.
func TestErrorsShortenLongScalars(t *testing.T) {
	long := strings.Repeat("a", 1<<20)
	field := func(f string) string {
		return "version: 1\npackage: x\nmessages:\n  M:\n    versions:\n      1:\n        fields:\n          f: " + f + "\n"
	}
	for name, src := range map[string]string{
		"wire type":    "version: 1\npackage: x\nmessages:\n  M:\n    type: \"" + long + "\\x01\"\n    versions: {1: {}}\n",
		"date":         "version: 1\npackage: x\nmessages:\n  M:\n    versions:\n      1: {deprecated_since: " + long + "}\n",
		"content type": "version: 1\npackage: x\nmessages:\n  M:\n    versions:\n      1: {content_types: [" + long + "]}\n",
		"default":      field("{type: string, max_length: 2, default: " + long + "}"),
		"pattern":      field("{type: string, pattern: \"(" + long + "\"}"),
		"unknown type": field("{type: " + long + "}"),
		"header type":  field("{type: \"" + long + "-\"}"),
		"message":      "version: 1\npackage: x\nmessages:\n  M: {versions: {1: {}}}\nqueues:\n  q: {consumes: [{message: X" + long + "}]}\n",
	} {
		_, err := Parse("s.yaml", []byte(src))
		var list ErrorList
		if !errors.As(err, &list) || len(list) == 0 {
			t.Errorf("%s: want errors, got %v", name, err)
			continue
		}
		for _, e := range list {
			if n := len(e.Error()); n >= 1<<10 {
				t.Errorf("%s: an error of %d bytes: %.200s...", name, n, e.Error())
			}
		}
	}
}

// YAML 1.1, which yaml.v3 follows, reads an integer with a leading 0 as
// octal, where YAML 1.2 tools and a reviewer read it as decimal: a schema
// must say which it means.
func TestLeadingZeroIsRefused(t *testing.T) {
	wantErrors(t, "version: 1\npackage: x\nmessages:\n  M:\n    versions:\n      010: {}\n", []string{
		`6:7: version: 010 has a leading 0, which YAML 1.1 reads as octal and YAML 1.2 as decimal (write 10, or 0o10 for octal) [WRONG-KIND]`,
	})
	src := `version: 1
package: x
messages:
  M:
    versions:
      1:
        fields:
          a: {type: string, max_length: 010}
          b: {type: integer, min: -0_17, max: 09}
          c: {type: number, max: 007}
          d: {type: string, max_length: 0o10, min_length: 0}
`
	wantErrors(t, src, []string{
		`8:41: max_length: 010 has a leading 0, which YAML 1.1 reads as octal and YAML 1.2 as decimal (write 10, or 0o10 for octal) [WRONG-KIND]`,
		`9:35: min: -0_17 has a leading 0, which YAML 1.1 reads as octal and YAML 1.2 as decimal (write -17, or -0o17 for octal) [WRONG-KIND]`,
		`9:47: max: 09 has a leading 0, which YAML 1.1 reads as octal and YAML 1.2 as decimal (write 9) [WRONG-KIND]`,
		`10:34: max: 007 has a leading 0, which YAML 1.1 reads as octal and YAML 1.2 as decimal (write 7, or 0o7 for octal) [WRONG-KIND]`,
	})
}

// A typed header must reach the consumer as the producer sent it, on every
// attempt: a name the broker writes or routes by is refused, as it is for
// an envelope's or an ordering's header. RabbitMQ refuses a publishing
// whose CC is not a list of routing keys and removes BCC; a retry copy
// leaves both behind, and the broker's records (x-death, the counts), so a
// required x-delivery-count would send every retry to the DLQ.
func TestTypedHeaderTheBrokerRewrites(t *testing.T) {
	src := `version: 1
package: x
messages:
  A:
    versions:
      1:
        headers:
          CC: {type: string, max_length: 10}
          BCC: {type: string, max_length: 10}
          x-death: {type: string, max_length: 10}
          x-delivery-count: {type: integer, required: true}
          x-acquired-count: {type: integer}
          x-first-death-queue: {type: string, max_length: 10}
          x-last-death-reason: {type: string, max_length: 10}
      2:
        headers:
          cc: {type: string, max_length: 10}
          X-Death: {type: string, max_length: 10}
          x-deaths: {type: string, max_length: 10}
`
	routing := `names a routing header (RabbitMQ's sender-selected distribution): the broker refuses a CC that is not a list of routing keys and removes BCC, and a retry copy leaves both behind [RESERVED-HEADER]`
	record := `is the broker's record of the message's queues, which it writes itself and a retry copy leaves behind [RESERVED-HEADER]`
	wantErrors(t, src, []string{
		`8:11: header "CC" ` + routing,
		`9:11: header "BCC" ` + routing,
		`10:11: header "x-death" ` + record,
		`11:11: header "x-delivery-count" ` + record,
		`12:11: header "x-acquired-count" ` + record,
		`13:11: header "x-first-death-queue" ` + record,
		`14:11: header "x-last-death-reason" ` + record,
	})
}

// A typo hint costs the product of the lengths of the names it compares,
// and a schema may hold many names and many problems: a hostile one's
// 100 KB name is refused whatever its type says, and compared with none;
// the names a hint prints are shortened; and a schema's hints fill a
// bounded table between them.
func TestHintsAreBounded(t *testing.T) {
	long := "A" + strings.Repeat("a", 100<<10)
	ref := long[:len(long)-1] + "b"
	src := "version: 1\npackage: p\nmessages:\n" +
		"  ? " + long + "\n  : type: x\n    versions:\n      1: {}\n" +
		"  B" + strings.Repeat("b", 100) + ": {versions: {1: {}}}\n" +
		"envelopes:\n  ? e" + long + "\n  : {kind: headers}\n" +
		"types:\n  ? T" + long + "\n  : {type: enum, values: [a]}\n" +
		"queues:\n  q:\n    consumes: [{message: " + long + "}, {message: " + ref + "}]\n" +
		"    envelope: " + ref + "\n" +
		"    ? " + ref + "\n    : 1\n"
	p := newParser(readFile)
	p.schema("s.yaml", []byte(src))
	if p.hints.cells != 0 {
		t.Errorf("hints filled %d cells of the edit-distance table for names too long to compare", p.hints.cells)
	}
	var got []string
	for _, e := range p.errs.sorted(p.files) {
		if n := len(e.Error()); n >= 1<<10 {
			t.Errorf("an error of %d bytes: %.200s...", n, e.Error())
		}
		got = append(got, e.Rule)
	}
	want := []string{RuleName, RuleName, RuleName, RuleUnknownRef, RuleUnknownRef, RuleUnknownKey}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rules (-want +got):\n%s\n%v", diff, p.errs)
	}

	// A candidate too long to compare is skipped, one that is compared
	// is printed shortened.
	var h hinter
	if s := h.suggest("x", []string{strings.Repeat("x", maxHinted+1)}); s != "" || h.cells != 0 {
		t.Errorf("a candidate of %d bytes: hint %q after %d cells", maxHinted+1, s, h.cells)
	}
	name := strings.Repeat("n", maxHinted)
	if s := h.suggest(name[1:]+"m", []string{name}); s != `did you mean "`+shorten(name)+`"?` {
		t.Errorf("hint %q", s)
	}

	// Many problems among many long names spend the budget, then go
	// without a suggestion.
	names := make([]string, 2*maxHintCells/(maxHinted*maxHinted))
	for i := range names {
		names[i] = fmt.Sprintf("%0*d", maxHinted, i)
	}
	h = hinter{}
	for range 3 {
		h.suggest(fmt.Sprintf("x%0*d", maxHinted-1, 7), names)
	}
	if h.cells > maxHintCells {
		t.Errorf("hints filled %d cells: at most %d", h.cells, maxHintCells)
	}
	if s := h.suggest(names[0], names); s != "" || h.cells > maxHintCells {
		t.Errorf("past the budget: hint %q after %d cells", s, h.cells)
	}
}

// A typed header the broker writes or routes by, and a message, shared
// type or envelope name over 128 bytes, are limits lilygen set after it
// accepted such schemas: the schema is read whole and Parse returns it
// beside the errors, for lilygen breaking to compare an older revision
// that breaks them. A message without type: travels as its name, which a
// consumer's guard never took: that is refused outright.
func TestNewerNameLimitsLeaveTheSchemaWhole(t *testing.T) {
	long := "A" + strings.Repeat("a", maxName)
	src := "version: 1\npackage: p\n" +
		"types:\n  T" + long + ": {type: enum, values: [a]}\n" +
		"envelopes:\n  e" + long + ": {kind: headers}\n" +
		"messages:\n  " + long + ":\n    type: a.b\n    envelope: e" + long + "\n    versions:\n      1:\n" +
		"        fields:\n          kind: {type: T" + long + "}\n" +
		"        headers:\n          x-delivery-count: {type: int64}\n          CC: {type: string, max_length: 8}\n" +
		"queues:\n  q:\n    envelope: e" + long + "\n    consumes: [{message: " + long + "}]\n"
	f, err := Parse("s.lily.yaml", []byte(src))
	var rules []string
	var list ErrorList
	if errors.As(err, &list) {
		for _, e := range list {
			rules = append(rules, e.Rule)
		}
	}
	want := []string{RuleName, RuleName, RuleName, RuleReservedHeader, RuleReservedHeader}
	if diff := cmp.Diff(want, rules); diff != "" {
		t.Errorf("rules (-want +got):\n%s\n%v", diff, err)
	}
	if f == nil || len(f.Messages) != 1 || len(f.Messages[0].Versions[0].Headers) != 2 || len(f.Types) != 1 || len(f.Queues) != 1 {
		t.Fatalf("Parse returned no whole file beside the limits: %+v", f)
	}
	if m := f.Messages[0]; m.Name != long || m.Type != "a.b" || m.Envelope == nil || m.Envelope.Name != "e"+long {
		t.Errorf("message %.40s… of type %q in envelope %+v", m.Name, m.Type, m.Envelope)
	}

	f, err = Parse("s.lily.yaml", []byte(strings.Replace(src, "    type: a.b\n", "", 1)))
	if want := "s.lily.yaml:8:3: message name \"" + shorten(long) + "\" is 129 bytes: at most 128"; f != nil || err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a message that travels as its name of 129 bytes: %v, %v; want no file and %s", f, err, want)
	}
}

// Every argument a schema can give its queue is its team's, never one Lily
// sets itself: NewConsumer refuses those in a hand-built spec, and must take
// what lilygen writes.
func TestArgumentsLeaveLilysOwnAlone(t *testing.T) {
	all := Arguments{SingleActiveConsumer: true, MaxPriority: 5, MaxLength: 10, MaxLengthBytes: 1 << 20, MessageTTL: time.Minute, InitialGroupSize: 3}
	for _, c := range []struct {
		typ       QueueType
		overflows []string
	}{
		{Classic, overflows},
		{Quorum, []string{"reject-publish"}},
	} {
		for _, o := range c.overflows {
			a := all
			a.Overflow = o
			for key, v := range a.Table() {
				if why := queue.LilysArgument(string(c.typ), key, v); why != "" {
					t.Errorf("%s queue, overflow %s: %s: %v is Lily's own: %s", c.typ, o, key, v, why)
				}
			}
		}
	}
}
