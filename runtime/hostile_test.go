package runtime_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/internal/quarantine"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
	"github.com/lily-mq/lily/runtime/internal/guard"
	"github.com/lily-mq/lily/runtime/internal/transport"
)

// hostileMessage is one kind of message RabbitMQ 3.10 accepts and delivers
// that the AMQP client or Lily's guard refuses, and the rejection Lily must
// record for it.
type hostileMessage struct {
	name      string
	rejection string // "quarantined", "poison", "unsupported" or "oversized"
	publish   func(t *testing.T, queue string)
	// reencoded: the broker writes the header table anew when it stores the
	// message in a quorum queue, or dead-letters it, and the client then
	// decodes it ('L' becomes 'l').
	reencoded bool
}

// catalogue is every such kind: headers the client cannot decode, metadata
// and envelopes the guard refuses, versions and content types with no route,
// a body over the limit.
func catalogue(t *testing.T) []hostileMessage {
	var out []hostileMessage
	plain := func(name, rejection string, mutate func(*amqp.Publishing)) {
		out = append(out, hostileMessage{name: name, rejection: rejection, publish: func(t *testing.T, queue string) {
			m := order(t, "hostile-"+name)
			mutate(&m)
			publish(t, queue, m)
		}})
	}
	for name, m := range hostile(t) {
		out = append(out, hostileMessage{name: name, rejection: "poison", publish: func(t *testing.T, queue string) { publish(t, queue, m) }})
	}
	plain("version-not-an-integer", "poison", func(p *amqp.Publishing) { p.Headers[guard.HeaderVersion] = "1" })
	plain("timestamp-two-days-ahead", "poison", func(p *amqp.Publishing) { p.Timestamp = time.Now().Add(48 * time.Hour) })
	plain("correlation-id-with-escapes", "poison", func(p *amqp.Publishing) { p.CorrelationId = "c\x1b[0m" })
	plain("no-message-id", "poison", func(p *amqp.Publishing) { p.MessageId = "" })
	plain("no-content-type", "poison", func(p *amqp.Publishing) { p.ContentType = "" })
	plain("version-9", "unsupported", func(p *amqp.Publishing) { p.Headers[guard.HeaderVersion] = int64(9) })
	plain("xml", "unsupported", func(p *amqp.Publishing) { p.ContentType = "application/xml" })
	plain("body-over-the-limit", "oversized", func(p *amqp.Publishing) { p.Body = []byte(`{"order_id":"` + strings.Repeat("x", 5000) + `"}`) })
	// An x-death RabbitMQ's dead-lettering cannot read: NACKed for the
	// broker to dead-letter, as a body over the limit is, it crashes the
	// queue.
	plain("x-death-entry-not-a-table-on-a-body-over-the-limit", "poison", func(p *amqp.Publishing) {
		p.Body = []byte(`{"order_id":"` + strings.Repeat("x", 5000) + `"}`)
		p.Headers["x-death"] = []any{"x"}
	})
	plain("x-death-count-not-a-number", "poison", func(p *amqp.Publishing) {
		p.Headers["x-death"] = []any{amqp.Table{"reason": "rejected", "count": "many"}}
	})
	plain("tables-nested-33-deep-with-an-x-death-entry-not-a-table", "poison", func(p *amqp.Publishing) {
		p.Headers["deep"] = nestedTables(33)
		p.Headers["x-death"] = []any{"x"}
	})

	// What amqp091-go v1.17 refuses to decode, closing its connection.
	plain("tables-nested-33-deep", "quarantined", func(p *amqp.Publishing) { p.Headers["deep"] = nestedTables(33) })
	// Both: the record says why the client could not read it.
	plain("tables-nested-33-deep-on-a-body-over-the-limit", "quarantined", func(p *amqp.Publishing) {
		p.Body = []byte(`{"order_id":"` + strings.Repeat("x", 5000) + `"}`)
		p.Headers["deep"] = nestedTables(33)
	})
	plain("arrays-nested-33-deep", "quarantined", func(p *amqp.Publishing) { p.Headers["deep"] = nestedArrays(33) })
	plain("a-table-of-8193-entries", "quarantined", func(p *amqp.Publishing) {
		for i := range 8192 {
			p.Headers["h"+strconv.Itoa(i)] = int8(1)
		}
	})
	plain("an-array-of-8193-values", "quarantined", func(p *amqp.Publishing) { p.Headers["wide"] = make([]any, 8193) })
	out = append(out, hostileMessage{name: "a-field-of-type-L", rejection: "quarantined", reencoded: true, publish: func(t *testing.T, queue string) {
		if err := faults.PublishForged(brokerURL(t), queue, order(t, "hostile-a-field-of-type-L"), "n", 'L', []byte{0, 0, 0, 0, 0, 0, 0, 7}); err != nil {
			t.Fatal(err)
		}
	}})
	out = append(out, hostileMessage{name: "a-header-past-the-frame-size", rejection: "quarantined", publish: func(t *testing.T, queue string) {
		// Just under the frame size as published; x-death takes it past.
		m := order(t, "hostile-a-header-past-the-frame-size")
		m.Headers["big"] = strings.Repeat("v", 130_800)
		if err := faults.DeadLetterInto(brokerURL(t), queue, m); err != nil {
			t.Fatal(err)
		}
	}})
	return out
}

func nestedTables(n int) amqp.Table {
	v := amqp.Table{"leaf": "x"}
	for range n - 1 {
		v = amqp.Table{"n": v}
	}
	return v
}

func nestedArrays(n int) []any {
	v := []any{"leaf"}
	for range n - 1 {
		v = []any{v}
	}
	return v
}

// The hostile catalogue, mixed among good messages, on a classic and on a
// quorum queue: every good message is handled once and acked, every hostile
// one is in the DLQ (the ones the client cannot decode dead-lettered by the
// broker, intact), no user code sees a hostile one, and the consumer keeps
// its one connection throughout. A quorum queue writes the header table of
// what it stores anew, so the 'L' field reaches the client as 'l': that
// message is a good one there.
func TestBrokerHostileCatalogue(t *testing.T) {
	t.Parallel()
	for _, queueType := range []string{"classic", "quorum"} {
		t.Run(queueType, func(t *testing.T) {
			t.Parallel()
			q := brokerSpec(t, func(q *runtime.QueueSpec) { q.Topology.Type = queueType })
			declareTopology(t, q)
			var mu sync.Mutex
			handled := map[string]int{}
			var steps *userSteps
			c := start(t, q, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
				mu.Lock()
				handled[msg.OrderID]++
				mu.Unlock()
				return nil
			}, func(cfg *runtime.Config) { steps = watch(cfg) })
			awaitConsumer(t, q.Name)
			hostile := catalogue(t)
			want := map[string]int{}
			good := map[string]bool{"good-last": true}
			refusedAgain := 0 // quarantined messages still undecodable in the DLQ
			for i, h := range hostile {
				good["good-"+strconv.Itoa(i)] = true
				publish(t, q.Name, order(t, "good-"+strconv.Itoa(i)))
				h.publish(t, q.Name)
				switch {
				case h.reencoded && queueType == "quorum":
					good["hostile-"+h.name] = true
				case h.rejection == "quarantined" && !h.reencoded:
					refusedAgain++
					fallthrough
				default:
					want[h.rejection]++
				}
			}
			publish(t, q.Name, order(t, "good-last"))
			dead := 0
			for _, n := range want {
				dead += n
			}
			recs := c.await(len(good) + dead)

			got := map[string]int{}
			for _, rec := range recs {
				switch {
				case rec.Rejection == "":
					wantPath(t, rec, runtime.PathAcked)
				case rec.Rejection == "quarantined" || rec.Rejection == "oversized":
					wantPath(t, rec, runtime.PathBrokerDeadLettered)
				default:
					wantPath(t, rec, runtime.PathDeadLettered)
				}
				got[rec.Rejection]++
				if rec.Rejection == "quarantined" && (rec.Duration > 10*time.Second || !strings.HasPrefix(rec.Reason, "quarantined: ")) {
					t.Errorf("quarantined record %+v", rec)
				}
			}
			want[""] = len(good)
			for kind, n := range want {
				if got[kind] != n {
					t.Errorf("%d records rejected %q, want %d (%v)", got[kind], kind, n, got)
				}
			}
			mu.Lock()
			for id, n := range handled {
				if n != 1 || !good[id] {
					t.Errorf("handler saw %s %d times", id, n)
				}
			}
			if len(handled) != len(good) {
				t.Errorf("handler saw %d messages, want the %d good ones", len(handled), len(good))
			}
			mu.Unlock()
			steps.expect(t, good)
			if n := c.reconnects(); n != 0 {
				t.Errorf("%d reconnects; the hostile messages must not cost one", n)
			}
			assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {dead, 0}})
			rep := c.stop()
			if len(rep.Lost) != 0 || len(rep.Unresolved) != 0 || rep.Counts[runtime.PathBrokerDeadLettered] != want["quarantined"]+want["oversized"] {
				t.Errorf("report %s (lost %q)", rep, rep.Lost)
			}

			// The DLQ holds the originals the client could not decode, intact:
			// read through the filter, they are refused again.
			refused := 0
			for _, d := range drainFiltered(t, q.Topology.DeadLetterQueue) {
				if _, ok := d.Headers[quarantine.Header]; ok {
					refused++
				}
			}
			if refused != refusedAgain {
				t.Errorf("%d DLQ messages refused again by the filter, want %d", refused, refusedAgain)
			}
		})
	}
}

// drainFiltered takes every message out of a queue, reading through the
// quarantine filter: a message the client cannot decode arrives with its
// header table replaced.
func drainFiltered(t *testing.T, queue string) []amqp.Delivery {
	t.Helper()
	conn, _, err := transport.Dial(brokerURL(t), amqp.Config{FrameSize: 131072}, func(conn, _ net.Conn) net.Conn { return quarantine.New(conn, 131072) })
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return drainOn(t, conn, queue)
}

// Under amqps:// the filter reads AMQP frames, not ciphertext: the runtime
// terminates TLS beneath it. A TLS listener in front of the broker, with a
// certificate of the test's own, stands in for a broker that speaks TLS.
func TestBrokerQuarantineBeneathTLS(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t)
	declareTopology(t, q)
	deep := order(t, "deep-over-tls")
	deep.Headers["deep"] = nestedTables(40)
	publish(t, q.Name, deep, order(t, "good-over-tls"))
	url := tlsFront(t, newTestCA(t), false).url
	c := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error { return nil }, func(cfg *runtime.Config) { cfg.URLs = []string{url} })
	for _, rec := range c.await(2) {
		switch rec.MessageID {
		case "deep-over-tls":
			wantPath(t, rec, runtime.PathBrokerDeadLettered)
			if rec.Rejection != "quarantined" {
				t.Errorf("record %+v", rec)
			}
		default:
			wantPath(t, rec, runtime.PathAcked)
		}
	}
	if n := c.reconnects(); n != 0 {
		t.Errorf("%d reconnects", n)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {1, 0}})
}
