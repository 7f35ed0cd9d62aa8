package runtime

import (
	"slices"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/runtime/internal/outcome"
	"github.com/lily-mq/lily/runtime/internal/trial"
)

// returningBroker returns every handoff as unroutable, as the broker does
// once the DLQ is deleted.
type returningBroker struct{ discardAcker }

func (returningBroker) Publish(_, key string, _ amqp.Publishing) outcome.HandoffEvidence {
	return outcome.HandoffEvidence{Destination: key, Status: outcome.HandoffReturned, Detail: "unroutable"}
}

// The pause before a failed handoff's requeue doubles with each earlier
// requeue of the same message, whether it has an id or not: a message
// without one (refused as poison for it, or of a producer that sends none)
// is known again by what its redelivery keeps, so a handoff that keeps
// failing does not requeue it every 250 ms. Another message without an id
// has a count of its own, and the records still name none.
func TestRequeuePauseGrowsForAMessageWithoutAnID(t *testing.T) {
	t.Parallel()
	grows := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second}
	noID := []envelope.Message{{Type: "audit.noted", Inbox: envelope.InboxNone,
		Profile: envelope.Profile{Kind: envelope.Headers, TypeHeader: "event", NoID: true, Version: envelope.Version{Fixed: 1}}}}
	for _, tc := range []struct {
		name     string
		messages []envelope.Message
		d        amqp.Delivery
		// rejection is the record's; id is the message id it names.
		rejection, id string
	}{
		{name: "poison with an id", rejection: "poison", id: "bad id with spaces",
			d: amqp.Delivery{MessageId: "bad id with spaces", Type: "t", ContentType: "application/json", Body: []byte(`{"n":1}`)}},
		{name: "poison without an id", rejection: "poison",
			d: amqp.Delivery{Type: "t", ContentType: "application/json", Body: []byte(`{"n":1}`)}},
		{name: "passed without an id", messages: noID,
			d: amqp.Delivery{ContentType: "application/json", Headers: amqp.Table{"event": "audit.noted"}, Body: []byte(`{"n":1}`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			spec := refusingSpec("keyless-test")
			spec.Messages = tc.messages
			wireType := "t"
			if tc.messages != nil {
				wireType = "audit.noted"
			}
			c := refusingConsumer(t, spec, wireType, Config{}, nil)
			var mu sync.Mutex
			var pauses []time.Duration
			c.hooks.requeuePause = func(d time.Duration) time.Duration {
				mu.Lock()
				pauses = append(pauses, d)
				mu.Unlock()
				return 0 // the plan is what is checked; TestRequeueNackWaitsItsPause waits
			}
			j := trial.Open(c, returningBroker{})
			defer j.Close()
			deliver := func(tag uint64, d amqp.Delivery) Record {
				d.DeliveryTag, d.Redelivered = tag, tag > 1
				rec := j.Deliver(&d).(Record)
				if rec.Path != PathRequeued || rec.Handoff != "returned" || rec.Rejection != tc.rejection || rec.MessageID != tc.id {
					t.Errorf("delivery %d: record %+v; want requeued after a returned handoff, rejection %q, message id %q", tag, rec, tc.rejection, tc.id)
				}
				return rec
			}
			for i := range grows {
				deliver(uint64(i+1), tc.d)
			}
			mu.Lock()
			got := slices.Clone(pauses)
			mu.Unlock()
			if !slices.Equal(got, grows) {
				// Fatal: the check of another message below reads the last
				// pause, which a path without requeues never had.
				t.Fatalf("pauses before the requeues of one message: %v; want %v", got, grows)
			}
			if tc.id != "" {
				return
			}
			// Another body is another message: its first requeue waits the
			// first pause.
			other := tc.d
			other.Body = []byte(`{"n":2}`)
			deliver(uint64(len(grows)+1), other)
			mu.Lock()
			last := pauses[len(pauses)-1]
			mu.Unlock()
			if last != grows[0] {
				t.Errorf("another message without an id paused %s; want %s", last, grows[0])
			}
		})
	}
}

// timedReturns returns every handoff as unroutable, as returningBroker
// does, and notes when it answered each and when each NACK came.
type timedReturns struct {
	mu               sync.Mutex
	answered, nacked []time.Time
}

func (b *timedReturns) Publish(exchange, key string, p amqp.Publishing) outcome.HandoffEvidence {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.answered = append(b.answered, time.Now())
	return returningBroker{}.Publish(exchange, key, p)
}

func (*timedReturns) Ack(uint64, bool) error { return nil }

func (b *timedReturns) Nack(uint64, bool, bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nacked = append(b.nacked, time.Now())
	return nil
}

// The requeue after a failed handoff waits its pause before the NACK, not
// only plans it: a NACK at once would bring the message straight back, a
// hot redelivery loop. The NACK comes at least the pause after the
// handoff's answer (a lower bound, which slowness cannot break).
func TestRequeueNackWaitsItsPause(t *testing.T) {
	t.Parallel()
	c := refusingConsumer(t, refusingSpec("paced-test"), "t", Config{}, nil)
	pauses := make(chan time.Duration, 1)
	c.hooks.requeuePause = func(d time.Duration) time.Duration { pauses <- d; return d }
	b := &timedReturns{}
	j := trial.Open(c, b)
	defer j.Close()
	rec := j.Deliver(versionOne(1)).(Record)
	if rec.Path != PathRequeued || rec.Handoff != "returned" {
		t.Fatalf("record %+v; want requeued after a returned handoff", rec)
	}
	pause := <-pauses
	if pause <= 0 {
		t.Fatalf("planned pause %s; want one", pause)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.answered) != 1 || len(b.nacked) != 1 {
		t.Fatalf("%d handoffs answered, %d NACKs; want one of each", len(b.answered), len(b.nacked))
	}
	if waited := b.nacked[0].Sub(b.answered[0]); waited < pause {
		t.Errorf("the NACK came %s after the handoff's answer; want at least its pause, %s", waited, pause)
	}
}

// A producer's x-delivery-count on a classic queue, where the broker writes
// none, counts no earlier requeue: the first requeue's pause is the
// shortest. On a quorum queue the broker's count paces it.
func TestRequeuePauseIgnoresAClassicQueuesDeliveryCount(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		queueType string
		want      time.Duration
	}{{"classic", 250 * time.Millisecond}, {"quorum", 2 * time.Second}} {
		spec := refusingSpec("count-" + tc.queueType)
		spec.Topology.Type = tc.queueType
		c := refusingConsumer(t, spec, "t", Config{}, nil)
		pauses := make(chan time.Duration, 1)
		c.hooks.requeuePause = func(d time.Duration) time.Duration { pauses <- d; return 0 }
		j := trial.Open(c, returningBroker{})
		d := versionOne(2)
		d.Headers["x-delivery-count"] = int64(3)
		rec := j.Deliver(d).(Record)
		j.Close()
		if rec.Path != PathRequeued || rec.Handoff != "returned" {
			t.Fatalf("%s: record %+v; want requeued after a returned handoff", tc.queueType, rec)
		}
		if got := <-pauses; got != tc.want {
			t.Errorf("%s queue, x-delivery-count 3: the requeue paused %s; want %s", tc.queueType, got, tc.want)
		}
	}
}

// A message with an id is paced by its key, at no cost to its journey; one
// without is paced by a fingerprint no key the guard passes can be.
func TestRequeueKey(t *testing.T) {
	keyed := &amqp.Delivery{MessageId: "m-1", Type: "t", Body: []byte("{}")}
	if k := requeueKey(keyed, nil); k != "m-1" {
		t.Errorf("requeue key %q; want the message id", k)
	}
	if n := testing.AllocsPerRun(100, func() { requeueKey(keyed, nil) }); n != 0 {
		t.Errorf("a keyed requeue key costs %v allocations", n)
	}
	keyless := &amqp.Delivery{Type: "t", Body: []byte("{}")}
	k := requeueKey(keyless, nil)
	if k == "" || k[0] >= 0x20 && k[0] <= 0x7e || requeueKey(keyless, nil) != k {
		t.Errorf("keyless requeue key %q: want one, starting with no printable byte, the same each time", k)
	}
	for _, other := range []amqp.Delivery{{Type: "u", Body: []byte("{}")}, {Type: "t", Body: []byte("{ }")}, {Type: "t", CorrelationId: "c", Body: []byte("{}")}} {
		if requeueKey(&other, nil) == k {
			t.Errorf("%+v shares the requeue key of %+v", other, keyless)
		}
	}
}
