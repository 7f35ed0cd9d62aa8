package runtime

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/runtime/internal/decide"
)

// Only the 404 of something external that does not exist is a refusal,
// which waits for its owner. A durable classic queue whose home node is
// down answers a passive check with a 404 too, for as long as the node is
// away: that is a lost connection, not a refusal.
func TestMissingIsOnlyTheExternalObjectsAbsence(t *testing.T) {
	gone := &amqp.Error{Code: amqp.NotFound, Reason: "NOT_FOUND - no queue 'legacy' in vhost '/'"}
	away := &amqp.Error{Code: amqp.NotFound, Reason: "NOT_FOUND - home node 'rabbit@node-2' of durable queue 'legacy' in vhost '/' is down or inaccessible"}
	for _, c := range []struct {
		name     string
		external bool
		err      error
		refused  bool
	}{
		{"an external queue that does not exist", true, gone, true},
		{"an external queue whose node is down", true, away, false},
		{"an owned queue whose node is down", false, away, false},
		{"an owned queue's 404", false, gone, false},
	} {
		if got := refused(missing(c.external, c.err)); got != c.refused {
			t.Errorf("%s: refused = %t, want %t", c.name, got, c.refused)
		}
		if !errors.Is(missing(c.external, c.err), c.err) {
			t.Errorf("%s: the broker's error is lost", c.name)
		}
	}
}

// A DLQ that exists yields its type and its "no delivery limit" to the
// declare, read from the 406 in RabbitMQ's words (as 3.10.8 writes them),
// and nothing that loses copies: a limit, a stream, or another argument's
// 406 is the DLQ's refusal, which names it. A type or a limit in a field
// type or a form it cannot read, or cut from a reply, is neither: the
// broker is asked (probe).
func TestDLQYieldsOnlyItsTypeAndNoLimit(t *testing.T) {
	reason := func(key, received, current string) error {
		return &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - inequivalent arg '" + key + "' for queue 'orders.dlq' in vhost '/': received " + received + " but current is " + current}
	}
	classic := map[string]any{"x-queue-type": "classic"}
	quorum := map[string]any{"x-queue-type": "quorum"}
	quorum4 := map[string]any{"x-queue-type": "quorum", "x-delivery-limit": int64(-1)}
	for _, c := range []struct {
		name    string
		args    map[string]any
		major   int
		err     error
		want    map[string]any // nil: not yielded
		refusal string         // in the refusal; "": none
	}{
		{"a quorum DLQ for a classic queue", classic, 3, reason("x-queue-type", "'classic'", "'quorum'"), quorum, ""},
		{"a DLQ declared without a type", quorum, 3, reason("x-queue-type", "the value 'quorum' of type 'longstr'", "none"), classic, ""},
		{"a classic DLQ on RabbitMQ 4", quorum4, 4, reason("x-queue-type", "'quorum'", "'classic'"), classic, ""},
		{"no limit after an upgrade", quorum4, 4, reason("x-delivery-limit", "the value '-1' of type 'long'", "none"), quorum, ""},
		{"another negative limit on RabbitMQ 4", quorum4, 4, reason("x-delivery-limit", "'-1'", "the value '-5' of type 'signedint'"), map[string]any{"x-queue-type": "quorum", "x-delivery-limit": int64(-5)}, ""},
		{"a stream", classic, 3, reason("x-queue-type", "'classic'", "'stream'"), nil, `type "stream"`},
		{"a type unknown here", quorum, 4, reason("x-queue-type", "'quorum'", "the value 'lake' of type 'longstr'"), nil, `type "lake"`},
		{"a limit of 1", quorum, 3, reason("x-delivery-limit", "none", "the value '1' of type 'long'"), nil, "x-delivery-limit 1"},
		{"a limit of 5 on RabbitMQ 4", quorum4, 4, reason("x-delivery-limit", "'-1'", "'5'"), nil, "x-delivery-limit 5"},
		{"a limit of 20 after an upgrade", quorum4, 4, reason("x-delivery-limit", "'-1'", "'20'"), nil, "x-delivery-limit 20"},
		{"a limit of 0", quorum4, 4, reason("x-delivery-limit", "'-1'", "'0'"), nil, "x-delivery-limit 0"},
		{"-1 before RabbitMQ 4, where it drops at the first return", quorum, 3, reason("x-delivery-limit", "none", "the value '-1' of type 'long'"), nil, "x-delivery-limit -1, which means no limit only from RabbitMQ 4: before it the broker drops a copy, or dead-letters it away, at its first return"},
		{"-5 before RabbitMQ 4", quorum, 3, reason("x-delivery-limit", "none", "'-5'"), nil, "x-delivery-limit -5, which means no limit only from RabbitMQ 4"},
		{"a limit written as a string", quorum, 3, reason("x-delivery-limit", "none", "the value '5' of type 'longstr'"), nil, ""},
		{"a limit written as a float", quorum4, 4, reason("x-delivery-limit", "'-1'", "the value '5' of type 'double'"), nil, ""},
		{"a limit that is no integer", quorum4, 4, reason("x-delivery-limit", "'-1'", "'infinity'"), nil, ""},
		{"a typed limit that is no integer", quorum, 3, reason("x-delivery-limit", "none", "the value 'infinity' of type 'long'"), nil, ""},
		{"a type of another field type", quorum, 3, reason("x-queue-type", "'classic'", "the value 'quorum' of type 'binary'"), nil, ""},
		{"a stream of another field type", classic, 4, reason("x-queue-type", "'classic'", "the value 'stream' of type 'binary'"), nil, ""},
		{"no limit as the declare has it", quorum4, 4, reason("x-delivery-limit", "'-1'", "'-1'"), nil, ""},
		{"a type in other words", classic, 3, reason("x-queue-type", "'classic'", "quorum, of course"), nil, ""},
		{"max-length", classic, 3, reason("x-max-length", "none", "the value '1' of type 'long'"), nil, ""},
		{"a TTL", quorum, 3, reason("x-message-ttl", "none", "the value '100' of type 'long'"), nil, ""},
		{"a limit cut from a reply of 255 bytes", quorum, 3, &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - inequivalent arg 'x-delivery-limit' for queue 'orders.dlq' in vhost '/': received none but current is the v..."}, nil, ""},
		{"another 406", classic, 3, &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - invalid arg 'x-delivery-limit' for queue 'orders.dlq'"}, nil, ""},
	} {
		key, cur := inequivalent(c.err)
		got, refusal := yieldTo(c.args, key, cur, c.major)
		if got == nil != (c.want == nil) || got != nil && !maps.Equal(got, c.want) {
			t.Errorf("%s: %v; want %v", c.name, got, c.want)
		}
		if c.refusal == "" && refusal != "" || !strings.Contains(refusal, c.refusal) {
			t.Errorf("%s: refusal %q; want one naming %q", c.name, refusal, c.refusal)
		}
	}
}

// A topology declared again while consuming names each refusal, in the
// order met, each bounded as a cause is, and counts those past the first
// few: a topology of many bindings refused at once makes no unbounded line.
func TestRefusalsTextIsBounded(t *testing.T) {
	refusals := []error{errors.New("declare exchange x: \x1b[31mgone"), errors.New(strings.Repeat("y", 500))}
	for i := range 8 {
		refusals = append(refusals, fmt.Errorf("bind queue q to exchange e%d: 403", i))
	}
	got := refusalsText(refusals[:1])
	if got != `declare exchange x: \x1b[31mgone` {
		t.Errorf("one refusal: %q", got)
	}
	got = refusalsText(refusals)
	if !strings.HasPrefix(got, `declare exchange x: \x1b[31mgone; yyy`) || !strings.Contains(got, "e1: 403; and 6 more refused") || strings.Contains(got, "e2") {
		t.Errorf("ten refusals: %q", got)
	}
	if bound := maxRefusalsTold*(decide.MaxCause+2) + 30; len(got) > bound {
		t.Errorf("ten refusals told in %d bytes; want at most %d", len(got), bound)
	}
}

// A topology declared again that a failure of its channel alone stopped (a
// classic queue whose node is down) tells that failure after the refusals
// met before it: the rest was not declared. The connection ending is the
// session's to tell, not the topology's.
func TestRedeclareStoppedIsTold(t *testing.T) {
	before := []error{errors.New("declare exchange x: 403")}
	down := fmt.Errorf("declare queue q: %w", &amqp.Error{Code: amqp.NotFound, Recover: true,
		Reason: "NOT_FOUND - home node 'rabbit@n2' of durable queue 'q' in vhost '/' is down or inaccessible"})
	got := stoppedAt(before, down)
	if len(got) != 2 || got[0] != before[0] || !errors.Is(got[1], down) || !strings.HasPrefix(got[1].Error(), "stopped at declare queue q: ") {
		t.Errorf("stopped by a classic queue's node down: %v", got)
	}
	for _, err := range []error{nil, amqp.ErrClosed, fmt.Errorf("bind: %w", &amqp.Error{Code: amqp.ConnectionForced, Reason: "CONNECTION_FORCED"})} {
		if got := stoppedAt(before, err); len(got) != 1 {
			t.Errorf("stopped by %v: %v", err, got)
		}
	}
}
