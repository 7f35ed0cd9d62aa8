package review

import (
	"slices"
	"strings"
	"testing"

	"github.com/lily-mq/lily/schema"
)

// headersCover says whether one headers binding matches every message
// another does, for each pair of x-match.
func TestHeadersCover(t *testing.T) {
	eu, euTier, euUS := map[string]any{"region": "eu"}, map[string]any{"region": "eu", "tier": 1}, map[string]any{"region": "eu", "zone": "us"}
	for _, tc := range []struct {
		name           string
		nMatch, oMatch string
		n, o           map[string]any
		want           bool
	}{
		{"all, fewer pairs", "all", "all", eu, euTier, true},
		{"all, more pairs", "all", "all", euTier, eu, false},
		{"any of a pair the old all held", "any", "all", eu, euTier, true},
		{"any of no pair the old all held", "any", "all", map[string]any{"region": "us"}, euTier, false},
		{"any, more pairs", "any", "any", euUS, eu, true},
		{"any, fewer pairs", "any", "any", eu, euUS, false},
		{"all of the old any's one pair", "all", "any", eu, eu, true},
		{"all of one of the old any's pairs", "all", "any", eu, euUS, false},
	} {
		n := &schema.Binding{Match: tc.nMatch, Headers: tc.n}
		o := &schema.Binding{Match: tc.oMatch, Headers: tc.o}
		if got := headersCover([]*schema.Binding{n}, o); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A topic binding with the empty key takes messages published with the
// empty key, which a pattern that needs a word does not.
func TestBreakingEmptyTopicKey(t *testing.T) {
	bound := edit(t, "queues:", "exchanges:\n  tx: {type: topic}\nqueues:", "    max_body_bytes", "    bindings: [{exchange: tx, routing_key: \"\"}]\n    max_body_bytes")
	for _, tc := range []struct {
		key       string
		narrowing bool
	}{{"*", true}, {"#.*", true}, {"*.#", true}, {"#", false}} {
		found := Breaking(parse(t, "old.lily.yaml", bound), parse(t, "new.lily.yaml", strings.Replace(bound, `routing_key: ""`, "routing_key: \""+tc.key+"\"", 1)))
		narrowed := len(found) == 1 && found[0].Rule == "ROUTING-KEY-NARROWED"
		if narrowed != tc.narrowing || !narrowed && len(found) > 0 {
			t.Errorf("routing key \"\" to %q: narrowing %v, found %+v", tc.key, tc.narrowing, found)
		}
	}
}

// An old binding split into several that accept together what it did is
// not narrowed, though none of them alone accepts it all.
func TestBreakingBindingSplitInTwo(t *testing.T) {
	for _, tc := range []struct{ exchange, old, new string }{
		{"{type: topic}", `[{exchange: x, routing_key: "order.#"}]`, `[{exchange: x, routing_key: order}, {exchange: x, routing_key: "order.*.#"}]`},
		{"{type: headers}", `[{exchange: x, match: any, headers: {a: 1, b: 2}}]`, `[{exchange: x, match: all, headers: {a: 1}}, {exchange: x, match: all, headers: {b: 2}}]`},
	} {
		bound := func(bindings string) string {
			return edit(t, "queues:", "exchanges:\n  x: "+tc.exchange+"\nqueues:", "    max_body_bytes", "    bindings: "+bindings+"\n    max_body_bytes")
		}
		if found := Breaking(parse(t, "old.lily.yaml", bound(tc.old)), parse(t, "new.lily.yaml", bound(tc.new))); len(found) > 0 {
			t.Errorf("%s split into %s: %+v", tc.old, tc.new, found)
		}
		// Either half alone narrows it.
		half := tc.new[:strings.Index(tc.new, "}, {")+1] + "]"
		if found := Breaking(parse(t, "old.lily.yaml", bound(tc.old)), parse(t, "new.lily.yaml", bound(half))); len(found) != 1 || found[0].Rule != "ROUTING-KEY-NARROWED" {
			t.Errorf("%s to %s: %+v", tc.old, half, found)
		}
	}
}

// A queue or exchange whose name holds spaces keeps its whole name in the
// subject of a binding it lost, and one named " " is no different.
func TestBreakingBindingSubjectsKeepNames(t *testing.T) {
	exchanges := "exchanges:\n  src: {type: topic}\n  \" \":\n    type: topic\n    ownership: owned\n    bindings: [{exchange: src, routing_key: a}]\nqueues:"
	old := edit(t, "queues:\n  orders:", exchanges+"\n  q q:", "    max_body_bytes", "    bindings: [{exchange: src, routing_key: a}]\n    max_body_bytes")
	new := edit(t, "queues:\n  orders:", strings.Replace(exchanges, "    bindings: [{exchange: src, routing_key: a}]\n", "", 1)+"\n  q q:")
	got := acksOf(Breaking(parse(t, "old.lily.yaml", old), parse(t, "new.lily.yaml", new)))
	want := []string{"BINDING-REMOVED@exchange: <-src/a", "BINDING-REMOVED@q q<-src/a"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// A binding removed with every other from its exchange is placed at what
// held it, the queue or the exchange it bound, which new still has, not at
// the top of the file.
func TestBreakingBindingRemovedPlacedAtWhatHeldIt(t *testing.T) {
	exchanges := "exchanges:\n  src: {type: topic}\n  audit:\n    type: topic\n    ownership: owned\n    bindings: [{exchange: src, routing_key: a}]\nqueues:"
	old := edit(t, "queues:", exchanges, "    max_body_bytes", "    bindings: [{exchange: src, routing_key: a}]\n    max_body_bytes")
	new := parse(t, "new.lily.yaml", edit(t, "queues:", strings.Replace(exchanges, "    bindings: [{exchange: src, routing_key: a}]\n", "", 1)))
	found := Breaking(parse(t, "old.lily.yaml", old), new)
	if got := acksOf(found); !slices.Equal(got, []string{"BINDING-REMOVED@exchange:audit<-src/a", "BINDING-REMOVED@orders<-src/a"}) {
		t.Fatalf("got %q", got)
	}
	for i, at := range []schema.Pos{new.Exchange("audit").Pos, new.Queue("orders").Pos} {
		if f := found[i]; f.File != at.File || f.Line != at.Line || f.Column != at.Column {
			t.Errorf("%s at %s:%d:%d, want %s:%d:%d", f.Ack(), f.File, f.Line, f.Column, at.File, at.Line, at.Column)
		}
	}
}

// A queue and an exchange of one name, bound alike, have subjects of their
// own, so that acknowledging one leaves the other reported; so does a queue
// whose name reads as the exchange's subject.
func TestBreakingBindingSubjectsTellExchanges(t *testing.T) {
	const src = "exchanges:\n  src: {type: topic}\n  audit:\n    type: topic\n    ownership: owned\n    bindings: [{exchange: src, routing_key: k}]\nqueues:\n  audit:"
	bound := "    bindings: [{exchange: src, routing_key: k}]\n    max_body_bytes"
	old := edit(t, "queues:\n  orders:", src, "    max_body_bytes", bound)
	old = strings.Replace(old, "queues:\n", "queues:\n  \"exchange:audit\":\n"+strings.SplitN(old, "queues:\n  audit:\n", 2)[1], 1)
	new := edit(t, "queues:\n  orders:", strings.Replace(src, "    bindings: [{exchange: src, routing_key: k}]\n", "", 1))
	new = strings.Replace(new, "queues:\n", "queues:\n  \"exchange:audit\":\n"+strings.SplitN(new, "queues:\n  audit:\n", 2)[1], 1)
	found := Breaking(parse(t, "old.lily.yaml", old), parse(t, "new.lily.yaml", new))
	got := acksOf(found)
	want := []string{"BINDING-REMOVED@exchange:audit<-src/k", "BINDING-REMOVED@queue:exchange:audit<-src/k", "BINDING-REMOVED@audit<-src/k"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for _, f := range found[1:] {
		if f.Acknowledged([]string{want[0]}) {
			t.Errorf("%s accepts %s", want[0], f.Ack())
		}
	}
}

// A queue and an exchange of one name that both change ownership are two
// findings, each with a subject of its own.
func TestBreakingOwnershipSubjectsTellExchanges(t *testing.T) {
	old := edit(t, "queues:", "exchanges:\n  orders: {type: topic, ownership: owned}\nqueues:")
	new := strings.Replace(edit(t, "queues:", "exchanges:\n  orders: {type: topic, ownership: external}\nqueues:", "    max_body_bytes", "    ownership: external\n    max_body_bytes"), "ownership: owned", "ownership: external", 1)
	var got []string
	for _, f := range Breaking(parse(t, "old.lily.yaml", old), parse(t, "new.lily.yaml", new)) {
		if f.Rule == "OWNERSHIP-CHANGED" {
			got = append(got, f.Ack())
		}
	}
	slices.Sort(got)
	if want := []string{"OWNERSHIP-CHANGED@exchange:orders", "OWNERSHIP-CHANGED@orders"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// Two headers bindings from one exchange to one queue have subjects of
// their own, so that acknowledging one leaves the other reported.
func TestBreakingHeadersBindingSubjects(t *testing.T) {
	bound := edit(t, "queues:", "exchanges:\n  hx: {type: headers}\nqueues:", "    max_body_bytes",
		"    bindings:\n      - {exchange: hx, headers: {region: eu, tier: 1}}\n      - {exchange: hx, match: any, headers: {region: \"1\"}}\n    max_body_bytes")
	found := Breaking(parse(t, "old.lily.yaml", bound), parse(t, "new.lily.yaml", edit(t, "queues:", "exchanges:\n  hx: {type: headers}\nqueues:")))
	got := acksOf(found)
	want := []string{`BINDING-REMOVED@orders<-hx/all{"region":"eu","tier":1}`, `BINDING-REMOVED@orders<-hx/any{"region":"1"}`}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if found[1].Acknowledged([]string{want[0]}) {
		t.Errorf("%s accepts %s", want[0], found[1].Ack())
	}
}

// The integer 1 and the decimal 1.0, which RabbitMQ matches apart, are
// written apart in a headers binding's subject.
func TestBreakingHeadersBindingSubjectsTellNumbers(t *testing.T) {
	bound := edit(t, "queues:", "exchanges:\n  hx: {type: headers}\nqueues:", "    max_body_bytes",
		"    bindings:\n      - {exchange: hx, headers: {tier: 1}}\n      - {exchange: hx, headers: {tier: 1.0}}\n      - {exchange: hx, headers: {tier: 2.5, big: 1e21}}\n    max_body_bytes")
	found := Breaking(parse(t, "old.lily.yaml", bound), parse(t, "new.lily.yaml", edit(t, "queues:", "exchanges:\n  hx: {type: headers}\nqueues:")))
	got := acksOf(found)
	want := []string{`BINDING-REMOVED@orders<-hx/all{"tier":1}`, `BINDING-REMOVED@orders<-hx/all{"tier":1.0}`, `BINDING-REMOVED@orders<-hx/all{"big":1e+21,"tier":2.5}`}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if found[1].Acknowledged([]string{want[0]}) {
		t.Errorf("%s accepts %s", want[0], found[1].Ack())
	}
}
