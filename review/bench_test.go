package review

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/schema"
)

// manyEntities parses a schema of n messages, each with a shared type of
// its own, consumed by a queue of its own, bound to an exchange of its own,
// and published there: big enough that looking each entity up among all the
// others would show.
func manyEntities(b *testing.B, n int) *schema.File {
	b.Helper()
	var s strings.Builder
	s.WriteString("version: 1\npackage: x\ntypes:\n")
	for i := range n {
		fmt.Fprintf(&s, "  T%d: {type: object, fields: {id: {type: string, max_length: 8}}}\n", i)
	}
	s.WriteString("messages:\n")
	for i := range n {
		fmt.Fprintf(&s, "  M%d: {type: m.%d, publish: {exchange: x%d, routing_key: k}, versions: {1: {fields: {t: {type: T%d}}}}}\n", i, i, i, i)
	}
	s.WriteString("exchanges:\n")
	for i := range n {
		fmt.Fprintf(&s, "  x%d: {type: direct}\n", i)
	}
	s.WriteString("queues:\n")
	for i := range n {
		fmt.Fprintf(&s, "  q%d: {consumes: [{message: M%d}], bindings: [{exchange: x%d, routing_key: k}]}\n", i, i, i)
	}
	f, err := schema.Parse("s.lily.yaml", []byte(s.String()))
	if err != nil {
		b.Fatal(err)
	}
	return f
}

func BenchmarkLintManyEntities(b *testing.B) {
	f := manyEntities(b, 10_000)
	today := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b.ReportAllocs()
	for b.Loop() {
		Lint(f, today)
	}
}

func BenchmarkBreakingManyEntities(b *testing.B) {
	old, new := manyEntities(b, 10_000), manyEntities(b, 10_000)
	b.ReportAllocs()
	for b.Loop() {
		Breaking(old, new)
	}
}

func BenchmarkPageManyEntities(b *testing.B) {
	old, new := manyEntities(b, 10_000), manyEntities(b, 10_000)
	b.ReportAllocs()
	for b.Loop() {
		NewPage(new, old, "main")
	}
}

func BenchmarkTopologyManyEntities(b *testing.B) {
	f := manyEntities(b, 10_000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Topology("/", 4, 0, f); err != nil {
			b.Fatal(err)
		}
	}
}
