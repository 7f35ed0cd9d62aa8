package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/topology"
)

// A classic and a quorum queue share one DLQ, and their consumers start
// together, as two services deployed at once: each finds no DLQ and declares
// it with its own type, and the slower declare is refused (406, x-queue-type).
// The DLQ that won is used as it is, as one that existed before would be, and
// neither start fails. The race is real, so it is run several times.
func TestBrokerSharedDLQDeclaredByTwoAtOnce(t *testing.T) {
	t.Parallel()
	type round struct {
		dlq   string
		specs []runtime.QueueSpec
	}
	var rounds []round
	for n := range 8 {
		// Named after the classic queue, of a name of its own: a DLQ left
		// by an earlier run would make the round pass by the first check.
		classic := brokerSpec(t, func(q *runtime.QueueSpec) { q.Topology.DeadLetterQueue = q.Name + ".shared-dlq" })
		dlq := classic.Topology.DeadLetterQueue
		r := round{dlq: dlq, specs: []runtime.QueueSpec{
			classic,
			brokerSpec(t, func(q *runtime.QueueSpec) {
				q.Topology.DeadLetterQueue, q.Topology.Type = dlq, topology.Quorum
			}),
		}}
		conns := []*amqp.Connection{dial(t), dial(t)}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, q := range r.specs {
			wg.Go(func() {
				<-start
				if err := runtime.DeclareTopology(conns[i], q); err != nil {
					t.Errorf("round %d: the %s queue's declare: %v", n, q.Topology.Type, err)
				}
			})
		}
		close(start)
		wg.Wait()
		rounds = append(rounds, r)
	}
	args := queueArguments(t)
	for n, r := range rounds {
		if !strings.Contains(args[r.dlq], `{"x-queue-type","classic"}`) && !strings.Contains(args[r.dlq], `{"x-queue-type","quorum"}`) {
			t.Errorf("round %d: DLQ %s arguments %q, want one declare's", n, r.dlq, args[r.dlq])
		}
		for _, q := range r.specs {
			if want := fmt.Sprintf(`{"x-dead-letter-routing-key","%s"}`, r.dlq); !strings.Contains(args[q.Name], want) {
				t.Errorf("round %d: queue %s arguments %q, want %s", n, q.Name, args[q.Name], want)
			}
		}
	}
}

// estateDLQ declares q's DLQ as another team or an operator would, with
// args, before Lily declares it.
func estateDLQ(t *testing.T, q runtime.QueueSpec, args amqp.Table) {
	t.Helper()
	ch := channel(t, dial(t))
	defer ch.Close()
	if _, err := ch.QueueDeclare(q.Topology.DeadLetterQueue, true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
}

// A DLQ that exists with an argument of its own loses or refuses the copies
// whose confirm Lily takes for a handoff: a max-length drops the oldest, a
// TTL with no dead-letter target drops each, reject-publish nacks each, a
// delivery limit drops each copy read (a get and a requeue) that often, and
// a stream keeps them all from Lily's reads. Its declare is refused (406),
// as an owned queue's is, before the main queue is declared; so is one
// whose type differs too, which RabbitMQ names first. The error names the
// argument, and says why for a limit or a type.
func TestBrokerEstateDLQArgumentsAreRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, kind string
		args       amqp.Table
		want       string
	}{
		{"max-length", topology.Classic, amqp.Table{"x-max-length": int64(1)}, "x-max-length"},
		{"a TTL with nowhere to dead-letter", topology.Classic, amqp.Table{"x-queue-type": "classic", "x-message-ttl": int64(60000)}, "x-message-ttl"},
		{"reject-publish", topology.Quorum, amqp.Table{"x-queue-type": "quorum", "x-overflow": "reject-publish"}, "x-overflow"},
		{"a TTL behind the type", topology.Classic, amqp.Table{"x-queue-type": "quorum", "x-message-ttl": int64(60000)}, "x-message-ttl"},
		{"a delivery limit of 1", topology.Quorum, amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int64(1)}, "x-delivery-limit"},
		{"a delivery limit behind the type", topology.Classic, amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int64(5)}, "x-delivery-limit"},
		{"a stream", topology.Classic, amqp.Table{"x-queue-type": "stream"}, "x-queue-type"},
		{"a stream, for a quorum queue", topology.Quorum, amqp.Table{"x-queue-type": "stream"}, "x-queue-type"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			q := brokerSpec(t, func(q *runtime.QueueSpec) { q.Topology.Type = c.kind })
			estateDLQ(t, q, c.args)
			err := runtime.DeclareTopology(dial(t), q)
			var ae *amqp.Error
			if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed || !strings.Contains(err.Error(), "inequivalent arg '"+c.want+"'") {
				t.Fatalf("DeclareTopology: %v, want the 406 of %s", err, c.want)
			}
			if why := map[string]string{"x-delivery-limit": "the DLQ has x-delivery-limit", "x-queue-type": `the DLQ is of type "stream"`}[c.want]; !strings.Contains(err.Error(), why) {
				t.Errorf("DeclareTopology: %v, want it to say %q", err, why)
			}
			ch := channel(t, dial(t))
			if _, err := ch.QueueDeclarePassive(q.Name, true, false, false, false, nil); !errors.As(err, &ae) || ae.Code != amqp.NotFound {
				t.Errorf("the main queue was declared all the same: %v", err)
			}
		})
	}
}

// A main queue or retry bucket of Lily's own that exists with other
// arguments is refused (406), and RabbitMQ names only the first that
// differs: the error says to compare them all, with the command that shows
// them. The DLQ's says what it keeps instead, and not that.
func TestBrokerQueueRefusedSaysToCompareEveryArgument(t *testing.T) {
	t.Parallel()
	const hint = "RabbitMQ names only the first argument that differs: compare them all, the type included (rabbitmqctl list_queues name type arguments)"
	for _, c := range []struct {
		name  string
		queue func(runtime.QueueSpec) string
		hint  bool
	}{
		{"the main queue", func(q runtime.QueueSpec) string { return q.Name }, true},
		{"a retry bucket", func(q runtime.QueueSpec) string { return bucket(q, q.Topology.RetryDelays[0]) }, true},
		{"the DLQ", func(q runtime.QueueSpec) string { return q.Topology.DeadLetterQueue }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			q := brokerSpec(t, func(q *runtime.QueueSpec) { q.Topology.Type = topology.Classic })
			ch := channel(t, dial(t))
			if _, err := ch.QueueDeclare(c.queue(q), true, false, false, false, amqp.Table{"x-max-length": int64(1)}); err != nil {
				t.Fatal(err)
			}
			err := runtime.DeclareTopology(dial(t), q)
			var ae *amqp.Error
			if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
				t.Fatalf("DeclareTopology: %v, want a 406", err)
			}
			if strings.Contains(err.Error(), hint) != c.hint {
				t.Errorf("DeclareTopology: %v; want the hint %t", err, c.hint)
			}
		})
	}
}

// A DLQ that exists keeps its type, classic or quorum: a DLQ shared by a
// classic and a quorum queue is of whichever declared it first; and a
// quorum DLQ without a limit is kept, whatever Lily writes for none on the
// broker's version.
func TestBrokerEstateDLQTypeAndNoLimitAreKept(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, kind string
		args       amqp.Table
		want       string
	}{
		{"a quorum DLQ without a delivery limit, for a classic queue", topology.Classic, amqp.Table{"x-queue-type": "quorum"}, `{"x-queue-type","quorum"}`},
		{"a classic DLQ, for a quorum queue", topology.Quorum, amqp.Table{"x-queue-type": "classic"}, `{"x-queue-type","classic"}`},
		{"a DLQ declared without a type, for a quorum queue", topology.Quorum, amqp.Table{}, `[]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			q := brokerSpec(t, func(q *runtime.QueueSpec) { q.Topology.Type = c.kind })
			estateDLQ(t, q, c.args)
			declareTopology(t, q)
			if args := queueArguments(t)[q.Topology.DeadLetterQueue]; !strings.Contains(args, c.want) {
				t.Errorf("the DLQ's arguments: %s, want %s", args, c.want)
			}
		})
	}
}

// A DLQ with an argument of its own refuses the topology at the first
// connection: Run ends with the 406, before it consumes, rather than
// confirm dead-letters the DLQ drops (the third of three copies would be
// all that is left).
func TestBrokerEstateDLQArgumentsEndRun(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	estateDLQ(t, q, amqp.Table{"x-max-length": int64(1)})
	_, c := prepare(t, q, ack)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := c.Run(ctx)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed || !strings.Contains(err.Error(), "x-max-length") {
		t.Fatalf("Run: %v, want the 406 of the DLQ's x-max-length", err)
	}
}

// A DLQ an operator declares again with an argument of its own under a
// consuming session is told when the topology is declared again, at error
// and in Health; once the operator deletes it, Lily declares it anew and
// Health says nothing more.
func TestBrokerEstateDLQArgumentsDriftWhileConsuming(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	r, c := prepare(t, q, ack)
	c.SetTopologyEvery(300 * time.Millisecond)
	r.launch(c)
	awaitConsumer(t, q.Name)
	publish(t, q.Name, order(t, "before"))
	r.await(1)
	ch := channel(t, dial(t))
	// Lily may declare the DLQ again between the delete and the declare:
	// then the declare is refused, and tried again.
	eventually(t, 2*time.Minute, "the DLQ declared again with x-max-length", func() bool {
		if _, err := ch.QueueDelete(q.Topology.DeadLetterQueue, false, false, false); err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare(q.Topology.DeadLetterQueue, true, false, false, false, amqp.Table{"x-max-length": int64(1)}); err != nil {
			ch = channel(t, dial(t))
			return false
		}
		return true
	})
	eventually(t, 2*time.Minute, "Health to say the topology is refused", func() bool {
		h := c.Health()
		return h.Ready && strings.Contains(h.Why, "consuming, but the broker refused the topology when it was declared again") && strings.Contains(h.Why, "x-max-length")
	})
	if !r.events.has(func(ev event) bool {
		return ev.stage == "topology-drifted" && ev.level == slog.LevelError && strings.Contains(ev.detail, "x-max-length")
	}) {
		t.Error("no topology-drifted event at error")
	}
	if _, err := ch.QueueDelete(q.Topology.DeadLetterQueue, false, false, false); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "Health to say nothing more", func() bool { h := c.Health(); return h.Ready && h.Why == "" })
	r.stop()
	if args := queueArguments(t)[q.Topology.DeadLetterQueue]; strings.Contains(args, "x-max-length") {
		t.Errorf("the DLQ's arguments: %s", args)
	}
}

// RabbitMQ cuts the text of its reply at 255 bytes, so a 406 for a DLQ of
// a long name says which argument differs but not the DLQ's value of it.
// The runtime then asks the broker, declaring the DLQ with each value it
// may keep, and comes to what it comes to for a short name: a delivery
// limit or a stream is refused, at the first connection as when a
// consuming session declares the topology again, and a quorum DLQ without
// a limit is kept.
func TestBrokerEstateDLQOfALongNameIsJudgedAsAShortOne(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, kind string
		args       amqp.Table
		want       string // the argument refused, or the DLQ's arguments kept
		probed     int    // the declares a cut reply adds: the values the broker refused
	}{
		{"limit", topology.Quorum, amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int64(1)}, "refused x-delivery-limit", 0},
		{"limit-behind-type", topology.Classic, amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int64(1)}, "refused x-delivery-limit", 0},
		{"stream", topology.Classic, amqp.Table{"x-queue-type": "stream"}, "refused x-queue-type", 1},
		{"quorum", topology.Classic, amqp.Table{"x-queue-type": "quorum"}, `kept [{"x-queue-type","quorum"}]`, 0},
		{"quorum-bounded", topology.Classic, amqp.Table{"x-queue-type": "quorum", "x-max-length": int64(5)}, "refused x-max-length", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			outcome, opened := map[bool]string{}, map[bool]int{}
			for _, long := range []bool{false, true} {
				q := brokerSpec(t, func(q *runtime.QueueSpec) {
					q.Topology.Type = c.kind
					if long {
						q.Topology.DeadLetterQueue += "." + strings.Repeat("l", 240-len(q.Topology.DeadLetterQueue))
					}
				})
				estateDLQ(t, q, c.args)
				outcome[long], opened[long] = judged(t, q, long)
			}
			if outcome[false] != c.want || outcome[true] != c.want {
				t.Errorf("short name: %s; long name: %s; want %s for both", outcome[false], outcome[true], c.want)
			}
			// Each channel after the first follows a 406 that closed the
			// one before, the probe's too, and no other: before, a probe
			// whose 406 named another argument opened one for it, and the
			// declare another, and the first was left open.
			if opened[true] != opened[false]+c.probed {
				t.Errorf("declared again, channels opened: short name %d, long name %d; want %d more", opened[false], opened[true], c.probed)
			}
		})
	}
}

// judged declares q's topology as the first connection does and as a
// consuming session does again, and says what came of its DLQ: the
// argument the broker's 406 names, or the DLQ's arguments once kept; and
// how many channels the second declare opened.
func judged(t *testing.T, q runtime.QueueSpec, long bool) (string, int) {
	t.Helper()
	err := runtime.DeclareTopology(dial(t), q)
	refusals, opened, againErr := runtime.DeclareTopologyAgain(dial(t), q)
	if againErr != nil {
		t.Fatalf("declared again: %v", againErr)
	}
	if err == nil {
		if len(refusals) != 0 {
			t.Errorf("declared again: %v, after the first declare passed", refusals)
		}
		return "kept " + queueArguments(t)[q.Topology.DeadLetterQueue], opened
	}
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
		t.Fatalf("DeclareTopology: %v, want a 406", err)
	}
	if long && !strings.HasSuffix(ae.Reason, "...") {
		t.Errorf("the 406 was not cut: %q", ae.Reason)
	}
	key, _, _ := strings.Cut(strings.TrimPrefix(ae.Reason, "PRECONDITION_FAILED - inequivalent arg '"), "'")
	if len(refusals) != 1 || !strings.Contains(refusals[0].Error(), "inequivalent arg '"+key+"'") {
		t.Errorf("declared again: %v, want the 406 of %s", refusals, key)
	}
	return "refused " + key, opened
}
