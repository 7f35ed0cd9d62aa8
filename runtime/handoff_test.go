package runtime_test

import (
	"bytes"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/runtime/internal/confirm"
	"github.com/lily-mq/lily/runtime/internal/outcome"
	"github.com/lily-mq/lily/runtime/internal/transport"
)

// newHandoffPublisher is a consumer's handoff publisher, driven alone.
func newHandoffPublisher(t *testing.T, url string, stepTimeout time.Duration, window int) *confirm.Publisher {
	dial := func() (*amqp.Connection, net.Conn, func(), error) {
		conn, socket, err := transport.Dial(url, amqp.Config{}, nil)
		return conn, socket, nil, err
	}
	conn := confirm.NewConn(dial, stepTimeout)
	t.Cleanup(conn.Close)
	return confirm.New(conn, window)
}

// always lets every publish be written: no report is sealed under it.
func always() error { return nil }

// Many handoffs in flight at once, half to a queue that does not exist: each
// Return must be matched to its own publish, never to a neighbour's.
func TestBrokerReturnsMatchTheirOwnPublish(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	h := newHandoffPublisher(t, brokerURL(t), 5*time.Second, 32)
	defer h.Close()
	const n = 400
	results := make([]outcome.HandoffEvidence, n)
	var wg sync.WaitGroup
	deadline := time.Now().Add(30 * time.Second)
	for i := range n {
		msg := order(t, strconv.Itoa(i))
		wg.Go(func() {
			dest := q.Topology.DeadLetterQueue
			if i%2 == 1 {
				dest = q.Name + ".missing"
			}
			results[i] = h.Publish(confirm.Bounds{Deadline: deadline}, "", dest, msg, always)
		})
	}
	wg.Wait()
	for i, ev := range results {
		want := outcome.HandoffConfirmed
		if i%2 == 1 {
			want = outcome.HandoffReturned
		}
		if ev.Status != want {
			t.Errorf("handoff %d to %s: %s (%s), want %s", i, ev.Destination, ev.Status, ev.Detail, want)
		}
	}
	assertCounts(t, map[string][2]int{q.Topology.DeadLetterQueue: {n / 2, 0}})
	seen := map[int]bool{}
	for _, d := range drain(t, q.Topology.DeadLetterQueue) {
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

// A handoff whose write the broker does not read (the proxy stops passing the
// client's bytes on, so the socket's buffers fill) ends at its step's end as
// timed out and a possible copy, instead of blocking; the publisher then
// opens a new connection, and the next handoff is confirmed. The stuck copy,
// never whole, is not enqueued. The stall holds the client's heartbeats
// too: the body is built before it (seconds under the race detector, tens
// of them on a loaded machine), and the connection asks for the longest
// heartbeat, so that the broker does not close the connection first.
func TestBrokerStuckHandoffWriteEndsAtTheStepTimeout(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	p := newProxy(t)
	const step = 3 * time.Second // carries the first dial on a loaded machine
	h := newHandoffPublisher(t, longHeartbeat(t, p.url()), step, 4)
	defer h.Close()
	handoff := func(msg amqp.Publishing) (outcome.HandoffEvidence, time.Duration) {
		start := time.Now()
		ev := h.Publish(confirm.Bounds{Deadline: start.Add(5 * time.Minute)}, "", q.Topology.DeadLetterQueue, msg, always)
		return ev, time.Since(start)
	}
	if ev, _ := handoff(order(t, "before")); ev.Status != outcome.HandoffConfirmed {
		t.Fatalf("first handoff: %+v", ev)
	}

	stuck := order(t, "stuck")
	stuck.Body = bytes.Repeat([]byte{' '}, 96<<20) // more than the proxy and the kernel buffers hold
	p.Stall(faults.ToBroker)
	ev, took := handoff(stuck)
	// Not before the step's end, and at it: far before the 5 min deadline,
	// with room for a loaded machine to tear the connection down.
	if ev.Status != outcome.HandoffTimedOut || ev.Detail != "the publish did not return in time" || !ev.Published ||
		took < step || took > step+time.Minute {
		t.Errorf("stuck handoff after %s: %+v; want timed out, a possible copy, after about %s", took, ev, step)
	}
	p.Resume()

	if ev, _ := handoff(order(t, "after")); ev.Status != outcome.HandoffConfirmed {
		t.Fatalf("handoff after the stuck one: %+v", ev)
	}
	assertCounts(t, map[string][2]int{q.Topology.DeadLetterQueue: {2, 0}})
	var ids []string
	for _, d := range drain(t, q.Topology.DeadLetterQueue) {
		ids = append(ids, d.MessageId)
	}
	if !slices.Equal(ids, []string{"before", "after"}) {
		t.Errorf("the DLQ holds %v", ids)
	}
}

// A handoff that waited for the channel while another handoff dialled, and
// has no time left when it gets it, gives up without publishing: it must not
// arm a watchdog that has already fired and close the connection the other
// handoff just opened.
func TestBrokerHandoffOutOfTimeBehindADialLeavesTheConnection(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	p := newProxy(t)
	p.Delay(150 * time.Millisecond) // every frame: the dial's handshake takes about a second
	h := newHandoffPublisher(t, p.url(), 5*time.Second, 4)
	defer h.Close()
	first := make(chan outcome.HandoffEvidence, 1)
	go func() {
		first <- h.Publish(confirm.Bounds{Deadline: time.Now().Add(30 * time.Second)}, "", q.Topology.DeadLetterQueue, order(t, "first"), always)
	}()
	eventually(t, 2*time.Minute, "the first handoff dialling", func() bool { return len(p.Conns()) > 0 })
	late := h.Publish(confirm.Bounds{Deadline: time.Now().Add(300 * time.Millisecond)}, "", q.Topology.DeadLetterQueue, order(t, "late"), always)
	if late.Status != outcome.HandoffTimedOut || late.Published {
		t.Errorf("handoff out of time: %+v; want timed out, not published", late)
	}
	if ev := <-first; ev.Status != outcome.HandoffConfirmed {
		t.Errorf("the dialling handoff: %+v; want confirmed", ev)
	}
	if conns := p.Conns(); len(conns) != 1 {
		t.Errorf("connections through the proxy: %q; want the one dialled", conns)
	}
	p.Delay(0)
	assertCounts(t, map[string][2]int{q.Topology.DeadLetterQueue: {1, 0}})
}

// A handoff whose channel open the broker leaves unanswered for a whole step
// abandons the connection, as the Publisher's Sends do (they share the
// code): the next handoff dials a new one rather than open another channel
// that hangs on it. Once the broker answers, a handoff is confirmed.
func TestBrokerHandoffUnansweredOpenAbandonsTheConnection(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	p := newProxy(t)
	var drop atomic.Bool
	var starts atomic.Int32
	p.Intercept(func(f faults.Frame) faults.Action {
		switch {
		case f.Dir == faults.ToBroker && f.Is(faults.ConnectionStartOk):
			starts.Add(1)
		case f.Dir == faults.ToClient && f.Is(faults.Method{Class: 20, ID: 11}) && drop.Load(): // channel.open-ok
			return faults.Drop
		}
		return faults.Forward
	})
	h := newHandoffPublisher(t, p.url(), time.Second, 4)
	defer h.Close()
	handoff := func(id string) outcome.HandoffEvidence {
		return h.Publish(confirm.Bounds{Deadline: time.Now().Add(30 * time.Second)}, "", q.Topology.DeadLetterQueue, order(t, id), always)
	}
	drop.Store(true)
	for _, id := range []string{"first", "second"} {
		if ev := handoff(id); ev.Status != outcome.HandoffTimedOut || ev.Published {
			t.Errorf("handoff %s while the open goes unanswered: %+v; want timed out, not published", id, ev)
		}
	}
	if n := starts.Load(); n != 2 {
		t.Errorf("%d connections dialled for two handoffs whose opens went unanswered; want 2", n)
	}
	drop.Store(false)
	if ev := handoff("after"); ev.Status != outcome.HandoffConfirmed {
		t.Errorf("handoff once the broker answers: %+v", ev)
	}
	assertCounts(t, map[string][2]int{q.Topology.DeadLetterQueue: {1, 0}})
	if got := ids(t, q.Topology.DeadLetterQueue); fmt.Sprint(got) != "map[after:1]" {
		t.Errorf("the DLQ holds %v", got)
	}
}
