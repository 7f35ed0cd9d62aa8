package runtime_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
)

// ACKs and broker-native NACKs interleaved, finishing out of order, through
// one settler: a multiple ACK must never cover a delivery that was NACKed or
// is still running. Every fifth message is oversized (NACK, dead-lettered by
// the broker); the others succeed after a random pause. Each message must end
// exactly where its path says, and the ACKs go out in no more frames than
// there were ACKs (the frame choice itself is TestSettlerWriteChoosesFrames').
func TestBrokerSettlerInterleavesAcksAndNacks(t *testing.T) {
	t.Parallel()
	const n = 600
	q := brokerSpec(t, func(q *runtime.QueueSpec) { q.Prefetch, q.Concurrency = 64, 16 })
	declareTopology(t, q)
	var oversized []string
	msgs := make([]amqp.Publishing, 0, n)
	for i := range n {
		id := fmt.Sprintf("mixed-%03d", i)
		msg := &fixture.OrderPlacedV1{OrderID: id}
		if i%5 == 0 {
			msg.Padding = new(strings.Repeat("x", 2048))
			oversized = append(oversized, id)
		}
		msgs = append(msgs, produce(t, id, msg))
	}
	publish(t, q.Name, msgs...)

	p, url, err := faults.ListenFor(brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	var ackFrames atomic.Int32
	p.Intercept(func(f faults.Frame) faults.Action {
		if f.Dir == faults.ToBroker && f.Is(faults.BasicAck) && strings.HasSuffix(f.Conn, " consume") {
			ackFrames.Add(1)
		}
		return faults.Forward
	})
	r := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
		return nil
	}, func(cfg *runtime.Config) { cfg.URLs, cfg.Logger = []string{url}, slog.New(slog.DiscardHandler) })
	recs := r.await(n)
	var deadLettered []string
	acked := 0
	for _, rec := range recs {
		switch rec.Path {
		case runtime.PathAcked:
			acked++
		case runtime.PathBrokerDeadLettered:
			deadLettered = append(deadLettered, rec.MessageID)
		default:
			t.Errorf("%s took path %s: %+v", rec.MessageID, rec.Path, rec)
		}
	}
	slices.Sort(deadLettered)
	if acked != n-len(oversized) || !slices.Equal(deadLettered, oversized) {
		t.Errorf("%d acked, dead-lettered %v; want %d acked and %v", acked, deadLettered, n-len(oversized), oversized)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {len(oversized), 0}})
	rep := r.stop()
	if rep.AcksProven != acked || len(rep.Unresolved) != 0 {
		t.Errorf("report: %s", rep)
	}
	var inDLQ []string
	for _, d := range drain(t, q.Topology.DeadLetterQueue) {
		inDLQ = append(inDLQ, d.MessageId)
	}
	slices.Sort(inDLQ)
	if !slices.Equal(inDLQ, oversized) {
		t.Errorf("the DLQ holds %v, want %v", inDLQ, oversized)
	}
	frames := int(ackFrames.Load())
	if frames < 1 || frames > acked {
		t.Errorf("%d ACK frames for %d ACKs", frames, acked)
	}
	t.Logf("%d ACKs in %d frames", acked, frames)
}
