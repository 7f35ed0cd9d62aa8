package review

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lily-mq/lily/schema"
)

const base = `version: 1
package: shopmsg
messages:
  OrderPlaced:
    versions:
      1:
        fields:
          order_id: {type: string, required: true, max_length: 64}
          amount: {type: integer, required: true, min: 1, max: 1000}
          note: {type: string, max_length: 200}
          channel: {type: enum, values: [web, app], default: web}
          customer:
            type: object
            fields:
              email: {type: string, required: true, max_length: 254}
          items:
            type: list
            max_items: 10
            items: {type: string, max_length: 20}
      2:
        fields:
          order_id: {type: string, required: true, max_length: 64}
queues:
  orders:
    consumes:
      - message: OrderPlaced
        versions: [1, 2]
    retry:
      delays: [1s, 5s]
    max_body_bytes: 65536
`

func parse(t *testing.T, name, src string) *schema.File {
	t.Helper()
	f, err := schema.Parse(name, []byte(src))
	if err != nil {
		t.Fatalf("%s:\n%v\n%s", name, err, src)
	}
	return f
}

// edit applies old → new replacements to base, each of which must match.
func edit(t *testing.T, pairs ...string) string {
	t.Helper()
	s := base
	for i := 0; i+1 < len(pairs); i += 2 {
		if !strings.Contains(s, pairs[i]) {
			t.Fatalf("base lacks %q", pairs[i])
		}
		s = strings.Replace(s, pairs[i], pairs[i+1], 1)
	}
	return s
}

func TestBreaking(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edits []string
		want  []string // CATEGORY RULE@SUBJECT
	}{
		{"unchanged", nil, nil},
		{"optional field added", []string{"          note:", "          gift: {type: bool}\n          note:"}, nil},
		{"new queue and version", []string{"      2:\n", "      3: {}\n      2:\n", "queues:\n", "queues:\n  audit:\n    consumes: [{message: OrderPlaced, versions: [3]}]\n"}, nil},
		{"bounds widened", []string{"max: 1000", "max: 5000"}, []string{"PRODUCER BOUND-WIDENED@OrderPlaced.v1.amount"}},
		{"bounds narrowed", []string{"min: 1, max: 1000", "min: 2, max: 1000"}, []string{"INFLIGHT BOUND-NARROWED@OrderPlaced.v1.amount"}},
		{"list element narrowed", []string{"max_length: 20}", "max_length: 10}"}, []string{"INFLIGHT BOUND-NARROWED@OrderPlaced.v1.items[]"}},
		{"item count narrowed", []string{"max_items: 10", "max_items: 5"}, []string{"INFLIGHT BOUND-NARROWED@OrderPlaced.v1.items"}},
		// A limit written as what the type holds anyway changes nothing.
		{"least item count written", []string{"max_items: 10", "min_items: 0\n            max_items: 10"}, nil},
		{"least length written", []string{"note: {type: string, max_length: 200}", "note: {type: string, min_length: 0, max_length: 200}"}, nil},
		{"required field added", []string{"          note:", "          currency: {type: string, required: true, max_length: 3}\n          note:"},
			[]string{"INFLIGHT FIELD-REQUIRED-ADDED@OrderPlaced.v1.currency"}},
		{"nested required field added", []string{"              email:", "              name: {type: string, required: true, max_length: 9}\n              email:"},
			[]string{"INFLIGHT FIELD-REQUIRED-ADDED@OrderPlaced.v1.customer.name"}},
		{"field made required", []string{"note: {type: string, max_length: 200}", "note: {type: string, required: true, max_length: 200}"},
			[]string{"API FIELD-GO-TYPE-CHANGED@OrderPlaced.v1.note", "INFLIGHT FIELD-MADE-REQUIRED@OrderPlaced.v1.note"}},
		{"field made optional", []string{"amount: {type: integer, required: true,", "amount: {type: integer,"},
			[]string{"API FIELD-GO-TYPE-CHANGED@OrderPlaced.v1.amount", "PRODUCER FIELD-MADE-OPTIONAL@OrderPlaced.v1.amount"}},
		{"optional field removed", []string{"          note: {type: string, max_length: 200}\n", ""},
			[]string{"API FIELD-REMOVED@OrderPlaced.v1.note"}},
		{"required field removed", []string{"          amount: {type: integer, required: true, min: 1, max: 1000}\n", ""},
			[]string{"API FIELD-REMOVED@OrderPlaced.v1.amount", "PRODUCER FIELD-REQUIRED-REMOVED@OrderPlaced.v1.amount"}},
		{"type changed", []string{"amount: {type: integer, required: true, min: 1, max: 1000}", "amount: {type: string, required: true}"},
			[]string{"API FIELD-GO-TYPE-CHANGED@OrderPlaced.v1.amount", "WIRE FIELD-TYPE-CHANGED@OrderPlaced.v1.amount"}},
		{"list element's type changed", []string{"items: {type: string, max_length: 20}", "items: {type: integer}"},
			[]string{"API FIELD-GO-TYPE-CHANGED@OrderPlaced.v1.items", "WIRE FIELD-TYPE-CHANGED@OrderPlaced.v1.items[]"}},
		{"version removed", []string{"      2:\n        fields:\n          order_id: {type: string, required: true, max_length: 64}\n", "", "[1, 2]", "[1]"},
			[]string{"API VERSION-REMOVED@OrderPlaced.v2", "INFLIGHT VERSION-UNCONSUMED@orders/OrderPlaced.v2"}},
		{"version no longer consumed", []string{"[1, 2]", "[2]"},
			[]string{"INFLIGHT VERSION-UNCONSUMED@orders/OrderPlaced.v1"}},
		{"version newly consumed", []string{"[1, 2]", "[1, 2]\n  audit:\n    consumes: [{message: OrderPlaced, versions: [1]}]"}, nil},
		// Consumers on the old schema fail a version of a message they did not
		// consume: producers deployed first lose it to the DLQ.
		{"message newly consumed", []string{"queues:\n", "  Refunded:\n    versions:\n      1: {}\nqueues:\n", "versions: [1, 2]\n", "versions: [1, 2]\n      - message: Refunded\n"},
			[]string{"API HANDLER-METHOD-ADDED@orders/Refunded.v1", "PRODUCER VERSION-ADDED@orders/Refunded.v1"}},
		{"message renamed", []string{"  OrderPlaced:", "  OrderCreated:", "message: OrderPlaced", "message: OrderCreated"},
			[]string{"API HANDLER-METHOD-ADDED@orders/OrderCreated.v1", "API HANDLER-METHOD-ADDED@orders/OrderCreated.v2", "WIRE MESSAGE-RENAMED@OrderPlaced",
				"INFLIGHT VERSION-UNCONSUMED@orders/OrderPlaced.v1", "INFLIGHT VERSION-UNCONSUMED@orders/OrderPlaced.v2",
				"PRODUCER VERSION-ADDED@orders/OrderCreated.v1", "PRODUCER VERSION-ADDED@orders/OrderCreated.v2"}},
		{"message renamed and changed", []string{"  OrderPlaced:", "  OrderCreated:", "message: OrderPlaced", "message: OrderCreated", "max_items: 10", "max_items: 5"},
			[]string{"API MESSAGE-REMOVED@OrderPlaced", "API HANDLER-METHOD-ADDED@orders/OrderCreated.v1", "API HANDLER-METHOD-ADDED@orders/OrderCreated.v2",
				"INFLIGHT VERSION-UNCONSUMED@orders/OrderPlaced.v1", "INFLIGHT VERSION-UNCONSUMED@orders/OrderPlaced.v2",
				"PRODUCER VERSION-ADDED@orders/OrderCreated.v1", "PRODUCER VERSION-ADDED@orders/OrderCreated.v2"}},
		{"queue removed", []string{"queues:\n  orders:", "queues:\n  orders2:"},
			[]string{"INFLIGHT QUEUE-REMOVED@orders"}},
		{"queue type changed", []string{"    consumes:\n      - message", "    type: quorum\n    consumes:\n      - message"},
			[]string{"TOPOLOGY QUEUE-TYPE-CHANGED@orders"}},
		{"inbox now required", []string{"    max_body_bytes", "    inbox: required\n    max_body_bytes"},
			[]string{"API INBOX-REQUIREMENT-CHANGED@orders"}},
		{"inbox optional", []string{"    max_body_bytes", "    inbox: optional\n    max_body_bytes"}, nil},
		{"dlq changed", []string{"    max_body_bytes", "    dlq: orders.dead\n    max_body_bytes"},
			[]string{"TOPOLOGY DLQ-CHANGED@orders"}},
		{"retry delays changed", []string{"[1s, 5s]", "[2s, 5s, 1m]"}, nil},
		{"body limit lowered", []string{"max_body_bytes: 65536", "max_body_bytes: 1024"},
			[]string{"INFLIGHT BODY-LIMIT-NARROWED@orders"}},
		{"default changed", []string{"default: web", "default: app"}, []string{"INFLIGHT DEFAULT-CHANGED@OrderPlaced.v1.channel"}},
		{"default removed: absent reads as none", []string{", default: web", ""},
			[]string{"API FIELD-GO-TYPE-CHANGED@OrderPlaced.v1.channel", "INFLIGHT DEFAULT-CHANGED@OrderPlaced.v1.channel"}},
		{"default added: absent reads as it", []string{"note: {type: string, max_length: 200}", "note: {type: string, max_length: 200, default: none}"},
			[]string{"API FIELD-GO-TYPE-CHANGED@OrderPlaced.v1.note", "INFLIGHT DEFAULT-CHANGED@OrderPlaced.v1.note"}},
		{"default removed as the field becomes required", []string{"channel: {type: enum, values: [web, app], default: web}", "channel: {type: enum, values: [web, app], required: true}"},
			[]string{"INFLIGHT FIELD-MADE-REQUIRED@OrderPlaced.v1.channel"}},
		{"enum value added", []string{"values: [web, app]", "values: [web, app, api]"}, []string{"PRODUCER BOUND-WIDENED@OrderPlaced.v1.channel"}},
		{"enum value renamed, its constant kept", []string{"values: [web, app]", "values: [web, App]"},
			[]string{"INFLIGHT BOUND-NARROWED@OrderPlaced.v1.channel", "PRODUCER BOUND-WIDENED@OrderPlaced.v1.channel"}},
		{"enum value removed", []string{"values: [web, app]", "values: [web]"}, []string{"API ENUM-CONSTANT-REMOVED@OrderPlaced.v1.channel", "INFLIGHT BOUND-NARROWED@OrderPlaced.v1.channel"}},
		{"pattern added", []string{"note: {type: string, max_length: 200}", "note: {type: string, max_length: 200, pattern: '^[a-z]*$'}"}, []string{"INFLIGHT BOUND-NARROWED@OrderPlaced.v1.note"}},
		{"field made nullable", []string{"order_id: {type: string, required: true, max_length: 64}\n          amount", "order_id: {type: string, required: true, nullable: true, max_length: 64}\n          amount"},
			[]string{"API FIELD-GO-TYPE-CHANGED@OrderPlaced.v1.order_id", "PRODUCER FIELD-NULL-ALLOWED@OrderPlaced.v1.order_id"}},
		{"optional field made nullable: it read null as absent already", []string{"note: {type: string, max_length: 200}", "note: {type: string, nullable: true, max_length: 200}"}, nil},
		{"integer widened, same bounds", []string{"amount: {type: integer,", "amount: {type: int16,"},
			[]string{"API FIELD-GO-TYPE-CHANGED@OrderPlaced.v1.amount"}},
		{"integer spelled int64", []string{"amount: {type: integer,", "amount: {type: int64,"}, nil},
		{"integer narrowed to its type's range", []string{"amount: {type: integer, required: true, min: 1, max: 1000}", "amount: {type: uint8, required: true, min: 1}"},
			[]string{"API FIELD-GO-TYPE-CHANGED@OrderPlaced.v1.amount", "INFLIGHT BOUND-NARROWED@OrderPlaced.v1.amount"}},
		{"package renamed", []string{"package: shopmsg", "package: shop"}, []string{"API PACKAGE-CHANGED@shop"}},
		// The queue reads, and its producers (still generated) write, the new
		// envelope.
		{"envelope of another producer", []string{"messages:\n", "envelopes:\n  dotnet: {kind: headers, type: {header: MessageType}, version: {header: v}}\nmessages:\n",
			"  OrderPlaced:\n", "  OrderPlaced:\n    envelope: dotnet\n"},
			[]string{"WIRE ENVELOPE-CHANGED@OrderPlaced", "WIRE ENVELOPE-CHANGED@orders/OrderPlaced"}},
		// The queue still dispatches the wire type: its versions are compared,
		// and none is unconsumed.
		{"message renamed in Go and narrowed", []string{"  OrderPlaced:\n", "  OrderCreated:\n    type: OrderPlaced\n", "message: OrderPlaced", "message: OrderCreated", "max_items: 10", "max_items: 5"},
			[]string{"API MESSAGE-GO-RENAMED@OrderPlaced", "API HANDLER-METHOD-ADDED@orders/OrderCreated.v1", "API HANDLER-METHOD-ADDED@orders/OrderCreated.v2",
				"INFLIGHT BOUND-NARROWED@OrderPlaced.v1.items"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, new := parse(t, "old.lily.yaml", base), parse(t, "new.lily.yaml", edit(t, tc.edits...))
			found := Breaking(old, new)
			Sort(found)
			var got []string
			for _, f := range found {
				got = append(got, string(f.Category)+" "+f.Ack())
				if f.File != "new.lily.yaml" || f.Line < 1 || f.Column < 1 || f.Message == "" || f.Migration == "" {
					t.Errorf("finding without a place, message or migration: %+v", f)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
		})
	}
}

// A CloudEvent's source is what its producers write, not how a queue reads
// it: a producer is removed only with the source.
func TestBreakingEventSource(t *testing.T) {
	schemaWith := func(source string) *schema.File {
		return parse(t, "new.lily.yaml", edit(t, "messages:\n", "envelopes:\n  events: {kind: cloudevents, version: {type_suffix: .v}"+source+"}\nmessages:\n",
			"  OrderPlaced:\n", "  OrderPlaced:\n    envelope: events\n"))
	}
	none, acme, other := schemaWith(""), schemaWith(", source: https://acme.example/shop"), schemaWith(", source: /shop")
	for _, tc := range []struct {
		name     string
		old, new *schema.File
		want     []string
	}{
		{"source added", none, acme, nil},
		{"source changed", acme, other, nil},
		{"source removed", acme, none, []string{"PRODUCER-REMOVED@OrderPlaced"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := acksOf(Breaking(tc.old, tc.new))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBreakingPublish: a message published elsewhere breaks the queues
// bound to where it was, and a publish removed breaks the calls of its
// Publish functions; a fixed key is compared as sent, and an order key only
// orders an outbox.
func TestBreakingPublish(t *testing.T) {
	const src = `version: 1
package: shopmsg
messages:
  Ping:
    publish: {exchange: shop, routing_key: ping.v1, order_key: {field: id}}
    versions:
      1:
        fields:
          id: {type: string, required: true, max_length: 9}
          region: {type: enum, required: true, values: [eu, us]}
exchanges:
  shop: {type: topic}
  other: {type: topic}
`
	for _, tc := range []struct {
		name, from, to string
		want           []string
	}{
		{"unchanged", "", "", nil},
		{"key written with {version}", "ping.v1", `"ping.v{version}"`, nil},
		{"order key changed", "order_key: {field: id}", "order_key: {field: region}", nil},
		{"order key removed", ", order_key: {field: id}", "", nil},
		{"key changed", "ping.v1", "ping.v2", []string{"ROUTING PUBLISH-CHANGED@Ping"}},
		{"key read from a field", "routing_key: ping.v1", "routing_key: {field: region}", []string{"ROUTING PUBLISH-CHANGED@Ping"}},
		{"exchange changed", "exchange: shop", "exchange: other", []string{"ROUTING PUBLISH-CHANGED@Ping"}},
		{"publish removed", "    publish: {exchange: shop, routing_key: ping.v1, order_key: {field: id}}\n", "", []string{"API PUBLISH-REMOVED@Ping"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(src, tc.from) {
				t.Fatalf("the schema lacks %q", tc.from)
			}
			old, new := parse(t, "old.lily.yaml", src), parse(t, "new.lily.yaml", strings.Replace(src, tc.from, tc.to, 1))
			var got []string
			for _, f := range Breaking(old, new) {
				got = append(got, string(f.Category)+" "+f.Ack())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
		})
	}
}

// ping is a schema of one message version, up to its fields.
const ping = `version: 1
package: shopmsg
messages:
  Ping:
    versions:
      1:
        fields:
`

// TestBreakingIntegerSizes compares integer types whose ranges bound their
// fields where the schema does not.
func TestBreakingIntegerSizes(t *testing.T) {
	const src = ping + "          n: {type: TYPE, required: true}\n"
	for _, tc := range []struct {
		from, to string
		want     []string // CATEGORY RULE: message
	}{
		{"int32", "integer", []string{
			"API FIELD-GO-TYPE-CHANGED: Go field N changes type from int32 to int64",
			"PRODUCER BOUND-WIDENED: Ping.v1.n widens its bounds from -2147483648..2147483647 to none: consumers on the old schema reject the values it newly allows",
		}},
		{"int32", "int8", []string{
			"API FIELD-GO-TYPE-CHANGED: Go field N changes type from int32 to int8",
			"INFLIGHT BOUND-NARROWED: Ping.v1.n narrows its bounds from -2147483648..2147483647 to -128..127: messages already queued, and producers on the old schema, may break it",
		}},
		{"int8", "uint8", []string{
			"API FIELD-GO-TYPE-CHANGED: Go field N changes type from int8 to uint8",
			"INFLIGHT BOUND-NARROWED: Ping.v1.n narrows its bounds from -128..127 to 0..255: messages already queued, and producers on the old schema, may break it",
			"PRODUCER BOUND-WIDENED: Ping.v1.n widens its bounds from -128..127 to 0..255: consumers on the old schema reject the values it newly allows",
		}},
		{"uint16", "string", []string{
			"API FIELD-GO-TYPE-CHANGED: Go field N changes type from uint16 to string",
			"WIRE FIELD-TYPE-CHANGED: Ping.v1.n changes type from uint16 to string",
		}},
	} {
		old := parse(t, "old.lily.yaml", strings.Replace(src, "TYPE", tc.from, 1))
		new := parse(t, "new.lily.yaml", strings.Replace(src, "TYPE", tc.to, 1))
		found := Breaking(old, new)
		Sort(found)
		var got []string
		for _, f := range found {
			got = append(got, string(f.Category)+" "+f.Rule+": "+f.Message)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s → %s (-want +got):\n%s", tc.from, tc.to, diff)
		}
	}
}

func TestBreakingPlacesFindingsInTheNewFile(t *testing.T) {
	old := parse(t, "old.lily.yaml", base)
	new := parse(t, "new.lily.yaml", edit(t, "min: 1, max: 1000", "min: 2, max: 1000"))
	found := Breaking(old, new)
	if len(found) != 1 || found[0].Line != 9 || found[0].Column != 11 {
		t.Errorf("want one finding at the amount key, 9:11; got %+v", found)
	}
}

// A narrowed binding is placed at the binding that changed, not at another
// from the same exchange that did not.
func TestBreakingPlacesANarrowedBindingAtTheChange(t *testing.T) {
	bound := edit(t, "queues:", "exchanges:\n  tx: {type: topic}\nqueues:", "    max_body_bytes", "    bindings:\n      - {exchange: tx, routing_key: a.b}\n      - {exchange: tx, routing_key: c.d}\n    max_body_bytes")
	found := Breaking(parse(t, "old.lily.yaml", bound), parse(t, "new.lily.yaml", strings.Replace(bound, "c.d", "c.e", 1)))
	line := strings.Count(bound[:strings.Index(bound, "c.d")], "\n") + 1
	if len(found) != 1 || found[0].Rule != "ROUTING-KEY-NARROWED" || found[0].Line != line {
		t.Errorf("want one ROUTING-KEY-NARROWED at line %d, the changed binding; got %+v", line, found)
	}
}

func TestAcknowledged(t *testing.T) {
	f := Finding{Rule: "DLQ-CHANGED", Subject: "orders"}
	for _, tc := range []struct {
		acks []string
		want bool
	}{
		{nil, false},
		{[]string{"DLQ-CHANGED"}, true},
		{[]string{"DLQ-CHANGED@orders"}, true},
		{[]string{"DLQ-CHANGED@billing"}, false},
		{[]string{"QUEUE-TYPE-CHANGED@orders"}, false},
	} {
		if got := f.Acknowledged(tc.acks); got != tc.want {
			t.Errorf("Acknowledged(%q) = %v", tc.acks, got)
		}
	}
}

func TestBreakingReplaysExamples(t *testing.T) {
	const src = ping + `          id: {type: string, required: true, max_length: MAX}
        examples:
          - body: {id: EXAMPLE}
`
	old := parse(t, "old.lily.yaml", strings.NewReplacer("MAX", "10", "EXAMPLE", "abcdefgh").Replace(src))
	new := parse(t, "new.lily.yaml", strings.NewReplacer("MAX", "5", "EXAMPLE", "abc").Replace(src))
	var got []string
	for _, f := range Breaking(old, new) {
		got = append(got, f.Ack()+": "+f.Message)
	}
	want := []string{
		"BOUND-NARROWED@Ping.v1.id: Ping.v1.id narrows its bounds from ..10 characters to ..5 characters: messages already queued, and producers on the old schema, may break it",
		"EXAMPLE-REJECTED@Ping.v1.examples.1: example 1 of the old Ping.v1 (line 10 there) fails the new schema: field id: longer than 5 characters",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
}

// An example replayed against the other schema is refused in the words of
// a schema error: at most 20 of an enum's values, then how many more, and
// a long pattern shortened. Check's words, the extractor's, quoted every
// value, and the whole pattern, in each finding.
func TestBreakingReplayQuotesBriefly(t *testing.T) {
	values := make([]string, 100)
	for i := range values {
		values[i] = fmt.Sprintf("v%03d%s", i, strings.Repeat("x", 246))
	}
	pattern := "^(" + strings.Join(values, "|") + ")$"
	const src = ping + `          e: {type: enum, values: [VALUES]}
          s: {type: string, PATTERN}
        examples:
          - body: {e: EXAMPLE, s: STRING}
`
	old := parse(t, "old.lily.yaml", strings.NewReplacer("VALUES", strings.Join(values, ", "), "PATTERN", "pattern: '"+pattern+"'", "EXAMPLE", values[0], "STRING", values[0]).Replace(src))
	new := parse(t, "new.lily.yaml", strings.NewReplacer("VALUES", strings.Join(values[1:], ", "), "PATTERN", "max_length: 10", "EXAMPLE", values[1], "STRING", "nope").Replace(src))
	var got []string
	for _, f := range Breaking(old, new) {
		if strings.HasPrefix(f.Rule, "EXAMPLE-REJECTED") {
			got = append(got, f.Ack()+": "+f.Message)
		}
	}
	short := func(s string) string { return s[:37] + "..." }
	first := make([]string, 20)
	for i := range first {
		first[i] = short(values[i+1])
	}
	want := []string{
		"EXAMPLE-REJECTED@Ping.v1.examples.1: example 1 of the old Ping.v1 (line 11 there) fails the new schema: field e: not one of " + strings.Join(first, ", ") + " and 79 more",
		"EXAMPLE-REJECTED-BY-OLD@Ping.v1.examples.1: example 1 of Ping.v1 fails the old schema: field s: does not match " + short(pattern),
	}
	if !slices.Equal(got, want) {
		t.Errorf("findings, %d bytes:\n%.1000q\nwant %d bytes:\n%q", len(strings.Join(got, "")), got, len(strings.Join(want, "")), want)
	}
}

// enumOf parses a version whose field e is an enum of values.
func enumOf(t *testing.T, name string, values []string) *schema.File {
	t.Helper()
	return parse(t, name, ping+"          e: {type: enum, values: ["+strings.Join(values, ", ")+"]}\n")
}

// enumValues are n enum values, v0000 on.
func enumValues(n int) []string {
	v := make([]string, n)
	for i := range v {
		v[i] = fmt.Sprintf("v%04d", i)
	}
	return v
}

// Comparing two revisions of an enum costs about what its values take to
// read: the Go name of each old value was built again for each new one, so
// that an enum of 1,000 values took seconds.
func TestBreakingEnumCostsItsValues(t *testing.T) {
	allocs := func(n int) float64 {
		old, new := enumOf(t, "old.lily.yaml", enumValues(n)), enumOf(t, "new.lily.yaml", enumValues(n)[:n-1])
		return testing.AllocsPerRun(1, func() { Breaking(old, new) })
	}
	const n = 250
	if perValue := (allocs(2*n) - allocs(n)) / n; perValue > 50 {
		t.Errorf("%.0f allocations for each value of the enum, want at most 50", perValue)
	}
}

// The constants an enum drops are named as a hint names things: at most
// 20, then how many more. The finding named each of them, and an enum may
// hold 1,000 values.
func TestBreakingEnumConstantsListedBriefly(t *testing.T) {
	old := enumOf(t, "old.lily.yaml", enumValues(1000))
	new := enumOf(t, "new.lily.yaml", []string{"x"})
	var got []string
	for _, f := range Breaking(old, new) {
		if f.Rule == "ENUM-CONSTANT-REMOVED" {
			got = append(got, f.Message)
		}
	}
	first := make([]string, 20)
	for i, v := range enumValues(20) {
		first[i] = "PingV1E" + schema.GoName(v)
	}
	want := []string{"the generated constants " + strings.Join(first, ", ") + " and 980 more of PingV1E are removed with their values"}
	if !slices.Equal(got, want) {
		t.Errorf("findings, %d bytes:\n%.500q\nwant %d bytes:\n%q", len(strings.Join(got, "")), got, len(strings.Join(want, "")), want)
	}
}

// The values an enum's findings of its bounds quote are listed as the
// constants it drops are: at most 20, then how many more, each shortened as
// a hint shortens a name. The findings quoted every value, whole, of both
// revisions, and an enum may hold 1,000 values of 256 bytes.
func TestBreakingEnumValuesListedBriefly(t *testing.T) {
	values := make([]string, 1000)
	for i := range values {
		values[i] = fmt.Sprintf("v%04d%s", i, strings.Repeat("x", 251))
	}
	old := enumOf(t, "old.lily.yaml", values)
	new := enumOf(t, "new.lily.yaml", append([]string{"x"}, values[500:]...))
	var got []string
	for _, f := range Breaking(old, new) {
		if strings.HasPrefix(f.Rule, "BOUND-") {
			got = append(got, f.Message)
		}
	}
	shortened := func(values []string) string {
		short := make([]string, len(values))
		for i, v := range values {
			short[i] = v[:37] + "..."
		}
		return strings.Join(short, ", ")
	}
	from := shortened(values[:20]) + " and 980 more"
	to := "x, " + shortened(values[500:519]) + " and 481 more"
	want := []string{
		"Ping.v1.e narrows its values from " + from + " to " + to + ": messages already queued, and producers on the old schema, may break it",
		"Ping.v1.e widens its values from " + from + " to " + to + ": consumers on the old schema reject the values it newly allows",
	}
	if !slices.Equal(got, want) {
		t.Errorf("findings, %d bytes:\n%.500q\nwant %d bytes:\n%q", len(strings.Join(got, "")), got, len(strings.Join(want, "")), want)
	}
}

// A pattern and a string default a finding quotes are shortened as an
// enum's values are, the cut outside the quotes, between characters: the
// findings quoted both revisions whole, and a pattern of 200,000 characters
// made a finding of 600 KB (one GitHub annotation line of 200 KB).
func TestBreakingPatternAndDefaultQuotedBriefly(t *testing.T) {
	long := func(c string) string { return "^a" + strings.Repeat("é", 20) + strings.Repeat(c, 200_000) + "$" }
	const src = ping + "          p: {type: string, pattern: 'PATTERN'}\n          d: {type: string, default: 'DEFAULT'}\n"
	old := parse(t, "old.lily.yaml", strings.NewReplacer("PATTERN", long("a"), "DEFAULT", long("a")).Replace(src))
	new := parse(t, "new.lily.yaml", strings.NewReplacer("PATTERN", long("b"), "DEFAULT", "short").Replace(src))
	var got []string
	for _, f := range Breaking(old, new) {
		got = append(got, f.Message)
	}
	// 36 bytes: é is two, and the 37th byte, within maxQuoted with the
	// marker, begins one.
	cut := `"^a` + strings.Repeat("é", 17) + `"...`
	want := []string{
		"Ping.v1.p narrows its pattern from " + cut + " to " + cut + ": messages already queued, and producers on the old schema, may break it",
		"Ping.v1.p widens its pattern from " + cut + " to " + cut + ": consumers on the old schema reject the values it newly allows",
		"Ping.v1.d changes its default from " + cut + ` to "short": messages already queued without it read differently`,
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("findings, %d bytes:\n%.1000q\nwant %d bytes:\n%q", len(strings.Join(got, "")), got, len(strings.Join(want, "")), want)
	}
}

// TestRenamedComparesEveryField sets each field of a version, and of a
// field, in one of two copies: the copies must differ unless the field is
// one that follows the message's name or place. A field added to the schema
// model fails here until renamed's comparison knows of it.
func TestRenamedComparesEveryField(t *testing.T) {
	for _, tc := range []struct {
		typ     reflect.Type
		same    func(a, b reflect.Value) bool
		ignored []string
	}{
		{reflect.TypeFor[schema.Version](), func(a, b reflect.Value) bool {
			return sameVersion(a.Addr().Interface().(*schema.Version), b.Addr().Interface().(*schema.Version))
		}, []string{"GoName", "HeadersName", "Pos", "Examples"}},
		{reflect.TypeFor[schema.Field](), func(a, b reflect.Value) bool {
			return sameField(a.Addr().Interface().(*schema.Field), b.Addr().Interface().(*schema.Field))
		}, []string{"GoPath", "Pos"}},
	} {
		for i := range tc.typ.NumField() {
			name := tc.typ.Field(i).Name
			a, b := reflect.New(tc.typ).Elem(), reflect.New(tc.typ).Elem()
			setNonZero(b.Field(i))
			if got, want := tc.same(a, b), slices.Contains(tc.ignored, name); got != want {
				t.Errorf("%s differing only in %s: same = %v, want %v", tc.typ.Name(), name, got, want)
			}
		}
	}
}

// setNonZero sets v to a value other than its zero value; a struct has its
// first field set.
func setNonZero(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(1)
	case reflect.Float64:
		v.SetFloat(1)
	case reflect.Interface:
		v.Set(reflect.ValueOf("x"))
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		setNonZero(p.Elem())
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		setNonZero(s.Index(0))
		v.Set(s)
	case reflect.Struct:
		setNonZero(v.Field(0))
	default:
		panic("setNonZero: no value for " + v.Type().String())
	}
}

// A retry bucket new to a queue whose Lily arguments come from policies is
// declared with its type alone: its TTL and its dead-lettering back to the
// queue are its policy's, which must be applied before the runtime sends
// it anything, or what it gets stays there. A bucket dropped, or one of an
// owned queue's, declares all it needs.
func TestBreakingPolicyQueueAsksForPoliciesForANewBucket(t *testing.T) {
	noRetry := []string{"    retry:\n      delays: [1s, 5s]\n", ""}
	for _, mode := range []string{"lily_arguments: policy", "ownership: external"} {
		t.Run(mode, func(t *testing.T) {
			policy := []string{"    max_body_bytes", "    " + mode + "\n    max_body_bytes"}
			old := parse(t, "old.lily.yaml", edit(t, policy...))
			for _, tc := range []struct {
				name       string
				old, edits []string
				buckets    string // those the finding names, or none
			}{
				{"delays changed", nil, []string{"[1s, 5s]", "[2s, 5s, 1m]"}, "orders.retry.2s, orders.retry.1m0s"},
				{"retries added", noRetry, nil, "orders.retry.1s, orders.retry.5s"},
				{"a delay dropped", nil, []string{"[1s, 5s]", "[5s]"}, ""},
			} {
				o := old
				if tc.old != nil {
					o = parse(t, "old.lily.yaml", edit(t, append(policy, tc.old...)...))
				}
				new := parse(t, "new.lily.yaml", edit(t, append(policy, tc.edits...)...))
				var got []string
				for _, f := range Breaking(o, new) {
					got = append(got, f.Ack())
					if !strings.Contains(f.Message, tc.buckets) || !strings.Contains(f.Migration, "apply the policies lilygen topology writes before deploying") {
						t.Errorf("%s: %s (%s); want %s named and the policies applied first", tc.name, f.Message, f.Migration, tc.buckets)
					}
				}
				if want := []string{"RETRY-BUCKET-ADDED@orders"}; tc.buckets == "" && got != nil || tc.buckets != "" && !slices.Equal(got, want) {
					t.Errorf("%s: %v", tc.name, got)
				}
				changes := strings.Join(Changes(o, new), "\n")
				if tc.buckets != "" && !strings.Contains(changes, "apply the policies lilygen topology writes before deploying") {
					t.Errorf("%s: doc --against's changes say nothing of the policies:\n%s", tc.name, changes)
				}
			}
		})
	}
	// An owned queue declares its buckets whole.
	if found := Breaking(parse(t, "old.lily.yaml", base), parse(t, "new.lily.yaml", edit(t, "[1s, 5s]", "[2s]"))); len(found) != 0 {
		t.Errorf("owned queue: %v", acksOf(found))
	}
}

// A queue whose Lily arguments come from policies (its own, or another
// team's) takes its DLQ and delivery limit from them: a change needs the
// policies applied again, not a redeclare RabbitMQ would refuse, and never
// deleting a queue that is another team's.
func TestBreakingPolicyQueueAsksForPolicies(t *testing.T) {
	for _, mode := range []string{"lily_arguments: policy", "ownership: external"} {
		t.Run(mode, func(t *testing.T) {
			policy := "    type: quorum\n    " + mode + "\n    max_body_bytes"
			old := parse(t, "old.lily.yaml", edit(t, "    max_body_bytes", policy))
			new := parse(t, "new.lily.yaml", edit(t, "    max_body_bytes", "    dlq: orders.dead\n    delivery_limit: 5\n"+policy))
			found := map[string]Finding{}
			for _, f := range Breaking(old, new) {
				found[f.Rule] = f
			}
			for _, rule := range []string{"DLQ-CHANGED", "DELIVERY-LIMIT-CHANGED"} {
				f, ok := found[rule]
				if !ok {
					t.Errorf("%s not reported: %v", rule, found)
					continue
				}
				if strings.Contains(f.Message, "406") || strings.Contains(f.Migration, "delete the queue") || !strings.Contains(f.Migration, "policies") {
					t.Errorf("%s: %s (%s); want the policies applied again, no redeclare", rule, f.Message, f.Migration)
				}
			}
		})
	}
	// Another team's queue whose type the schema now reads otherwise: only
	// Lily's own retry buckets and DLQ are to be remade.
	external := "    ownership: external\n    max_body_bytes"
	old := parse(t, "old.lily.yaml", edit(t, "    max_body_bytes", external))
	new := parse(t, "new.lily.yaml", edit(t, "    max_body_bytes", "    type: quorum\n"+external))
	i := slices.IndexFunc(Breaking(old, new), func(f Finding) bool { return f.Rule == "QUEUE-TYPE-CHANGED" })
	if i < 0 {
		t.Fatal("QUEUE-TYPE-CHANGED not reported for an external queue")
	}
	if f := Breaking(old, new)[i]; strings.Contains(f.Migration, "drain the queue") || !strings.Contains(f.Migration, "its owner's") {
		t.Errorf("%s: %s", f.Message, f.Migration)
	}
}

// A shared type used along many paths is compared once, its findings named
// by the type: comparing it again for every path that reaches it took time
// exponential in how deeply shared types nest (two fields of T1 in T0, two
// of T2 in T1, ...), and printed each finding once per path.
func TestBreakingComparesASharedTypeOnce(t *testing.T) {
	schemaOf := func(leafMax int) string {
		var b strings.Builder
		b.WriteString("version: 1\npackage: x\ntypes:\n")
		const depth = 30
		for i := range depth {
			fmt.Fprintf(&b, "  T%d: {type: object, fields: {a: {type: T%d, required: true}, b: {type: T%d}}}\n", i, i+1, i+1)
		}
		fmt.Fprintf(&b, "  T%d: {type: object, fields: {n: {type: string, max_length: %d}}}\n", depth, leafMax)
		b.WriteString("messages:\n  A: {versions: {1: {fields: {root: {type: T0, required: true}}}}}\n")
		return b.String()
	}
	old := parse(t, "old.lily.yaml", schemaOf(10))
	new := parse(t, "new.lily.yaml", schemaOf(5))
	if found := Breaking(old, old); len(found) != 0 {
		t.Errorf("a schema against itself: %v", found)
	}
	var narrowed []string
	for _, f := range Breaking(old, new) {
		if f.Rule == "BOUND-NARROWED" {
			narrowed = append(narrowed, f.Subject)
		}
	}
	if len(narrowed) != 1 || narrowed[0] != "T30.n" {
		t.Errorf("narrowed %d times (%.3q); want once, as T30.n", len(narrowed), narrowed)
	}
}

// A quorum queue that dead-letters declares reject-publish overflow itself:
// a team's overflow of reject-publish there changes no declaration, unless
// Lily's arguments go by policy, where the declaration gains it, as a
// classic queue's does.
func TestBreakingOverflowAsDeclared(t *testing.T) {
	classic := edit(t, "    max_body_bytes", "    arguments: {max_length: 100}\n    max_body_bytes")
	quorum := strings.Replace(classic, "    consumes:\n      - message", "    type: quorum\n    consumes:\n      - message", 1)
	overflow := func(src, o string) string {
		return strings.Replace(src, "{max_length: 100}", "{max_length: 100, overflow: "+o+"}", 1)
	}
	byPolicy := strings.Replace(quorum, "    arguments:", "    lily_arguments: policy\n    arguments:", 1)
	for _, c := range []struct {
		name, old, new string
		want           []string
	}{
		{"declared by Lily already", quorum, overflow(quorum, "reject-publish"), nil},
		{"a classic queue's", classic, overflow(classic, "reject-publish-dlx"), []string{"OVERFLOW-CHANGED@orders"}},
		{"by policy", byPolicy, overflow(byPolicy, "reject-publish"), []string{"OVERFLOW-CHANGED@orders"}},
	} {
		got := acksOf(Breaking(parse(t, "old.lily.yaml", c.old), parse(t, "new.lily.yaml", c.new)))
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
}

// An integer's own range written as its bounds changes nothing: a limit left
// out is the least or most its type holds.
func TestBreakingIntegerRangeWrittenOut(t *testing.T) {
	src := "version: 1\npackage: p\nmessages:\n  M:\n    versions:\n      1:\n        fields:\n          n: {type: integer}\n          s: {type: int8}\n"
	written := strings.NewReplacer("n: {type: integer}", "n: {type: integer, min: -9223372036854775808, max: 9223372036854775807}",
		"s: {type: int8}", "s: {type: int8, min: -128, max: 127}").Replace(src)
	if got := findingKeys(parse(t, "old.lily.yaml", src), parse(t, "new.lily.yaml", written)); len(got) != 0 {
		t.Errorf("findings %q, want none", got)
	}
}
