package runtime_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"strconv"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/internal/frame"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
	"github.com/lily-mq/lily/runtime/internal/guard"
)

// brokenXDeath is a message whose x-death RabbitMQ 3.10.8's dead-lettering
// cannot read: how it differs from a good one, and the raw header entries
// written ahead of its own (nil for none).
type brokenXDeath struct {
	name   string
	mutate func(queue string, m *amqp.Publishing)
	first  func(queue string) []byte
	// grown: dead-lettered into the queue from a side queue
	// (faults.DeadLetterInto), its header growing past the frame size by
	// the broker's x-death: the broker closes a publisher's connection that
	// sends a frame over the frame size.
	grown bool
}

// oversized makes m's body larger than the fixture queue's 2,048 bytes.
func oversized(m *amqp.Publishing) {
	m.Body = []byte(`{"order_id":"` + strings.Repeat("x", 5000) + `"}`)
}

// brokenXDeaths are the shapes that crash the classic queue's process when
// the broker dead-letters the message (measured on 3.10.8): an entry that is
// not a table (function_clause in rabbit_dead_letter), a count of the
// queue's own entry that is not a number (badarith), on a body over the
// limit or on a header the client cannot decode, which Lily used to NACK
// for the broker to dead-letter; the same behind a good x-death, or a good
// count, of the same name, where the client keeps the last and the broker
// reads the first; and a count that is a float, within the limit:
// dead-lettered, the broker adds one to it and cannot encode the sum as the
// long it writes, so that every read of the copy closes the reader's
// connection (541); and a count of the queue's own entry that is not a
// number in a header that the broker's dead-lettering into the queue took
// past the frame size (it read only the side queue's entry), which the
// client refuses by its size alone.
func brokenXDeaths() []brokenXDeath {
	return []brokenXDeath{
		{name: "oversized-entry-not-a-table", mutate: func(_ string, m *amqp.Publishing) {
			oversized(m)
			m.Headers["x-death"] = []any{"x"}
		}},
		{name: "oversized-count-not-a-number", mutate: func(queue string, m *amqp.Publishing) {
			oversized(m)
			m.Headers["x-death"] = []any{amqp.Table{"queue": queue, "reason": "rejected", "exchange": "", "count": "many"}}
		}},
		{name: "count-a-float", mutate: func(queue string, m *amqp.Publishing) {
			m.Headers["x-death"] = []any{amqp.Table{"queue": queue, "reason": "delivery_limit", "count": 1.5}}
		}},
		{name: "quarantined-entry-not-a-table", mutate: func(_ string, m *amqp.Publishing) {
			m.Headers["deep"] = nestedTables(33)
			m.Headers["x-death"] = []any{"x"}
		}},
		{name: "oversized-entry-not-a-table-behind-a-good-x-death", mutate: func(queue string, m *amqp.Publishing) {
			oversized(m)
			m.Headers["x-death"] = []any{amqp.Table{"queue": queue, "reason": "rejected", "exchange": "", "count": int64(1), "routing-keys": []any{queue}}}
		}, first: func(string) []byte {
			return wireEntry("x-death", wireArray(wireString("x")))
		}},
		{name: "oversized-count-named-twice", mutate: func(_ string, m *amqp.Publishing) {
			oversized(m)
		}, first: func(queue string) []byte {
			return wireEntry("x-death", wireArray(wireTable(wireEntry("queue", wireString(queue)), wireEntry("reason", wireString("rejected")),
				wireEntry("count", wireString("many")), wireEntry("count", append([]byte{'l'}, binary.BigEndian.AppendUint64(nil, 1)...)))))
		}},
		{name: "grown-past-the-frame-size-count-not-a-number", grown: true, mutate: func(queue string, m *amqp.Publishing) {
			m.Headers["x-death"] = []any{amqp.Table{"queue": queue, "reason": "rejected", "exchange": "", "count": "many"}}
			// Just under the frame size as published; the side queue's
			// x-death entry takes it past.
			m.Headers["big"] = strings.Repeat("v", frame.Size-frame.Overhead-frame.ContentHeader(*m)-64)
		}},
	}
}

// wireEntry is a header table's entry as the wire carries it: the name's
// length and name, then value, its type and its bytes.
func wireEntry(name string, value []byte) []byte {
	return append(append([]byte{byte(len(name))}, name...), value...)
}

func wireString(s string) []byte { return wireLong('S', []byte(s)) }

func wireArray(values ...[]byte) []byte { return wireLong('A', bytes.Join(values, nil)) }

func wireTable(entries ...[]byte) []byte { return wireLong('F', bytes.Join(entries, nil)) }

// wireLong is a value of type t that four length bytes measure.
func wireLong(t byte, b []byte) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{t}, uint32(len(b))), b...)
}

// A message whose x-death the broker's dead-lettering cannot read is poison,
// whatever its size, and whether the client decodes its headers or not (the
// connection's filter reads x-death on the wire): Lily copies its sanitized
// identity and its body to the DLQ itself, and ACKs it. NACKed for the broker to dead-letter, as a body
// over the limit was, it crashed the classic queue's process (RabbitMQ
// 3.10.8): the message was not dead-lettered, the transient messages beside
// it were lost, and the consumer was cancelled. Each case runs on a queue of
// its own with good transient messages behind the hostile one: every good
// one is handled once and acked, the hostile one's copy is in the DLQ with
// its reason, the queue is empty, and the consumer keeps its session.
func TestBrokerBrokenXDeathIsPoison(t *testing.T) {
	t.Parallel()
	for _, tc := range brokenXDeaths() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := brokerSpec(t)
			declareTopology(t, q)
			hostile := order(t, "hostile-"+tc.name)
			hostile.DeliveryMode = amqp.Transient
			const goods = 10
			good := make([]amqp.Publishing, goods)
			ids := make([]string, goods)
			for i := range good {
				ids[i] = "good-" + strconv.Itoa(i)
				good[i] = order(t, ids[i])
				good[i].DeliveryMode = amqp.Transient
			}
			tc.mutate(q.Name, &hostile)
			switch {
			case tc.grown:
				if err := faults.DeadLetterInto(brokerURL(t), q.Name, hostile); err != nil {
					t.Fatal(err)
				}
			case tc.first != nil:
				if err := faults.PublishFirst(brokerURL(t), q.Name, hostile, tc.first(q.Name)); err != nil {
					t.Fatal(err)
				}
			default:
				publish(t, q.Name, hostile)
			}
			publish(t, q.Name, good...)

			var handled calls
			c := start(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
				handled.add(msg.OrderID)
				return nil
			})
			recs := c.await(goods + 1)
			for _, rec := range recs {
				if rec.MessageID == hostile.MessageId {
					if rec.Path != runtime.PathDeadLettered || rec.Rejection != "poison" || !strings.Contains(rec.Reason, "x-death") {
						t.Errorf("hostile record %+v, want dead-lettered as poison for its x-death", rec)
					}
					continue
				}
				wantPath(t, rec, runtime.PathAcked)
			}
			assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {1, 0}})
			handled.once(t, ids...) // the good ones, and not the hostile one
			if n := c.reconnects(); n != 0 {
				t.Errorf("%d reconnects", n)
			}
			rep := c.stop()
			if len(rep.Lost) != 0 || len(rep.Unresolved) != 0 || rep.Counts[runtime.PathDeadLettered] != 1 || rep.Counts[runtime.PathAcked] != goods {
				t.Errorf("report %s (lost %q)", rep, rep.Lost)
			}

			dead := drain(t, q.Topology.DeadLetterQueue)
			if len(dead) != 1 {
				t.Fatalf("%d messages in the DLQ, want the hostile one's copy", len(dead))
			}
			d := dead[0]
			if d.MessageId != hostile.MessageId || header(t, d, envelope.HeaderPoisonCopy) != true || header(t, d, guard.HeaderFailureKind) != "poison" ||
				!strings.Contains(header(t, d, guard.HeaderFailureReason).(string), "x-death") {
				t.Errorf("DLQ copy %s, headers %v: want the poison copy, its reason naming x-death", d.MessageId, d.Headers)
			}
			if _, ok := d.Headers["x-death"]; ok {
				t.Errorf("the poison copy carries x-death %v", d.Headers["x-death"])
			}
			if string(d.Body) != string(hostile.Body) {
				t.Errorf("the poison copy's body is %d bytes, want the original's %d", len(d.Body), len(hostile.Body))
			}
		})
	}
}

// On the broker, a CloudEvent whose x-death RabbitMQ's dead-lettering
// cannot read is quarantined by the connection's filter: poison, for a
// reason that names the quarantine, and its DLQ copy is built from the
// filter's stand-in header table, so it keeps the event's properties and
// body but none of its identity headers (cloudEvents_*). The harness does
// the same (lilytest's TestBrokenXDeathIsQuarantinedAsOnTheBroker, in the
// same words).
func TestBrokerForeignBrokenXDeathCopy(t *testing.T) {
	t.Parallel()
	q := foreignSpec(t)
	declareTopology(t, q)
	p, err := fixture.NewPaymentAuthorizedV1("pa-xd", &fixture.PaymentAuthorizedV1{PaymentID: "pa-xd"})
	if err != nil {
		t.Fatal(err)
	}
	p.Headers["x-death"] = []any{"junk"}
	publish(t, q.Name, p)
	h := &foreignHandler{seen: map[string][]seen{}}
	r, c := prepareRoutes(t, q, fixture.LilytestForeignRoutes(h))
	r.launch(c)
	rec := r.await(1)[0]
	r.stop()
	const why = "quarantined: header x-death: entry 0 is a string, not a table: RabbitMQ's dead-lettering cannot read it"
	wantPath(t, rec, runtime.PathDeadLettered)
	if rec.Rejection != "poison" || rec.Reason != "poison envelope: "+why {
		t.Errorf("record %+v, want poison: %s", rec, why)
	}
	dead := drain(t, q.Topology.DeadLetterQueue)
	if len(dead) != 1 {
		t.Fatalf("%d messages in the DLQ, want the poison copy", len(dead))
	}
	d := dead[0]
	if header(t, d, guard.HeaderFailureReason) != "poison envelope: "+why || header(t, d, envelope.HeaderPoisonCopy) != true {
		t.Errorf("DLQ copy headers %v", d.Headers)
	}
	for k := range d.Headers {
		if strings.HasPrefix(k, "cloudEvents") || k == "x-death" {
			t.Errorf("the copy carries %s: %v", k, d.Headers[k])
		}
	}
	if string(d.Body) != string(p.Body) || d.Type != p.Type || d.MessageId != p.MessageId {
		t.Errorf("copy %q, type %q, id %q; want the original's body and properties", d.Body, d.Type, d.MessageId)
	}
}
