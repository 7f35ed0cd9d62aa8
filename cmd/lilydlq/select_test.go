package main

import (
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
)

// TestSelectionMatchesWholeValues: reasons, types and ids are chosen by their
// whole value, as sent or escaped, never by the cut text list prints: two
// reasons alike for longer than list prints are two reasons.
func TestSelectionMatchesWholeValues(t *testing.T) {
	t.Parallel()
	common := "permanent failure: " + strings.Repeat("the card issuer declined the charge ", 8)
	longA, longB := common+"for fraud", common+"for funds"
	id := strings.Repeat("i", 150)
	copyOf := func(msgID, typ, reason string) *amqp.Delivery {
		return &amqp.Delivery{MessageId: msgID, Type: typ, Headers: amqp.Table{
			envelope.HeaderFailureQueue: "orders", envelope.HeaderFailureReason: reason,
		}}
	}
	a := copyOf(id+"-a", "order.placed", longA)
	b := copyOf(id+"-b", "order.\x1b[1mpaid", longB)
	esc := copyOf("esc", "t", "poison: \x1b]0;owned\x07 title")
	// A copy of a header-mapped producer's message, with the type the
	// runtime read, and one made before the runtime wrote it.
	foreign, old := copyOf("f", "", "permanent failure"), copyOf("o", "", "permanent failure")
	foreign.Headers[envelope.HeaderFailureType] = "com.shop.OrderCreated"
	foreign.Headers["event_type"], old.Headers["event_type"] = "com.shop.OrderCreated", "com.shop.OrderCreated"
	fa, fb := factsOf(a, ""), factsOf(b, "")
	if fa.Reason != fb.Reason || fa.ID != fb.ID {
		t.Fatalf("the test wants reasons and ids list prints alike: %q, %q; %q, %q", fa.Reason, fb.Reason, fa.ID, fb.ID)
	}
	for _, c := range []struct {
		name      string
		sel       selection
		d         *amqp.Delivery
		wantMatch bool
	}{
		{"the whole reason", selection{reason: longA}, a, true},
		{"the whole reason, not another", selection{reason: longA}, b, false},
		{"the cut reason list prints", selection{reason: fa.Reason}, a, false},
		{"a substring past the cut", selection{reasonContains: "for fraud"}, a, true},
		{"a substring past the cut, not another", selection{reasonContains: "for fraud"}, b, false},
		{"the end of the cut text, ellipsis and all", selection{reasonContains: fa.Reason[len(fa.Reason)-12:]}, a, false},
		{"a reason as sent", selection{reason: "poison: \x1b]0;owned\x07 title"}, esc, true},
		{"a reason as list prints it", selection{reason: `poison: \x1b]0;owned\x07 title`}, esc, true},
		{"a substring as list prints it", selection{reasonContains: `\x07 title`}, esc, true},
		{"a bare part of an escape is not in the reason", selection{reasonContains: "07"}, esc, false},
		{"a type as sent", selection{typ: "order.\x1b[1mpaid"}, b, true},
		{"a type as list prints it", selection{typ: `order.\x1b[1mpaid`}, b, true},
		{"a type, not another", selection{typ: "order.placed"}, b, false},
		{"the type the runtime read of a foreign copy", selection{typ: "com.shop.OrderCreated"}, foreign, true},
		{"the type the runtime read, not another", selection{typ: "com.shop.OrderPaid"}, foreign, false},
		{"a producer's type header alone is not read", selection{typ: "com.shop.OrderCreated"}, old, false},
		{"a whole id", selection{ids: idList{id + "-a": true}}, a, true},
		{"a whole id, not another", selection{ids: idList{id + "-a": true}}, b, false},
		{"the cut id list prints", selection{ids: idList{fa.ID: true}}, a, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.sel.match(c.d, factsOf(c.d, "")); got != c.wantMatch {
				t.Errorf("match = %t, want %t", got, c.wantMatch)
			}
		})
	}
}

// TestSelectionMissingIDs: the ids no copy carried are the ones reported,
// whether given as sent or as list prints them.
func TestSelectionMissingIDs(t *testing.T) {
	t.Parallel()
	var s selection
	for _, v := range []string{"a", "b", `e\x1bx`, "gone"} {
		if err := s.ids.Set(v); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"a", "e\x1bx", "other"} {
		s.see(&amqp.Delivery{MessageId: id})
	}
	if got := strings.Join(s.missing(), " "); got != "b gone" {
		t.Errorf("missing %q, want %q", got, "b gone")
	}
}

// TestIDFlagTakesEachIDWhole: a message id may hold commas and spaces, so
// each -id is one id, as given.
func TestIDFlagTakesEachIDWhole(t *testing.T) {
	t.Parallel()
	var l idList
	for _, v := range []string{"order,17", " padded ", "plain"} {
		if err := l.Set(v); err != nil {
			t.Fatal(err)
		}
	}
	if len(l) != 3 || !l["order,17"] || !l[" padded "] || !l["plain"] {
		t.Errorf("-id order,17 -id ' padded ' -id plain chose %q", l.String())
	}
	if err := l.Set(""); err == nil {
		t.Error("an empty -id was taken")
	}
}
