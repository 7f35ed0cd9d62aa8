package review

import (
	"slices"
	"testing"
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
			old := parse(t, "old.lily.yaml", edit(t, "queues:\n", exchanges+"queues:\n"+tc.old))
			new := parse(t, "new.lily.yaml", edit(t, "queues:\n", exchanges+"queues:\n"+tc.new))
			var got []string
			for _, f := range Breaking(old, new) {
				got = append(got, f.Ack())
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
	if got, want := downstream(f, "unrouted"), []string{"q1", "q3"}; !slices.Equal(got, want) {
		t.Errorf("downstream = %q, want %q", got, want)
	}
	if got, want := queueList([]string{"q1", "q2", "q3"}), `queues "q1", "q2" and "q3"`; got != want {
		t.Errorf("queueList = %s, want %s", got, want)
	}
}
