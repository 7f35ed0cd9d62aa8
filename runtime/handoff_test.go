package runtime_test

import (
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/runtime"
)

// Many handoffs in flight at once, half to a queue that does not exist: each
// Return must be matched to its own publish, never to a neighbour's.
func TestBrokerReturnsMatchTheirOwnPublish(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	h := runtime.NewTestHandoffPublisher(func() (*amqp.Connection, error) { return amqp.Dial(brokerURL()) }, 5*time.Second, 32)
	defer h.Close()
	const n = 400
	results := make([]runtime.HandoffEvidence, n)
	var wg sync.WaitGroup
	deadline := time.Now().Add(30 * time.Second)
	for i := range n {
		msg := order(t, strconv.Itoa(i))
		wg.Go(func() {
			dest := q.DeadLetterQueue
			if i%2 == 1 {
				dest = q.Name + ".missing"
			}
			results[i] = h.Publish(deadline, dest, msg)
		})
	}
	wg.Wait()
	for i, ev := range results {
		want := runtime.HandoffConfirmed
		if i%2 == 1 {
			want = runtime.HandoffReturned
		}
		if ev.Status != want {
			t.Errorf("handoff %d to %s: %s (%s), want %s", i, ev.Destination, ev.Status, ev.Detail, want)
		}
	}
	assertCounts(t, map[string][2]int{q.DeadLetterQueue: {n / 2, 0}})
	seen := map[int]bool{}
	for _, d := range drain(t, q.DeadLetterQueue) {
		i, _ := strconv.Atoi(d.MessageId)
		if i%2 == 1 || seen[i] {
			t.Errorf("DLQ holds message %d", i)
		}
		seen[i] = true
	}
	if n := h.Pending(); n != 0 {
		t.Errorf("%d handoff ids still pending", n)
	}
}
