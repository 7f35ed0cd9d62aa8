package schema

import (
	"fmt"
	"strings"
	"testing"
)

// manyEntities is a schema of n messages, each with a type of its own,
// consumed by a queue of its own in an envelope of its own, bound to an
// exchange of its own, and published there: big enough that checking each
// entity against every other one would show.
func manyEntities(n int) []byte {
	var b strings.Builder
	b.WriteString("version: 1\npackage: x\nenvelopes:\n")
	for i := range n {
		fmt.Fprintf(&b, "  e%d: {kind: headers, type: {header: t}}\n", i)
	}
	b.WriteString("messages:\n")
	for i := range n {
		fmt.Fprintf(&b, "  M%d: {type: m.%d, publish: {exchange: x%d, routing_key: k}, versions: {1: {}}}\n", i, i, i)
	}
	b.WriteString("exchanges:\n")
	for i := range n {
		fmt.Fprintf(&b, "  x%d: {type: direct}\n", i)
	}
	b.WriteString("queues:\n")
	for i := range n {
		fmt.Fprintf(&b, "  q%d: {envelope: e%d, consumes: [{message: M%d}], bindings: [{exchange: x%d, routing_key: k}]}\n", i, i, i, i)
	}
	return []byte(b.String())
}

func BenchmarkParseManyEntities(b *testing.B) {
	src := manyEntities(10_000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("s.yaml", src); err != nil {
			b.Fatal(err)
		}
	}
}
