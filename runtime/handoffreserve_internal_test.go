package runtime

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/runtime/internal/confirm"
	"github.com/lily-mq/lily/runtime/internal/decide"
	"github.com/lily-mq/lily/runtime/internal/outcome"
	"github.com/lily-mq/lily/runtime/internal/trial"
)

// lateAnswer stands for a slow destination (a quorum queue waiting for its
// majority): the broker's answer to a handoff's copy comes as the wait for
// it ends, at the bounds' Deadline, the latest the publisher takes it in
// time (with a step timeout longer than the reserve, as the default 5 s
// is). It answers status, the copy written.
type lateAnswer struct {
	status outcome.HandoffStatus
	bounds chan confirm.Bounds
}

func (h lateAnswer) Publish(b confirm.Bounds, _, key string, _ amqp.Publishing, writing func() error) outcome.HandoffEvidence {
	h.bounds <- b
	if err := writing(); err != nil {
		return outcome.HandoffEvidence{Destination: key, Status: outcome.HandoffFailed, Detail: err.Error()}
	}
	time.Sleep(time.Until(b.Deadline))
	return outcome.HandoffEvidence{Destination: key, Status: h.status, Published: true}
}

func (lateAnswer) CloseBy(time.Time) {}

// The wait for a handoff's confirm ends before the delivery's budget does,
// leaving a slice of the reserve for what follows it: the ACK of the
// original after a confirm that came at the last moment, or its requeue
// after a confirm that never came. Spent on the wait, the budget would
// leave the original unsettled until its channel is recycled.
func TestHandoffConfirmWaitLeavesTheSettlement(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status outcome.HandoffStatus
		path   Path
	}{
		{outcome.HandoffConfirmed, PathDeadLettered},
		{outcome.HandoffTimedOut, PathRequeued},
	} {
		t.Run(tc.status.String(), func(t *testing.T) {
			t.Parallel()
			const step = 100 * time.Millisecond
			spec := refusingSpec("reserve-test")
			spec.HandlerTimeout = 10 * time.Millisecond
			// The least budget NewConsumer takes: the handoff starts with
			// a little more than its reserve.
			spec.SettlementBudget = spec.HandlerTimeout + 4*step + decide.HandoffReserve
			c := refusingConsumer(t, spec, "t", Config{StepTimeout: step}, nil)
			j := trial.Open(c, returningBroker{}).(*journeys)
			defer j.Close()
			h := lateAnswer{status: tc.status, bounds: make(chan confirm.Bounds, 1)}
			j.r.handoff = h
			rec := j.Deliver(versionOne(1)).(Record)
			b := <-h.bounds
			if !b.WriteBy.Before(b.Deadline) {
				t.Errorf("bounds %+v: a copy written at its WriteBy has no time for its confirm", b)
			}
			if rec.Path != tc.path || rec.Handoff != tc.status.String() || rec.Handler != "permanent" {
				t.Errorf("record %+v; want path %s after a handoff %s as its wait ended", rec, tc.path, tc.status)
			}
		})
	}
}
