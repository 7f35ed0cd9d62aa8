package runtime_test

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/topology"
)

// publishRouted publishes msg to exchange, mandatory, until the broker
// routes it to a queue rather than return it: until a binding is there.
func publishRouted(t *testing.T, exchange string, msg amqp.Publishing) {
	t.Helper()
	ch := channel(t, dial(t))
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	eventually(t, 30*time.Second, "a binding from "+exchange+" to route "+msg.MessageId, func() bool {
		dc, err := ch.PublishWithDeferredConfirm(exchange, "", true, false, msg)
		if err != nil || !dc.Wait() {
			t.Fatalf("publish to %s: %v, not confirmed", exchange, err)
		}
		select {
		case <-returns: // the Return comes before the confirm
			time.Sleep(100 * time.Millisecond)
			return false
		default:
			return true
		}
	})
}

// consumingFromOtherTeams runs a consumer of a queue bound to another team's
// fanout exchange, which declares its topology again every 300 ms, and sees
// a message sent to the exchange handled.
func consumingFromOtherTeams(t *testing.T) (exchange string, q runtime.QueueSpec, r *running, c *runtime.Consumer) {
	t.Helper()
	exchange, q = boundToOtherTeams(t, "lilytest.drift.")
	r, c = prepare(t, q, ack)
	c.SetTopologyEvery(300 * time.Millisecond)
	r.launch(c)
	publishTo(t, exchange, "", order(t, "before"))
	r.await(1)
	return exchange, q, r, c
}

// An owner that deletes its exchange and declares it again (the way to
// change its type or arguments) leaves it without the binding to our queue.
// The consuming session declares the topology again and binds it again,
// without a reconnect: a message sent to the exchange afterwards reaches the
// queue and is handled.
func TestBrokerExchangeDeclaredAgainIsBoundAgain(t *testing.T) {
	t.Parallel()
	exchange, q, r, _ := consumingFromOtherTeams(t)
	deleteExchanges(t, exchange)
	otherTeamsExchange(t, exchange, topology.Fanout)
	publishRouted(t, exchange, order(t, "after"))
	if rec := r.await(2)[1]; rec.MessageID != "after" || rec.Path != runtime.PathAcked {
		t.Errorf("after the exchange was declared again: %+v", rec)
	}
	if n := len(slices.DeleteFunc(r.events.all(), func(ev event) bool { return ev.stage != "connected" })); n != 1 {
		t.Errorf("%d sessions; the binding was to come back on the first", n)
	}
	r.stop()
	assertCounts(t, map[string][2]int{q.Name: {0, 0}})
}

// An external exchange deleted under a consuming session is told, at error
// and in Health, when the topology is declared again; the queue is consumed
// on meanwhile, and once the owner has declared the exchange anew its
// binding comes back and Health says nothing more.
func TestBrokerExternalExchangeDeletedWhileConsuming(t *testing.T) {
	t.Parallel()
	exchange, q, r, c := consumingFromOtherTeams(t)
	deleteExchanges(t, exchange)
	eventually(t, 30*time.Second, "Health to say the topology is refused", func() bool {
		h := c.Health()
		return h.Ready && strings.Contains(h.Why, "consuming, but the broker refused the topology when it was declared again")
	})
	if !r.events.has(func(ev event) bool {
		return ev.stage == "topology-drifted" && ev.level == slog.LevelError && strings.Contains(ev.detail, "external exchange or queue does not exist")
	}) {
		t.Error("no topology-drifted event at error")
	}
	publish(t, q.Name, order(t, "during"))
	if rec := r.await(2)[1]; rec.MessageID != "during" || rec.Path != runtime.PathAcked {
		t.Errorf("while the exchange was gone: %+v", rec)
	}
	otherTeamsExchange(t, exchange, topology.Fanout)
	eventually(t, 30*time.Second, "Health to say nothing more", func() bool { h := c.Health(); return h.Ready && h.Why == "" })
	if !r.events.has(func(ev event) bool { return ev.stage == "topology-mended" && ev.level == slog.LevelInfo }) {
		t.Error("no topology-mended event at info")
	}
	publishRouted(t, exchange, order(t, "after"))
	if rec := r.await(3)[2]; rec.MessageID != "after" || rec.Path != runtime.PathAcked {
		t.Errorf("after the exchange came back: %+v", rec)
	}
	rep := r.stop()
	if slices.ContainsFunc(rep.Lost, func(why string) bool { return strings.Contains(why, "does not exist") }) {
		t.Errorf("report's lost intake %q holds the refusal; intake was never lost", rep.Lost)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}})
}
