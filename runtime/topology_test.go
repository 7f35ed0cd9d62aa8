package runtime_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

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
