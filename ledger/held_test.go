package ledger

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/internal/services"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/topology"
)

// "In no queue" is the broker's word: a delivery held unacked on a channel
// still open is in no queue a basic.get reaches. The drain closes the proxy
// the consumers went through first, so that what they hold returns to its
// queue and is drained; a consumer it cannot close (one that reached the
// broker another way) is a problem naming its queue, whatever the records
// say, since what it holds would be deleted with the queue.
func TestTheDrainSeesDeliveriesHeldUnacked(t *testing.T) {
	url, r := heldRun(t, "held")
	p, proxied, err := faults.ListenFor(url)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// One message held by a consumer that reached the broker directly, the
	// other by one through the proxy.
	direct := hold(t, url, r.spec.Name)
	viaProxy := hold(t, proxied, r.spec.Name)
	// The direct one's records say its work was acked.
	r.observe(runtime.Record{MessageID: direct, Attempt: 1, Path: runtime.PathAcked, Handler: "ok", Reason: "handled"})
	r.succeeded[workKey{direct, 1}] = true
	r.runs[workKey{direct, 1}] = 1
	r.noteEnding(ending{workKey{direct, 1}, "ok"})

	drainFinds(t, r, []*faults.Proxy{p}, viaProxy, r.spec.Name+" still had 1 consumer", direct)
}

// drainFinds drains r through proxies and checks that returned, a message
// held on a connection the drain closes, is back in the main queue,
// redelivered, and that the accounting has a problem saying problem of
// held, a message the drain cannot bring back.
func drainFinds(t *testing.T, r *run, proxies []*faults.Proxy, returned, problem, held string) {
	t.Helper()
	queued, err := r.drain(proxies...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("drain found %v", queued)
	if f := queued[returned]; len(f) != 1 || f[0].fate != InMain || !f[0].redelivered {
		t.Errorf("the message %s held on a connection the drain closes: found %v, want one redelivered copy in the main queue", returned, f)
	}
	res := account(r.evidence(nil, queued, map[string]int{}))
	t.Logf("fates %v problems %q", res.Fates, res.Problems)
	for _, p := range res.Problems {
		if strings.Contains(p, problem) {
			return
		}
	}
	t.Errorf("no problem says %q, for %s held where the drain cannot reach it", problem, held)
}

// hold consumes one delivery from queue at url, on a connection the test
// closes at its end, and leaves it unacked; it returns its message id.
func hold(t *testing.T, url, queue string) string {
	t.Helper()
	ch := holder(t, url, "")
	if err := ch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-ds:
		return d.MessageId
	case <-time.After(5 * time.Second):
		t.Fatal("no delivery to hold")
		return ""
	}
}

// A delivery can be held unacked on a channel that has no consumer: one
// taken by a basic.get without auto-ack, or left after a basic.cancel. The
// passive declare counts no consumer, so the drain closes the run's consume
// connections by name, whatever way they reached the broker (on a cluster
// no proxy covers them), and then asks the broker how many messages each
// queue of the run still has unacknowledged: what another connection holds
// is a problem naming its queue, whatever the records say.
func TestTheDrainSeesDeliveriesHeldWithoutAConsumer(t *testing.T) {
	url, r := heldRun(t, "got")
	// One message got by a connection named as the run's consumer's, the
	// other by a connection of no name; neither through a proxy.
	named := got(t, url, r.spec.Name, faults.ConnectionName(r.spec.Name, "consume"))
	other := got(t, url, r.spec.Name, "")
	for _, id := range []string{named, other} {
		r.observe(runtime.Record{MessageID: id, Attempt: 1, Path: runtime.PathAcked, Handler: "ok", Reason: "handled"})
		r.succeeded[workKey{id, 1}] = true
		r.runs[workKey{id, 1}] = 1
		r.noteEnding(ending{workKey{id, 1}, "ok"})
	}

	drainFinds(t, r, nil, named, r.spec.Name+" had 1 messages unacknowledged", other)
}

// got takes one delivery from queue at url by a basic.get without
// auto-ack, on a connection named name (none when "") that the test closes
// at its end, and leaves it unacked; it returns its message id.
func got(t *testing.T, url, queue, name string) string {
	t.Helper()
	d, ok, err := holder(t, url, name).Get(queue, false)
	if err != nil || !ok {
		t.Fatalf("no delivery to hold: %v", err)
	}
	return d.MessageId
}

// holder is a channel on a connection to url named name (none when ""),
// which the test closes at its end.
func holder(t *testing.T, url, name string) *amqp.Channel {
	t.Helper()
	props := amqp.Table{}
	if name != "" {
		props["connection_name"] = name
	}
	conn, err := amqp.DialConfig(url, amqp.Config{Properties: props})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// heldRun is a run of two messages published to a classic queue of its own,
// named for what the test holds, deleted when the test ends, whose drain
// waits a second for consumers to go.
func heldRun(t *testing.T, what string) (url string, r *run) {
	t.Helper()
	url = services.RabbitMQ(t)
	r = newRun(Config{N: 2, BrokerURL: url}, spec(fmt.Sprintf("lilyledger.%s.%06x", what, rand.Uint32()&0xffffff), topology.Classic))
	r.consumersGone = time.Second
	r.assign()
	if err := r.declare(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.deleteQueues)
	if err := r.publish(context.Background()); err != nil {
		t.Fatal(err)
	}
	return url, r
}
