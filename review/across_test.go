package review

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// crossFile writes a schema of package pkg with messages, exchanges and
// queues of its own, and, with movers, what moves from a.lily.yaml to
// b.lily.yaml in the tests of BreakingAcross: message Ping, exchange
// moving, and queue audits, bound to exchange events, whose alternate
// exchange events.other both schemas bind queues of their own to.
func crossFile(pkg string, movers bool) string {
	s := "version: 1\npackage: " + pkg + "\nmessages:\n" +
		"  Own" + pkg + ":\n    versions:\n      1:\n        fields:\n          id: {type: string}\n"
	if movers {
		s += "  Ping:\n    versions:\n      1:\n        fields:\n          id: {type: string, required: true, max_length: 10}\n"
	}
	s += "exchanges:\n" +
		"  events:\n    type: topic\n    ownership: owned\n    alternate_exchange: events.other\n" +
		"  events.other:\n    type: fanout\n    ownership: owned\n"
	if movers {
		s += "  moving:\n    type: fanout\n    ownership: owned\n"
	}
	s += "queues:\n  own." + pkg + ":\n    consumes: [{message: Own" + pkg + "}]\n" +
		"  other." + pkg + ":\n    consumes: [{message: Own" + pkg + "}]\n    bindings:\n      - exchange: events.other\n"
	if movers {
		s += "  audits:\n    consumes: [{message: Ping}]\n    bindings:\n      - exchange: events\n        routing_key: \"ping.#\"\n"
	}
	return s
}

// TestBreakingAcrossAMove compares a queue, exchange and message moved from
// one schema to another with what they were: unchanged, the move breaks
// nothing (and the binding diverts nothing from the alternate exchange it
// bound to before too); changed, each finding says where it moved from.
func TestBreakingAcrossAMove(t *testing.T) {
	oldA, newA := parse(t, "a.lily.yaml", crossFile("amsg", true)), parse(t, "a.lily.yaml", crossFile("amsg", false))
	oldB := parse(t, "b.lily.yaml", crossFile("bmsg", false))
	found, moves := BreakingAcross([]Revision{{Old: oldA, New: newA}, {Old: oldB, New: parse(t, "b.lily.yaml", crossFile("bmsg", true))}})
	if len(found) != 0 {
		t.Errorf("moved unchanged: %v", acksOf(found))
	}
	want := []Move{
		{"queue", "audits", "a.lily.yaml", "b.lily.yaml"}, {"exchange", "moving", "a.lily.yaml", "b.lily.yaml"},
		{"message", "Ping", "a.lily.yaml", "b.lily.yaml"},
	}
	if diff := cmp.Diff(want, moves); diff != "" {
		t.Errorf("moves (-want +got):\n%s", diff)
	}

	changed := strings.NewReplacer("  audits:\n", "  audits:\n    type: quorum\n", `"ping.#"`, `"ping.eu.#"`, "max_length: 10", "max_length: 9").Replace(crossFile("bmsg", true))
	found, _ = BreakingAcross([]Revision{{Old: oldA, New: newA}, {Old: oldB, New: parse(t, "b.lily.yaml", changed)}})
	var got []string
	for _, f := range found {
		got = append(got, f.Ack()+": "+f.Note)
	}
	queue, message := `queue "audits" moved from a.lily.yaml to b.lily.yaml`, "message Ping moved from a.lily.yaml to b.lily.yaml"
	if want := []string{"BOUND-NARROWED@Ping.v1.id: " + message, "QUEUE-TYPE-CHANGED@audits: " + queue, "ROUTING-KEY-NARROWED@audits<-events/ping.#: " + queue}; !slices.Equal(got, want) {
		t.Errorf("moved and changed:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// What both schemas held, and one keeps, did not move: the other no
	// longer has it.
	both := parse(t, "b.lily.yaml", crossFile("bmsg", true))
	found, moves = BreakingAcross([]Revision{{Old: oldA, New: newA}, {Old: both, New: both}})
	if got := acksOf(found); len(moves) != 0 || !slices.Contains(got, "QUEUE-REMOVED@audits") || !slices.Contains(got, "MESSAGE-REMOVED@Ping") {
		t.Errorf("kept by the other schema: %v, moves %v", got, moves)
	}
}
