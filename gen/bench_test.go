package gen

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lily-mq/lily/schema"
)

// bigSchema is a schema of 50 queues consuming 200 messages of 5 versions
// each: 1,000 message versions, each with the common field types, a typed
// header and an example.
func bigSchema() []byte {
	var b strings.Builder
	b.WriteString("version: 1\npackage: big\nmessages:\n")
	for m := range 200 {
		fmt.Fprintf(&b, "  Event%d:\n    versions:\n", m)
		for v := 1; v <= 5; v++ {
			fmt.Fprintf(&b, `      %d:
        fields:
          id: {type: string, required: true, min_length: 1, max_length: 64, pattern: '^[a-z0-9-]+$'}
          amount: {type: integer, min: 0, max: 1000000}
          ratio: {type: number, min: 0, max: 1}
          state: {type: enum, values: [new, done], default: new}
          at: {type: time, required: true}
          blob: {type: bytes, max_length: 1024}
          tags: {type: map, max_items: 10, items: {type: string, max_length: 20}}
          lines:
            type: list
            max_items: 100
            items: {type: object, fields: {sku: {type: string, required: true}, qty: {type: integer, min: 1}}}
        headers:
          x-tenant: {type: string, required: true, max_length: 32}
        examples:
          - body: {id: e-1, at: "2026-01-01T00:00:00Z", lines: [{sku: a, qty: 1}]}
            headers: {x-tenant: acme}
`, v)
		}
	}
	b.WriteString("queues:\n")
	for q := range 50 {
		fmt.Fprintf(&b, "  queue-%d:\n    retry: {delays: [1s, 10s]}\n    consumes:\n", q)
		for m := q * 4; m < q*4+4; m++ {
			fmt.Fprintf(&b, "      - message: Event%d\n", m)
		}
	}
	return []byte(b.String())
}

// BenchmarkGenerate parses, checks and generates a schema of 1,000 message
// versions across 50 queues; docs/benchmarks.md quotes its figures.
func BenchmarkGenerate(b *testing.B) {
	src := bigSchema()
	for b.Loop() {
		f, err := schema.Parse("big.lily.yaml", src)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Generate(f); err != nil {
			b.Fatal(err)
		}
	}
}
