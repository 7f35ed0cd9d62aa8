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

// topicBindings parses a schema of a topic exchange with an alternate
// exchange and n queues bound to it by keys of their own, one by orders.#,
// and, if extra is not empty, one more bound by extra.
func topicBindings(b *testing.B, n int, extra string) *schema.File {
	b.Helper()
	var s strings.Builder
	s.WriteString(unroutedHead)
	s.WriteString(`  tx: {type: topic, ownership: owned, alternate_exchange: unrouted}
queues:
  lost: {consumes: [{message: M}], bindings: [{exchange: unrouted}]}
  all: {consumes: [{message: M}], bindings: [{exchange: tx, routing_key: 'orders.#'}]}
`)
	for i := range n {
		fmt.Fprintf(&s, "  q%d: {consumes: [{message: M}], bindings: [{exchange: tx, routing_key: orders.r%d.t%d}]}\n", i, i%17, i)
	}
	if extra != "" {
		fmt.Fprintf(&s, "  extra: {consumes: [{message: M}], bindings: [{exchange: tx, routing_key: '%s'}]}\n", extra)
	}
	f, err := schema.Parse("s.lily.yaml", []byte(s.String()))
	if err != nil {
		b.Fatal(err)
	}
	return f
}

// A binding added among a thousand on an exchange with an alternate is
// compared with all of them.
func BenchmarkBreakingTopicBindings(b *testing.B) {
	old, new := topicBindings(b, 1_000, ""), topicBindings(b, 1_000, "orders.#.x.*")
	b.ReportAllocs()
	for b.Loop() {
		if got := Breaking(old, new); len(got) != 0 {
			b.Fatalf("got %v, want no finding: orders.# routes what the new binding takes", got)
		}
	}
}

// Many exchanges fall back on one alternate exchange.
func BenchmarkBreakingManyAlternates(b *testing.B) {
	old, new := manyAlternates(b, 5_000, false), manyAlternates(b, 5_000, true)
	b.ReportAllocs()
	for b.Loop() {
		Breaking(old, new)
	}
}
