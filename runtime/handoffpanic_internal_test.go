package runtime

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/runtime/internal/confirm"
	"github.com/lily-mq/lily/runtime/internal/guard"
	"github.com/lily-mq/lily/runtime/internal/outcome"
	"github.com/lily-mq/lily/runtime/internal/trial"
)

// panicsAfterWrite lets every copy be written, then panics, as a publisher
// would that failed between its write and the broker's answer; it lists
// the destinations it wrote to.
type panicsAfterWrite struct{ written chan string }

func (h panicsAfterWrite) Publish(_ confirm.Bounds, _, key string, _ amqp.Publishing, writing func() error) outcome.HandoffEvidence {
	if err := writing(); err != nil {
		return outcome.HandoffEvidence{Destination: key, Status: outcome.HandoffFailed, Detail: err.Error()}
	}
	h.written <- key
	panic("after the write")
}

func (panicsAfterWrite) CloseBy(time.Time) {}

// A handoff that panics after its copy was written may have left the copy
// in its destination: the delivery is requeued without a second copy, even
// to the DLQ of a quorum queue at its delivery limit, and the report lists
// the copy as a possible one.
func TestHandoffPanicAfterTheWriteKeepsTheCopy(t *testing.T) {
	t.Parallel()
	spec := refusingSpec("panic-test")
	spec.Topology.Type, spec.Topology.DeliveryLimit = "quorum", 1
	spec.Topology.RetryDelays = []time.Duration{time.Hour}
	spec.MaxAttempts = 3
	retry := func(context.Context, RawDelivery) error { return errors.New("retry me") }
	c, err := NewConsumer(spec, Routes{{Type: "t", Version: 1, ContentType: "application/json"}: retry}, Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	j := trial.Open(c, returningBroker{}).(*journeys)
	defer j.Close()
	h := panicsAfterWrite{written: make(chan string, 2)}
	j.r.handoff = h
	// Returned once already: the quorum queue would dead-letter it at the next.
	d := versionOne(1)
	d.Redelivered, d.Headers[guard.HeaderDeliveryCount] = true, int64(1)
	rec := j.Deliver(d).(Record)
	close(h.written)
	var copies []string
	for key := range h.written {
		copies = append(copies, key)
	}
	if len(copies) != 1 {
		t.Errorf("copies written to %q; want one, to the retry bucket", copies)
	}
	if rec.Path != PathRequeued || rec.Handoff != "failed" {
		t.Errorf("record %+v; want requeued after a failed handoff", rec)
	}
	if got := j.r.report.r.PossibleCopies; len(got) != 1 || got[0].MessageID != "m-1" {
		t.Errorf("possible copies %+v; want the one of m-1", got)
	}
}
