package review

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/lily-mq/lily/schema"
)

// A binding that takes messages its exchange routed nowhere before takes
// them from the queues behind the exchange's alternate exchange.
func TestBreakingAlternateDiverted(t *testing.T) {
	const exchanges = `
exchanges:
  unrouted: {type: fanout, ownership: owned}
  fan: {type: fanout, ownership: owned, alternate_exchange: unrouted}
  tx: {type: topic, ownership: owned, alternate_exchange: unrouted}
  hx: {type: headers, ownership: owned, alternate_exchange: unrouted}
`
	queue := func(name, bindings string) string {
		return "  " + name + ":\n    consumes: [{message: OrderPlaced, versions: [1]}]\n    bindings: " + bindings + "\n"
	}
	lost := queue("orders.unrouted", "[{exchange: unrouted}]")
	for _, tc := range []struct {
		name     string
		old, new string // the queues
		want     []string
	}{
		{"a first binding to a fanout exchange", lost, lost + queue("audit", "[{exchange: fan}]"),
			[]string{"ALTERNATE-DIVERTED@audit<-fan"}},
		{"another binding to a fanout exchange", lost + queue("billing", "[{exchange: fan}]"), lost + queue("billing", "[{exchange: fan}]") + queue("audit", "[{exchange: fan}]"),
			nil},
		{"a topic binding with another key", lost + queue("billing", "[{exchange: tx, routing_key: order.eu.#}]"),
			lost + queue("billing", "[{exchange: tx, routing_key: order.eu.#}]") + queue("audit", "[{exchange: tx, routing_key: order.us.#}]"),
			[]string{"ALTERNATE-DIVERTED@audit<-tx/order.us.#"}},
		{"a topic binding within the old", lost + queue("billing", "[{exchange: tx, routing_key: order.eu.#}]"),
			lost + queue("billing", "[{exchange: tx, routing_key: order.eu.#}]") + queue("audit", "[{exchange: tx, routing_key: order.eu.x}]"),
			nil},
		{"a topic binding widened", lost + queue("billing", "[{exchange: tx, routing_key: order.eu.#}]"), lost + queue("billing", "[{exchange: tx, routing_key: order.#}]"),
			[]string{"ALTERNATE-DIVERTED@billing<-tx/order.#"}},
		{"a binding moved to another queue", lost + queue("billing", "[{exchange: tx, routing_key: order.#}]"),
			lost + queue("billing", "[]") + queue("audit", "[{exchange: tx, routing_key: order.#}]"),
			[]string{"BINDING-REMOVED@billing<-tx/order.#"}},
		{"a headers binding the old ones match together", lost + queue("billing", "[{exchange: hx, match: any, headers: {a: 1}}, {exchange: hx, match: any, headers: {b: 2}}]"),
			lost + queue("billing", "[{exchange: hx, match: any, headers: {a: 1}}, {exchange: hx, match: any, headers: {b: 2}}]") + queue("audit", "[{exchange: hx, match: any, headers: {a: 1, b: 2}}]"),
			nil},
		{"a headers binding on another header", lost + queue("billing", "[{exchange: hx, headers: {a: 1}}]"),
			lost + queue("billing", "[{exchange: hx, headers: {a: 1}}]") + queue("audit", "[{exchange: hx, headers: {c: 3}}]"),
			[]string{`ALTERNATE-DIVERTED@audit<-hx/all{"c":3}`}},
		// What the binding takes still reaches the one queue behind the
		// alternate exchange.
		{"a binding of the queue behind the alternate", lost, queue("orders.unrouted", "[{exchange: unrouted}, {exchange: fan}]"),
			nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := withExchanges(t, exchanges, tc.old, tc.new); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// Only what the alternate exchange's own bindings take from what the
// binding diverts is lost, and nothing is to queues the binding still
// brings it to.
func TestBreakingAlternateBindings(t *testing.T) {
	const exchanges = `
exchanges:
  unrouted: {type: direct, ownership: owned}
  events: {type: direct, ownership: owned, alternate_exchange: unrouted}
  t.unrouted: {type: topic, ownership: owned}
  tx: {type: topic, ownership: owned, alternate_exchange: t.unrouted}
  tdx: {type: topic, ownership: owned, alternate_exchange: unrouted}
  h.unrouted: {type: headers, ownership: owned}
  hx: {type: headers, ownership: owned, alternate_exchange: h.unrouted}
`
	queue := func(name, bindings string) string {
		return "  " + name + ":\n    consumes: [{message: OrderPlaced, versions: [1]}]\n    bindings: " + bindings + "\n"
	}
	for _, tc := range []struct {
		name     string
		old, new string // the queues
		want     []string
	}{
		{"a direct key the alternate does not route", queue("lost", "[{exchange: unrouted, routing_key: x}]"),
			queue("lost", "[{exchange: unrouted, routing_key: x}]") + queue("audit", "[{exchange: events, routing_key: y}]"),
			nil},
		{"a direct key the alternate routes", queue("lost", "[{exchange: unrouted, routing_key: x}]"),
			queue("lost", "[{exchange: unrouted, routing_key: x}]") + queue("audit", "[{exchange: events, routing_key: x}]"),
			[]string{"ALTERNATE-DIVERTED@audit<-events/x"}},
		{"a topic pattern the alternate's does not meet", queue("lost", "[{exchange: t.unrouted, routing_key: invoice.#}]"),
			queue("lost", "[{exchange: t.unrouted, routing_key: invoice.#}]") + queue("audit", "[{exchange: tx, routing_key: order.#}]"),
			nil},
		{"a topic pattern the alternate's meets", queue("lost", "[{exchange: t.unrouted, routing_key: '#.eu'}]"),
			queue("lost", "[{exchange: t.unrouted, routing_key: '#.eu'}]") + queue("audit", "[{exchange: tx, routing_key: order.#}]"),
			[]string{"ALTERNATE-DIVERTED@audit<-tx/order.#"}},
		// What the alternate's binding takes of the new one's, the
		// exchange routed before.
		{"a topic pattern the alternate's meets where routed before",
			queue("lost", "[{exchange: t.unrouted, routing_key: order.eu.x}]") + queue("billing", "[{exchange: tx, routing_key: order.eu.*}]"),
			queue("lost", "[{exchange: t.unrouted, routing_key: order.eu.x}]") + queue("billing", "[{exchange: tx, routing_key: order.eu.*}]") + queue("audit", "[{exchange: tx, routing_key: order.#}]"),
			nil},
		{"a topic pattern and a direct key it does not match", queue("lost", "[{exchange: unrouted, routing_key: invoice.eu}]"),
			queue("lost", "[{exchange: unrouted, routing_key: invoice.eu}]") + queue("audit", "[{exchange: tdx, routing_key: order.#}]"),
			nil},
		{"a topic pattern and a direct key it matches", queue("lost", "[{exchange: unrouted, routing_key: order.eu}]"),
			queue("lost", "[{exchange: unrouted, routing_key: order.eu}]") + queue("audit", "[{exchange: tdx, routing_key: order.#}]"),
			[]string{"ALTERNATE-DIVERTED@audit<-tdx/order.#"}},
		{"headers the alternate's cannot hold too",
			queue("lost", "[{exchange: h.unrouted, headers: {region: eu}}]"),
			queue("lost", "[{exchange: h.unrouted, headers: {region: eu}}]") + queue("audit", "[{exchange: hx, headers: {region: us}}]"),
			nil},
		{"headers the alternate's match where routed before",
			queue("lost", "[{exchange: h.unrouted, headers: {region: eu}}]") + queue("billing", "[{exchange: hx, headers: {region: eu}}]"),
			queue("lost", "[{exchange: h.unrouted, headers: {region: eu}}]") + queue("billing", "[{exchange: hx, headers: {region: eu}}]") + queue("audit", "[{exchange: hx, match: any, headers: {region: eu, tier: 2}}]"),
			nil},
		{"headers the alternate's match",
			queue("lost", "[{exchange: h.unrouted, headers: {region: eu}}]") + queue("billing", "[{exchange: hx, headers: {tier: 1}}]"),
			queue("lost", "[{exchange: h.unrouted, headers: {region: eu}}]") + queue("billing", "[{exchange: hx, headers: {tier: 1}}]") + queue("audit", "[{exchange: hx, match: any, headers: {region: eu, tier: 2}}]"),
			[]string{`ALTERNATE-DIVERTED@audit<-hx/any{"region":"eu","tier":2}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := withExchanges(t, exchanges, tc.old, tc.new); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// A binding that brings what it takes to the alternate exchange, or
// through fanout exchanges to a queue behind it, takes nothing from them.
func TestBreakingAlternateStillReached(t *testing.T) {
	const old = `exchanges:
  unrouted: {type: direct, ownership: owned}
  events: {type: direct, ownership: owned, alternate_exchange: unrouted}
  fan: {type: fanout, ownership: owned}
  fan2: {type: fanout, ownership: owned, bindings: [{exchange: fan}]}
  direct: {type: direct, ownership: owned, bindings: [{exchange: fan}]}
queues:
  lost:
    consumes: [{message: OrderPlaced, versions: [1]}]
    bindings: [{exchange: unrouted, routing_key: x}, {exchange: fan}]
  other:
    consumes: [{message: OrderPlaced, versions: [1]}]
    bindings: [{exchange: unrouted, routing_key: x}, {exchange: fan2}]
  third:
    consumes: [{message: OrderPlaced, versions: [1]}]
    bindings: [{exchange: unrouted, routing_key: x}, {exchange: direct, routing_key: x}]
`
	for _, tc := range []struct {
		name, exchange string // the name of the exchange bound to events by key x
		want           []string
	}{
		{"a binding of the alternate exchange", "unrouted", nil},
		// Lily does not follow the keys of the exchanges past the first.
		{"a binding of a fanout exchange", "fan", []string{`ALTERNATE-DIVERTED@exchange:fan<-events/x: queue "third"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line := "  " + tc.exchange + ": {type: "
			i := strings.Index(old, line)
			end := i + strings.Index(old[i:], "}")
			bound := old[:end] + ", bindings: [{exchange: events, routing_key: x}]" + old[end:]
			if strings.Contains(old[i:end], "bindings") {
				t.Fatalf("%s is bound already", tc.exchange)
			}
			var got []string
			for _, f := range Breaking(parse(t, "old.lily.yaml", edit(t, "queues:\n", old)), parse(t, "new.lily.yaml", edit(t, "queues:\n", bound))) {
				_, losing, _ := strings.Cut(f.Message, "no longer reach ")
				got = append(got, f.Ack()+": "+losing)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// The queues behind an alternate exchange are those bound to it, or to an
// exchange it feeds or falls back on, and so on.
func TestDownstream(t *testing.T) {
	f := parse(t, "new.lily.yaml", edit(t, "queues:\n", `exchanges:
  other: {type: fanout, ownership: owned}
  unrouted: {type: fanout, ownership: owned}
  fed:
    type: topic
    ownership: owned
    alternate_exchange: last
    bindings: [{exchange: unrouted}]
  last: {type: fanout, ownership: owned, alternate_exchange: unrouted}
queues:
  q1:
    consumes: [{message: OrderPlaced, versions: [1]}]
    bindings: [{exchange: last}]
  q2:
    consumes: [{message: OrderPlaced, versions: [1]}]
    bindings: [{exchange: other}]
  q3:
    consumes: [{message: OrderPlaced, versions: [1]}]
    bindings: [{exchange: fed, routing_key: a.#}, {exchange: unrouted}]
`))
	if got, want := newGraph(f).downstream("unrouted"), []string{"q1", "q3"}; !slices.Equal(got, want) {
		t.Errorf("downstream = %q, want %q", got, want)
	}
	if got, want := queueList([]string{"q1", "q2", "q3"}), `queues "q1", "q2" and "q3"`; got != want {
		t.Errorf("queueList = %s, want %s", got, want)
	}
}

// unroutedHead begins the generated schemas of many exchanges: one message,
// and the fanout exchange unrouted that their alternates name.
const unroutedHead = `version: 1
package: x
messages:
  M: {type: m.1, versions: {1: {fields: {id: {type: string, max_length: 8}}}}}
exchanges:
  unrouted: {type: fanout, ownership: owned}
`

// manyAlternates parses a schema of n direct exchanges, each with an
// alternate exchange and a queue bound by key k, and, if extra, a queue
// bound to the first by key k2, which takes what went to the alternate.
func manyAlternates(tb testing.TB, n int, extra bool) *schema.File {
	tb.Helper()
	var s strings.Builder
	s.WriteString(unroutedHead)
	for i := range n {
		fmt.Fprintf(&s, "  x%d: {type: direct, ownership: owned, alternate_exchange: unrouted}\n", i)
	}
	s.WriteString("queues:\n  lost: {consumes: [{message: M}], bindings: [{exchange: unrouted}]}\n")
	for i := range n {
		fmt.Fprintf(&s, "  q%d: {consumes: [{message: M}], bindings: [{exchange: x%d, routing_key: k}]}\n", i, i)
	}
	if extra {
		s.WriteString("  extra: {consumes: [{message: M}], bindings: [{exchange: x0, routing_key: k2}]}\n")
	}
	f, err := schema.Parse("s.lily.yaml", []byte(s.String()))
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// Breaking looks at each exchange with an alternate, and at each of its
// bindings, once: four times the exchanges cost it about four times the
// memory, not sixteen.
func TestBreakingAlternatesScale(t *testing.T) {
	allocated := func(n int) uint64 {
		old, new := manyAlternates(t, n, false), manyAlternates(t, n, true)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		got := Breaking(old, new)
		runtime.ReadMemStats(&after)
		if len(got) != 1 || got[0].Ack() != "ALTERNATE-DIVERTED@extra<-x0/k2" {
			t.Fatalf("got %v, want one ALTERNATE-DIVERTED", got)
		}
		return after.TotalAlloc - before.TotalAlloc
	}
	if small, large := allocated(250), allocated(1000); large > 8*small {
		t.Errorf("breaking allocates %d bytes for 250 exchanges and %d for 1,000", small, large)
	}
}

// withExchanges is what Breaking finds, as RULE@SUBJECT, between the test
// schema with exchanges and the queues old, and with exchanges and new.
func withExchanges(t *testing.T, exchanges, old, new string) []string {
	t.Helper()
	before := parse(t, "old.lily.yaml", edit(t, "queues:\n", exchanges+"queues:\n"+old))
	after := parse(t, "new.lily.yaml", edit(t, "queues:\n", exchanges+"queues:\n"+new))
	return acksOf(Breaking(before, after))
}
