package schema

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPublishModel(t *testing.T) {
	const src = `version: 1
package: shopmsg
messages:
  OrderPlaced:
    publish:
      exchange: shop.events
      routing_key: order.placed.v{version}
      order_key: {header: x-tenant}
    versions:
      1: {headers: {x-tenant: {type: string, required: true}}}
      12: {headers: {x-tenant: {type: enum, required: true, values: [acme]}}}
  StockReserved:
    publish: {routing_key: {field: sku}, exchange: stock}
    versions:
      1: {fields: {sku: {type: string, required: true, max_length: 255}}}
exchanges:
  shop.events: {type: topic}
  stock: {type: direct}
`
	f, err := Parse("s.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := &Publish{
		Pos: Pos{"s.yaml", 5, 5}, Exchange: "shop.events",
		RoutingKey: Key{Fixed: "order.placed.v{version}"}, OrderKey: &Key{Header: "x-tenant"},
	}
	placed := f.Messages[0]
	if diff := cmp.Diff(want, placed.Publish); diff != "" {
		t.Errorf("publish (-want +got):\n%s", diff)
	}
	if k := placed.Publish.RoutingKey; k.For(placed.Versions[1]) != "order.placed.v12" || k.String() != `"order.placed.v{version}"` {
		t.Errorf("key %s in version 12: %q", k, k.For(placed.Versions[1]))
	}
	if k := f.Messages[1].Publish.RoutingKey; k != (Key{Field: "sku"}) || k.String() != "field sku" {
		t.Errorf("key %+v", k)
	}
}

// A publish in an included file is checked against the exchanges and
// queues of every file, and its errors name the file that has it.
func TestPublishInInclude(t *testing.T) {
	files := map[string]string{
		"root.yaml": "version: 1\npackage: x\ninclude: [a.yaml]\nexchanges:\n  shop: {type: topic}\nqueues:\n  q: {consumes: [{message: A}], envelope: e}\nenvelopes:\n  e: {kind: cloudevents}\n",
		"a.yaml":    "version: 1\nmessages:\n  A:\n    publish: {exchange: shop, routing_key: a}\n    versions: {1: {}}\n",
	}
	read := func(name string, _ int) ([]byte, error) {
		if data, ok := files[filepath.ToSlash(name)]; ok {
			return []byte(data), nil
		}
		return nil, os.ErrNotExist
	}
	_, err := parse("root.yaml", []byte(files["root.yaml"]), read)
	want := "a.yaml:4:5: lilygen writes no producers of A to publish it with: its envelope e names no source, which every CloudEvent carries (give envelope e a source:, the URI of the producing service, or remove publish:) [BAD-PUBLISH]"
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
	files["root.yaml"] = "version: 1\npackage: x\ninclude: [a.yaml]\nexchanges:\n  shop: {type: topic}\n"
	f, err := parse("root.yaml", []byte(files["root.yaml"]), read)
	if err != nil {
		t.Fatal(err)
	}
	if pub := f.Messages[0].Publish; pub.Exchange != "shop" || pub.Pos.File != "a.yaml" {
		t.Errorf("publish %+v", pub)
	}
}
