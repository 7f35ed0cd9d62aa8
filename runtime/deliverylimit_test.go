package runtime_test

import (
	"context"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
	"github.com/lily-mq/lily/runtime/internal/guard"
)

// Broker tests for a quorum queue's delivery limit: the broker dead-letters
// a message returned to the queue more times than the limit, without Lily's
// failure facts, so Lily dead-letters it by its own handoff first.

// deferring is an inbox that can never decide a claim, as when another
// worker holds its lease: each delivery is requeued without an application
// retry, and each requeue is a return the quorum queue counts.
type deferring struct{}

func (deferring) Begin(context.Context, string, string) (runtime.InboxTx, error) {
	return nil, errors.New("lease held by another worker")
}

// A message the inbox keeps deferring is requeued (paced) until its returns
// reach the limit; then, instead of the return at which the broker would
// dead-letter it bare, Lily hands it to the DLQ with its failure facts.
func TestBrokerDeliveryLimitIsReachedByLily(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, func(q *runtime.QueueSpec) { q.Topology.Type, q.Topology.DeliveryLimit = "quorum", 2 })
	declareTopology(t, q)
	publish(t, q.Name, order(t, "deferred-1"))
	c := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		t.Error("the handler ran for a delivery the inbox deferred")
		return nil
	}, func(cfg *runtime.Config) { cfg.Inbox = deferring{} })
	recs := c.await(3)
	wantPaths(t, recs, map[runtime.Path]int{runtime.PathRequeued: 2, runtime.PathDeadLettered: 1})
	// The third delivery, after the two returns the broker counted.
	dead := recs[slices.IndexFunc(recs, func(r runtime.Record) bool { return r.Path == runtime.PathDeadLettered })]
	if !strings.HasPrefix(dead.Reason, "delivery limit 2 reached (x-delivery-count 2): deferred") {
		t.Errorf("record %+v", dead)
	}
	c.stop()
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {1, 0}})
	d := drain(t, q.Topology.DeadLetterQueue)[0]
	if r, _ := header(t, d, guard.HeaderFailureReason).(string); !strings.Contains(r, "delivery limit 2 reached") || d.MessageId != "deferred-1" {
		t.Errorf("the DLQ copy: %s, %v", d.MessageId, d.Headers)
	}
}

// The main queue carries its delivery limit; the DLQ carries none, so that
// inspecting it (a get, then a requeue) can never drop a copy. RabbitMQ 3.10
// has no default limit and reads -1 as "dead-letter at once", so there the
// DLQ carries no argument at all. A DLQ that exists with a limit is refused
// (TestBrokerEstateDLQArgumentsAreRefused).
func TestBrokerQuorumDLQHasNoDeliveryLimit(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, func(q *runtime.QueueSpec) { q.Topology.Type, q.Topology.DeliveryLimit = "quorum", 0 })
	declareTopology(t, q)
	args := queueArguments(t)
	if !strings.Contains(args[q.Name], `{"x-delivery-limit",20}`) {
		t.Errorf("main queue arguments %s, want the default limit of 20", args[q.Name])
	}
	if strings.Contains(args[q.Topology.DeadLetterQueue], "x-delivery-limit") {
		t.Errorf("DLQ arguments %s, want no delivery limit", args[q.Topology.DeadLetterQueue])
	}

}

// queueArguments reads every queue's arguments from the broker, as
// rabbitmqctl prints them.
func queueArguments(t *testing.T) map[string]string {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", "list_queues", "-q", "--no-table-headers", "name", "arguments").Output()
	if err != nil {
		t.Fatalf("rabbitmqctl list_queues: %v", err)
	}
	args := map[string]string{}
	for line := range strings.Lines(string(out)) {
		if name, a, ok := strings.Cut(strings.TrimSpace(line), "\t"); ok {
			args[name] = a
		}
	}
	return args
}
