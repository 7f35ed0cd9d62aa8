package review

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lily-mq/lily/schema"
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

// TestBreakingAcrossComparesWhatIsNewWithTheOtherSchemas compares a queue or
// owned exchange new to one schema with the one of its name that another
// schema of the run holds: neither is older than the other, yet RabbitMQ
// refuses the second declaration if they differ, and two consumers of one
// queue that read different messages send each other's to the DLQ.
func TestBreakingAcrossComparesWhatIsNewWithTheOtherSchemas(t *testing.T) {
	withOnlyA := strings.NewReplacer("exchanges:\n", "exchanges:\n  only.a:\n    type: topic\n    ownership: owned\n")
	a := parse(t, "a.lily.yaml", withOnlyA.Replace(crossFile("amsg", false)))
	oldB := parse(t, "b.lily.yaml", crossFile("bmsg", false))
	// Ownamsg as a.lily.yaml has it, for b.lily.yaml to consume too.
	ownA := "messages:\n  Ownamsg:\n    versions:\n      1:\n        fields:\n          id: {type: string}\n"
	for _, tc := range []struct {
		name string
		// edits make b.lily.yaml's new revision from its old.
		edits []string
		want  []string
	}{
		{"declared and consumed differently", []string{"queues:\n", "queues:\n  own.amsg:\n    type: quorum\n    consumes: [{message: Ownbmsg}]\n"},
			[]string{"DECLARED-DIFFERENTLY@own.amsg", "QUEUE-SHARED@own.amsg"}},
		{"consumed differently", []string{"queues:\n", "queues:\n  own.amsg:\n    consumes: [{message: Ownbmsg}]\n"},
			[]string{"QUEUE-SHARED@own.amsg"}},
		{"dead-lettered differently", []string{"messages:\n", ownA, "queues:\n", "queues:\n  own.amsg:\n    consumes: [{message: Ownamsg}]\n    dlq: own.errors\n"},
			[]string{"DECLARED-DIFFERENTLY@own.amsg"}},
		// Each uses its own buckets, which return to the queue.
		{"retried differently", []string{"messages:\n", ownA, "queues:\n", "queues:\n  own.amsg:\n    consumes: [{message: Ownamsg}]\n    retry: {delays: [7s]}\n"}, nil},
		{"alike", []string{"messages:\n", ownA, "queues:\n", "queues:\n  own.amsg:\n    consumes: [{message: Ownamsg}]\n"}, nil},
		{"exchange declared differently", []string{"exchanges:\n", "exchanges:\n  only.a:\n    type: direct\n    ownership: owned\n"},
			[]string{"DECLARED-DIFFERENTLY@exchange:only.a"}},
		{"exchange alike", []string{"exchanges:\n", "exchanges:\n  only.a:\n    type: topic\n    ownership: owned\n"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			newB := parse(t, "b.lily.yaml", strings.NewReplacer(tc.edits...).Replace(crossFile("bmsg", false)))
			found, moves := BreakingAcross([]Revision{{Old: a, New: a}, {Old: oldB, New: newB}})
			if got := acksOf(found); !slices.Equal(got, tc.want) || len(moves) != 0 {
				t.Errorf("got %v, moves %v, want %v", got, moves, tc.want)
			}
			for _, f := range found {
				if f.File != "b.lily.yaml" || !strings.Contains(f.Message, "a.lily.yaml") || f.Migration == "" {
					t.Errorf("finding not placed in b.lily.yaml, or naming no a.lily.yaml: %+v", f)
				}
			}
			// A schema new since, compared with nothing, is compared so too.
			found, _ = BreakingAcross([]Revision{{Old: a, New: a}, {Old: emptied(newB), New: newB}})
			if got := acksOf(found); !slices.Equal(got, tc.want) {
				t.Errorf("b.lily.yaml new: got %v, want %v", got, tc.want)
			}
			// New to both, each finding is reported once.
			found, _ = BreakingAcross([]Revision{{Old: emptied(a), New: a}, {Old: emptied(newB), New: newB}})
			if got := acksOf(found); !slices.Equal(got, tc.want) {
				t.Errorf("both new: got %v, want %v", got, tc.want)
			}
		})
	}
}

// emptied is a revision of f that holds nothing, as lilygen compares a
// schema new since with.
func emptied(f *schema.File) *schema.File { return &schema.File{Package: f.Package, Output: f.Output} }
