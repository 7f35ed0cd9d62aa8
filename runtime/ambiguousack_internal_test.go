package runtime

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/runtime/internal/outcome"
	"github.com/lily-mq/lily/runtime/internal/trial"
)

// firstAckFails confirms every handoff and fails the first ACK written with
// ackErr; it counts the handoffs.
type firstAckFails struct {
	ackErr error
	mu     sync.Mutex
	acks   int
	copies int
}

func (b *firstAckFails) Publish(_, key string, _ amqp.Publishing) outcome.HandoffEvidence {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.copies++
	return outcome.HandoffEvidence{Destination: key, Status: outcome.HandoffConfirmed, Published: true}
}

func (b *firstAckFails) Ack(uint64, bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.acks++; b.acks == 1 {
		return b.ackErr
	}
	return nil
}

func (*firstAckFails) Nack(uint64, bool, bool) error { return nil }

// A confirmed handoff whose original's ACK was not written, or whose
// outcome is unknown, keeps its confirm as completed work: the original's
// redelivery is settled from the record, without running the handler again
// or writing a second copy (the broker tier's
// TestBrokerConnectionLostBetweenConfirmAndAck, without a broker).
func TestConfirmKeptAfterAFailedAck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		ackErr     error
		settlement string
	}{
		{"not attempted", amqp.ErrClosed, "settlement not attempted"},
		{"ambiguous", errors.New("connection reset by peer"), "settlement ambiguous"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			spec := refusingSpec("kept-test")
			spec.Prefetch = 2
			var calls atomic.Int32
			c := refusingConsumer(t, spec, "t", Config{}, &calls)
			b := &firstAckFails{ackErr: tc.ackErr}
			j := trial.Open(c, b)
			defer j.Close()
			deliver := func(tag uint64) Record { return j.Deliver(versionOne(tag)).(Record) }
			first := deliver(1)
			if first.Path != PathUnresolved || first.Handoff != "confirmed" || first.Handler != "permanent" {
				t.Fatalf("first record %+v; want unresolved after a confirmed handoff", first)
			}
			if !strings.HasPrefix(first.Reason, tc.settlement) {
				t.Errorf("first record's reason %q; want it to start %q", first.Reason, tc.settlement)
			}
			again := deliver(2)
			if again.Path != PathAcked || again.Handler != "completed earlier" || !again.Redelivered || again.Handoff != "" {
				t.Errorf("redelivery's record %+v; want acked, completed earlier, without a handoff", again)
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("handler ran %d times; want once", n)
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.copies != 1 {
				t.Errorf("%d copies published; want one", b.copies)
			}
		})
	}
}
