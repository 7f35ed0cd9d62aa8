package asyncapi

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"

	"github.com/lily-mq/lily/envelope"
	_ "github.com/lily-mq/lily/internal/update" // go test ./... -update passes the flag to every test binary
	"github.com/lily-mq/lily/schema"
	"github.com/lily-mq/lily/wire"
)

// documented are the schemas whose documents the tests check, here and with
// the AsyncAPI project's parser (validate_test.go): the golden cases that
// show every feature, the example service, and the edge cases of the
// document itself.
var documented = []string{
	"testdata/golden/full/schema.lily.yaml",
	"testdata/golden/estate/schema.lily.yaml",
	"testdata/golden/envelopes/schema.lily.yaml",
	"testdata/golden/shared_types/schema.lily.yaml",
	"testdata/golden/headers/schema.lily.yaml",
	"testdata/golden/publish/schema.lily.yaml",
	"testdata/golden/cmd_asyncapi/schema.lily.yaml",
	"examples/orders/orders.lily.yaml",
	"gen/asyncapi/testdata/edges.lily.yaml",
}

// fact is a value a document must hold at a path of its keys, separated by
// '/' (channel ids hold dots), compared as JSON.
type fact struct {
	schema, path, want string
}

// facts are what the documents must say, as written: a payload's required
// list, a channel's AMQP binding, Lily's extensions, a reference to a shared
// type, the headers of each envelope profile.
var facts = []fact{
	{"full", "components/messages/OrderPlacedV2/payload/required", `["order_id","amount_cents","express","placed_at","customer","items"]`},
	{"full", "components/messages/OrderPlacedV2/payload/properties/ratio", `{"type":["number","null"],"minimum":0,"maximum":1}`},
	{"full", "components/messages/OrderPlacedV2/payload/properties/items/items/properties/qty", `{"type":"integer","minimum":1,"maximum":1000}`},
	{"full", "channels/queue.billing.payments-v2/bindings/amqp", `{"is":"queue","queue":{"name":"billing.payments-v2","durable":true,"exclusive":false,"autoDelete":false},"bindingVersion":"0.3.0"}`},
	{"full", "channels/queue.billing.payments-v2/x-lily-dlq", `"billing.dead"`},
	{"full", "channels/queue.billing.payments-v2/x-lily-delivery-limit", `50`},
	{"full", "channels/queue.billing.payments-v2/x-lily-retry/max_attempts", `6`},
	{"full", "channels/queue.billing.payments-v2/x-lily-retry/buckets/0", `"billing.payments-v2.retry.1.5s"`},
	{"full", "operations/receiveBillingPaymentsV2/messages/1", `{"$ref":"#/channels/queue.billing.payments-v2/messages/OrderPlacedV2"}`},
	{"full", "operations/sendOrders/bindings/amqp/deliveryMode", `2`},
	{"estate", "channels/exchange.payments/bindings/amqp", `{"is":"routingKey","exchange":{"name":"payments","type":"topic"},"bindingVersion":"0.3.0"}`},
	{"estate", "channels/exchange.billing.in/x-lily-bindings/0", `{"exchange":"payments","routing_key":"payment.authorized.*","ownership":"owned"}`},
	{"estate", "channels/queue.billing.payments/x-lily-bindings/0", `{"exchange":"billing.in","match":"any","headers":{"region":"eu","tier":1},"ownership":"owned"}`},
	{"estate", "channels/queue.legacy.payments/bindings/amqp/queue", `{"name":"legacy.payments"}`},
	{"estate", "channels/queue.legacy.payments/x-lily-ownership", `"external"`},
	{"envelopes", "components/messages/PaymentAuthorizedV2/headers/properties/cloudEvents_type/const", `"com.acme.payment.authorized.v2"`},
	{"envelopes", "components/messages/PaymentAuthorizedV2/x-lily-envelope/version", `{"type_suffix":".v"}`},
	{"envelopes", "components/messages/LedgerPostedV2/contentType", `"application/json; v=2"`},
	{"envelopes", "components/messages/OrderShippedV1/headers/required", `["__TypeId__"]`},
	{"envelopes", "components/messages/RefundRequestedV1/bindings/amqp/messageType", `"refund.requested"`},
	{"envelopes", "components/messages/RefundRequestedV1/x-lily-producer", `"NewRefundRequestedV1"`},
	{"envelopes", "components/messages/AuditNotedV1/x-lily-producer", `"NewAuditNotedV1"`},
	{"envelopes", "components/messages/PaymentAuthorizedV2/x-lily-envelope/source", `"https://payments.acme.example/api"`},
	// An id is as the guard takes it, a CloudEvent's source too.
	{"envelopes", "components/messages/PaymentAuthorizedV2/headers/properties/cloudEvents_id", `{"type":"string","maxLength":128,"pattern":"^[!-~]+$"}`},
	{"envelopes", "components/messages/PaymentAuthorizedV2/headers/properties/cloudEvents_source", `{"type":"string","maxLength":128,"pattern":"^[!-~]+$"}`},
	{"envelopes", "components/messages/PaymentAuthorizedV2Structured/payload/properties/id", `{"type":"string","maxLength":128,"pattern":"^[!-~]+$"}`},
	{"envelopes", "components/messages/PaymentAuthorizedV2Structured/payload/properties/source", `{"type":"string","maxLength":128,"pattern":"^[!-~]+$"}`},
	{"envelopes", "components/messages/LedgerPostedV2/headers/properties/MessageId", `{"type":"string","maxLength":128,"pattern":"^[!-~]+$"}`},
	// Producers write a CloudEvent in binary content mode.
	{"envelopes", "operations/publishPaymentAuthorized/messages",
		`[{"$ref":"#/channels/exchange.payments.events/messages/PaymentAuthorizedV1"},{"$ref":"#/channels/exchange.payments.events/messages/PaymentAuthorizedV2"}]`},
	{"shared_types", "components/messages/PaymentAuthorizedV1/payload/properties/card", `{"$ref":"#/components/schemas/Card"}`},
	{"shared_types", "components/messages/PaymentAuthorizedV2/payload/properties/preferred", `{"oneOf":[{"$ref":"#/components/schemas/CardBrand"},{"type":"null"}],"default":"visa"}`},
	{"shared_types", "components/messages/PaymentRefundedV1/payload/properties/cards/additionalProperties", `{"$ref":"#/components/schemas/Card"}`},
	{"shared_types", "components/schemas/Card/required", `["brand","last4"]`},
	{"headers", "components/messages/AccountOpenedV1/headers/properties/x-tenant", `{"type":"string","minLength":1,"maxLength":32,"pattern":"^[a-z][a-z0-9-]*$"}`},
	{"headers", "components/messages/AccountOpenedV1/headers/required", `["x-lily-version","x-tenant","x-region"]`},
	{"headers", "components/messages/AccountOpenedV1/examples/1/headers/x-sent-at", `"2026-01-02T03:04:05Z"`},
	{"headers", "channels/queue.accounts/x-lily-inbox", `{"AccountOpenedV1":"required"}`},
	{"cmd_asyncapi", "info/version", `"2.1.0"`},
	{"cmd_asyncapi", "components/messages/InvoiceIssuedV1/payload/deprecated", `true`},
	{"cmd_asyncapi", "components/messages/InvoiceIssuedV2/payload/properties/note", `{"type":["string","null"],"maxLength":200}`},
	{"cmd_asyncapi", "channels/queue.billing.invoices/x-lily-ordering", `{"field":"invoice_id"}`},
	{"publish", "operations/publishOrderPlaced/bindings/amqp/cc", `["order.placed.v1","order.placed.v2"]`},
	{"publish", "operations/publishOrderPlaced/x-lily-order-key", `{"field":"order_id"}`},
	{"publish", "operations/publishPaymentCaptured/x-lily-routing-key", `{"field":"region"}`},
	{"publish", "channels/exchange.billing/messages/InvoiceIssuedV1", `{"$ref":"#/components/messages/InvoiceIssuedV1"}`},
	{"publish", "channels/exchange.shop.events/description", `"An exchange of the schema; its queues' x-lily-bindings say which routing keys reach them. Lily's generated Publish functions (PublishOrderPlacedV1, PublishOrderPlacedV2) send here, as operation publishOrderPlaced says; Lily does not know what other producers publish here."`},
	{"orders", "channels/queue.orders/bindings/amqp/queue/name", `"orders"`},
	// A key << is a key, not a merge.
	{"edges", "components/messages/MergedV1/examples/0/payload", `{"id":"a","<<":{"b":1},"tags":{"<<":2}}`},
	{"edges", "components/messages/MergedV1/examples/0/headers/<<", `"x"`},
	{"edges", "channels/queue.merged/x-lily-bindings/0/headers", `{"<<":"merge"}`},
	// U+0085, U+2028 and U+2029 are characters, YAML 1.2 and 1.1 alike.
	{"edges", "components/messages/QuotedV1/examples/0/payload", `{"text":"a\u2028b","note":"c\u2029d\u0085e","counts":{"f\u2028g":1,"h\u0085i":2}}`},
	// A line break at either end of a string stays.
	{"edges", "components/messages/QuotedV1/examples/1/payload", `{"switch":"10:30","lines":["\n","\na"," a\nb","a\n\n","\r\n","OFF","1:2.5","<<","="],"counts":{"=":1,"on":2,"::error::k":3,"##[add-mask]k":4},"command":"##[stop-commands]t"}`},
	{"edges", "components/messages/QuotedV1/payload/properties/switch/enum", `["on","off","yes","No","y","10:30",null]`},
	// A { or } in an address would open a parameter: the name is the
	// AMQP binding's alone.
	{"edges", "channels/queue.pings._eu_/address", `null`},
	{"edges", "channels/queue.pings._eu_/bindings/amqp/queue/name", `"pings.{eu}"`},
	{"edges", "channels/exchange._region_.events/address", `null`},
	{"edges", "channels/exchange._region_.events/bindings/amqp/exchange/name", `"{region}.events"`},
	{"edges", "channels/queue.pings/address", `"pings"`},
	{"edges", "channels/queue.q_evil___add-mask_/address", `"q\u202eevil##[add-mask]"`},
	{"edges", "components/messages/QuotedV1/payload/properties/command/enum", `["##[stop-commands]t","\u001b[31mred","::error::v","r\u202eevil",null]`},
	{"edges", "components/messages/QuotedV1/examples/1/payload/counts", `{"=":1,"on":2,"::error::k":3,"##[add-mask]k":4}`},
	// A pattern ECMA 262 would refuse is RE2's alone.
	{"edges", "components/messages/PatternedV1/payload/properties/dashed", `{"type":["string","null"],"x-lily-pattern":"^a\\-b$"}`},
	{"edges", "components/messages/PatternedV1/headers/properties/x-code", `{"type":"string","maxLength":4096,"x-lily-pattern":"^\\#[0-9]+$"}`},
	{"edges", "components/messages/PatternedV1/payload/properties/ranged/pattern", `"^[a\\-z]+\\/\\{[0-9]{2,3}\\}$"`},
	// A structured CloudEvent carries its version where the guard reads it:
	// in Lily's header, or as datacontenttype's parameter.
	{"edges", "components/messages/PingedV2Structured/headers/required", `["x-lily-version"]`},
	{"edges", "components/messages/PingedV2Structured/examples/0/headers", `{"x-lily-version":2,"x-region":"eu"}`},
	{"edges", "components/messages/PongedV2Structured/payload/required", `["specversion","id","source","type","data","datacontenttype"]`},
	{"edges", "components/messages/PongedV2Structured/payload/properties/datacontenttype/const", `"application/json; v=2"`},
	{"edges", "components/messages/PingedV2Structured/payload/properties/datacontenttype/pattern", `"^ *(?:[Aa][Pp][Pp][Ll][Ii][Cc][Aa][Tt][Ii][Oo][Nn]/[Jj][Ss][Oo][Nn]) *(?:;[ -~]*)?$"`},
}

// name is the short name of a documented schema: its golden case, or the
// file's first word.
func name(path string) string {
	if c, ok := strings.CutPrefix(path, "testdata/golden/"); ok {
		return strings.TrimSuffix(c, "/schema.lily.yaml")
	}
	return strings.Split(filepath.Base(path), ".")[0]
}

// documents generates the document of every documented schema, by name.
func documents(t *testing.T) map[string][]byte {
	t.Helper()
	docs := map[string][]byte{}
	for _, path := range documented {
		f, err := schema.Load(filepath.Join("..", "..", filepath.FromSlash(path)))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		version := schema.DefaultAsyncAPIVersion
		if f.AsyncAPI != nil {
			version = f.AsyncAPI.Version
		}
		doc, err := Generate(f, version)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := Generate(f, version)
		if !bytes.Equal(doc, again) {
			t.Errorf("%s: two runs give different documents", path)
		}
		docs[name(path)] = doc
	}
	return docs
}

// TestFacts reads each document back and checks what it must say.
func TestFacts(t *testing.T) {
	docs := map[string]any{}
	for name, doc := range documents(t) {
		var v any
		if err := yaml.Unmarshal(doc, &v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		docs[name] = v
	}
	checkFacts(t, docs, facts)
}

// checkFacts checks each fact against the parsed documents.
func checkFacts(t *testing.T, docs map[string]any, facts []fact) {
	t.Helper()
	for _, fc := range facts {
		got, ok := at(docs[fc.schema], fc.path)
		if !ok {
			t.Errorf("%s: nothing at %s", fc.schema, fc.path)
			continue
		}
		var want any
		if err := json.Unmarshal([]byte(fc.want), &want); err != nil {
			t.Fatalf("fact %s: %v", fc.path, err)
		}
		if diff := cmp.Diff(want, asJSON(t, got)); diff != "" {
			t.Errorf("%s: %s (-want +got):\n%s", fc.schema, fc.path, diff)
		}
	}
}

// at is the value at path in v.
func at(v any, path string) (any, bool) {
	for _, key := range strings.Split(path, "/") {
		switch node := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = node[key]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(key)
			if err != nil || i >= len(node) {
				return nil, false
			}
			v = node[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// asJSON is v as JSON would read it, so that YAML's integers and JSON's
// numbers compare equal.
func asJSON(t *testing.T, v any) any {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestHeader: the document starts with lilygen's header, as # comments, so
// that generate and check treat it as the Go file.
func TestHeader(t *testing.T) {
	doc := documents(t)["cmd_asyncapi"]
	want := "# Code generated by lilygen. DO NOT EDIT.\n# lilygen (devel)\n# Source: schema.lily.yaml\n# Schema: schema.lily.yaml\nasyncapi: 3.0.0\n"
	if !bytes.HasPrefix(doc, []byte(want)) {
		t.Errorf("document starts\n%s\nwant\n%s", doc[:min(len(doc), 200)], want)
	}
}

// A schema's file name holding a newline stays in its # comment: the
// document's YAML gains no line.
func TestHeaderSourceIsCommentText(t *testing.T) {
	f, err := schema.Load(filepath.Join("..", "..", "testdata", "golden", "cmd_asyncapi", "schema.lily.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	f.Name = filepath.Join("dir", "a\nasyncapi: 2.0.0\n.lily.yaml")
	doc, err := Generate(f, "1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	want := "# Source: \"a\\nasyncapi: 2.0.0\\n.lily.yaml\"\n# Schema: \"a\\nasyncapi: 2.0.0\\n.lily.yaml\"\nasyncapi: 3.0.0\n"
	if !bytes.Contains(doc, []byte(want)) {
		t.Errorf("document starts\n%s\nwant the lines\n%s", doc[:min(len(doc), 200)], want)
	}
}

// A pattern in RE2's own syntax goes to x-lily-pattern: ECMA 262, which
// JSON Schema tools read patterns by in unicode mode, would refuse it or read
// it otherwise.
func TestPatternsForJSONSchema(t *testing.T) {
	for p, ecma := range map[string]bool{
		`^[a-z][a-z0-9-]*$`: true, `^(?:ab)+\d{3}$`: true, `^(?<word>\w+)$`: true,
		`(?i)^[a-z]+$`: false, `^\pL+$`: false, `^a\z`: false, `\Qa.b\E`: false, `^[[:alpha:]]+$`: false, `(?P<w>a)`: false,
		`^\x{e9}+$`: false, `^\S+$`: false, `^a\s?b$`: false, `^\x41$`: true,
		`^[].]$`: false, `^[^]a]$`: false, `^[a[:digit:]]+$`: false,
		// Escapes: ECMA takes its syntax characters, / and, in a class, -;
		// RE2 any punctuation, and octal.
		`^a\-b$`: false, `^[a\-z]+$`: true, `^a\@b$`: false, `^[\@]$`: false, `^\_$`: false, `^\#1$`: false, `^\!$`: false,
		`^\.\*\+\?\(\)\[\]\{\}\|\/\\\^\$`: true, `^[\]\[\/\^]+$`: true,
		`^\101$`: false, `^\08$`: false, `^[\01]$`: false, `^a\0b$`: true, `^[\0]$`: true, `^\a$`: false,
		`^\f\n\r\t\v\d\D\w\W$`: true, `\bx\B`: true,
		// A - beside a class escape: a member in RE2, a range ECMA refuses.
		`^[\w-.]+$`: false, `^[\d-z]+$`: false, `^[^\W--]$`: false, `^[a-z\d-]+$`: true, `^[-\w.]+$`: true,
		`^[^-\d]$`: true, `^[\w\-.]+$`: true, `^[\w.-]+$`: true,
		// Braces and brackets RE2 takes as themselves.
		`^{a}$`: false, `^a{,3}$`: false, `^a{1$`: false, `^a{ 2}$`: false, `^a]$`: false, `^a}$`: false,
		`^a{2}$`: true, `^a{02,}?$`: true, `^a{2,3}b$`: true, `^[{}()|]$`: true, `^[:a]$`: true,
		// ECMA repeats no assertion.
		`^*a$`: false, `a$?`: false, `\b+a`: false, `^a\B{2}`: false, `(?:^)*a`: true, `^a*?$`: true,
		// A group name is an ECMA identifier.
		`^(?<1st>a)$`: false, `^(?<a1>a)$`: true, `^(?<_a>a)$`: true,
		// Not RE2, and never asked; no panic all the same.
		`a\`: false, `[a`: false, `(?`: false,
	} {
		if got := ecmaPattern(p); got != ecma {
			t.Errorf("ecmaPattern(%q) = %v, want %v", p, got, ecma)
		}
	}
}

// A structured CloudEvent's datacontenttype is what the guard routes to
// the version: its media type one of the version's, trimmed of spaces and
// compared without case, in printable ASCII.
func TestMediaPattern(t *testing.T) {
	re := regexp.MustCompile(mediaPattern([]string{"application/json", "application/vnd.a+json"}))
	for s, routed := range map[string]bool{
		"application/json": true, "Application/JSON": true, " application/json ; charset=utf-8": true, "application/json;v=2": true,
		"APPLICATION/VND.A+JSON": true, "application/vnd.a+json;": true,
		"text/plain": false, "application/jsonx": false, "application/json x": false, "application/vnd.aa+json": false,
		"application/json\t": false, "application/json; é": false, "": false, ";application/json": false,
	} {
		if re.MatchString(s) != routed {
			t.Errorf("pattern %s matches %q: %v, want %v", re, s, !routed, routed)
		}
	}
}

// An id's pattern takes the bytes envelope.IDText takes, and no other.
func TestIDPattern(t *testing.T) {
	re := regexp.MustCompile(idPattern)
	for c := range 256 {
		s := string([]byte{'a', byte(c), 'z'})
		if re.MatchString(s) != envelope.IDText(s) {
			t.Errorf("byte %#x: pattern %v, envelope.IDText %v", c, re.MatchString(s), envelope.IDText(s))
		}
	}
}

// A dot outside a character class is written so that ECMA 262 reads it as
// RE2 does: anything but a newline. Escaped dots, and dots in a class, are
// left alone.
func TestPatternDotsForJSONSchema(t *testing.T) {
	for p, want := range map[string]string{
		`^.+$`:        `^[^\n]+$`,
		`^a\.b$`:      `^a\.b$`,
		`^[.a]$`:      `^[.a]$`,
		`^[].]x.$`:    `^[].]x[^\n]$`,
		`^[^].]..$`:   `^[^].][^\n][^\n]$`,
		`^\\.$`:       `^\\[^\n]$`,
		`^[\].]+.$`:   `^[\].]+[^\n]$`,
		`^(?:a.)+\d$`: `^(?:a[^\n])+\d$`,
	} {
		if got := ecmaDots(p); got != want {
			t.Errorf("ecmaDots(%q) = %q, want %q", p, got, want)
		}
		re2, ecma := regexp.MustCompile(p), regexp.MustCompile(ecmaDots(p))
		for _, s := range []string{"a.b", "a\rb", "ab", "\\x", "]x\r", "].\u2028y"} {
			if re2.MatchString(s) != ecma.MatchString(s) {
				t.Errorf("%q and %q disagree on %q", p, ecmaDots(p), s)
			}
		}
	}
}

// Two messages whose ids would be one, X v1 in envelope foo-v2 and
// XV1InFoo v2, get one each, and each queue names its own.
func TestMessageIDsAreUnique(t *testing.T) {
	src := `version: 1
package: clash
envelopes:
  foo-v2: {kind: headers, type: {header: T}, version: {fixed: 1}}
messages:
  X:
    versions:
      1: {fields: {a: {type: string}}}
  XV1InFoo:
    versions:
      1: {fields: {a: {type: string}}}
      2: {fields: {a: {type: string}}}
queues:
  q1: {consumes: [{message: X}, {message: XV1InFoo}]}
  q2: {envelope: foo-v2, consumes: [{message: X}]}
`
	f, err := schema.Parse("clash.lily.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	vs, ids := variants(f)
	var got []string
	for _, va := range vs {
		got = append(got, va.id+" = "+va.m.Name+" v"+strconv.Itoa(va.v.Number)+" in "+va.env.Name)
	}
	want := []string{"XV1InLily = X v1 in lily", "XV1InFooV2 = X v1 in foo-v2", "XV1InFooV1 = XV1InFoo v1 in lily", "XV1InFooV2_2 = XV1InFoo v2 in lily"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}
	if x := f.Messages[0]; ids[variantKey{x.Versions[0], "foo-v2"}][0] != "XV1InFooV2" {
		t.Errorf("X v1 in foo-v2 is %v", ids[variantKey{x.Versions[0], "foo-v2"}])
	}
}

// A string that a YAML 1.1 reader such as PyYAML would take for another
// type, or that holds a line break, is double-quoted, as a value and as a
// key; others are left to the encoder.
func TestStringsReadAlike(t *testing.T) {
	for s, quoted := range map[string]bool{
		"on": true, "Off": true, "YES": true, "n": true, "y": true, "No": true, "true": true,
		"10:30": true, "-1:20:30": true, "1_0:05": true, "1:2.5": true, "0:30.": true, "<<": true, "=": true,
		"\n": true, "\na": true, "a\r": true, " a\nb": true, "a\u2028b": true,
		"one": false, "nope": false, "10:60": false, "0:30": false, "1:2:": false, "<<<": false, "==": false, "a b": false,
	} {
		n := str(s)
		if got := n.Style == yaml.DoubleQuotedStyle; got != quoted {
			t.Errorf("str(%q) double-quoted %v, want %v", s, got, quoted)
		}
		doc, err := encode(newObject().set(s, n).mapping())
		if err != nil {
			t.Fatal(err)
		}
		var back map[string]string
		if err := yaml.Unmarshal(doc, &back); err != nil || len(back) != 1 || back[s] != s {
			t.Errorf("%q written as %q reads back as %q (%v)", s, doc, back, err)
		}
	}
}

// A string the GitHub Actions runner would read as a workflow command where
// a log shows the document (##[ anywhere in a line, :: at its start after
// spaces), or that holds a character a terminal acts on or that hides what
// follows it, is double-quoted with those written as YAML escapes: the
// document printed holds none of them as itself, and reads back the same,
// as a key, a value and a list item.
func TestStringsForgeNoWorkflowCommand(t *testing.T) {
	for _, s := range []string{
		"##[stop-commands]t", "a ##[add-mask]b", "::error::k", "::", "q\u202eevil", "\x1b[31mred",
		"\x1b]8;;https://x.example\x1b\\link\x1b]8;;\x1b\\", "zero\u200bwidth", "tab\there", "del\x7f",
		"astral \U000e0001 tag", "line\nbreak ##[x", "plain ::warning",
	} {
		doc, err := encode(newObject().set(s, str(s)).set("list", list(str(s))).mapping())
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(doc), "\n") {
			if strings.Contains(l, "##[") || strings.HasPrefix(strings.TrimLeft(l, " "), "::") {
				t.Errorf("%q written as a workflow command: %s", s, l)
			}
			if i := strings.IndexFunc(l, func(r rune) bool { return !unicode.IsPrint(r) }); i >= 0 {
				t.Errorf("%q written with %q as itself: %q", s, []rune(l[i:])[0], l)
			}
		}
		var back map[string]any
		if err := yaml.Unmarshal(doc, &back); err != nil {
			t.Fatalf("%q written as %q: %v", s, doc, err)
		}
		if want := map[string]any{s: s, "list": []any{s}}; !cmp.Equal(back, want) {
			t.Errorf("%q written as %q reads back as %q", s, doc, back)
		}
	}
}

// The time pattern the documents give with format date-time takes what
// wire.ParseTime takes, in form: a date-time validator alone took a lower-
// case t or z, a space for the T and a leap second, which Lily refuses.
func TestTimePatternFollowsParseTime(t *testing.T) {
	pattern := regexp.MustCompile(timePattern)
	for _, s := range []string{
		"2024-01-01T00:00:00Z", "2024-01-01T00:00:00.5+02:00", "2024-02-29T23:59:59.123456789-11:30",
		"2024-01-01t00:00:00z", "2024-01-01 00:00:00Z", "2016-12-31T23:59:60Z", "2024-01-01T00:00:00", "2024-01-01T00:00:00.Z",
	} {
		_, parses := wire.ParseTime(s)
		if pattern.MatchString(s) != parses {
			t.Errorf("%q: the pattern matches %t, ParseTime reads it %t", s, pattern.MatchString(s), parses)
		}
	}
}

// pyYAMLFloat is PyYAML's implicit float: YAML 1.1 wants a dot, and a signed
// exponent.
var pyYAMLFloat = regexp.MustCompile(`^[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?$`)

// A float with an exponent is written so that a YAML 1.1 reader takes it for
// the float it is, not a string ("1e-07" was one for PyYAML), and yaml.v3
// reads back the same value.
func TestFloatTextReadsAsAFloatInYAML11(t *testing.T) {
	for _, v := range []float64{1e-7, 1e20, -2.5e-3, 0.1, 1.5e300, 5e-324} {
		n := number(v)
		var back float64
		if !pyYAMLFloat.MatchString(n.Value) || yaml.Unmarshal([]byte(n.Value), &back) != nil || back != v {
			t.Errorf("%g is written %q: YAML 1.1 float %t, read back as %g", v, n.Value, pyYAMLFloat.MatchString(n.Value), back)
		}
	}
	for in, want := range map[string]string{"1e3": "1.0e+3", "2.5E-3": "2.5E-3", "-1E10": "-1.0E+10", "12": "12", "0.5": "0.5"} {
		if got := floatText(in); got != want {
			t.Errorf("floatText(%q) = %q, want %q", in, got, want)
		}
	}
}
