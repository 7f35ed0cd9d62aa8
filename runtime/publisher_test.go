package runtime_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"os/exec"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/internal/services"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
)

// The Publisher against the real broker: each test asserts what every Send
// answered and where every message is.

// publishTopology declares, for one test, a topic exchange of its own with a
// queue bound to "ok.#" and a queue bound to "full.#" that refuses every
// publish (max-length 0, overflow reject-publish), and returns their names.
func publishTopology(t *testing.T) (exchange, ok, full string) {
	t.Helper()
	name := brokerSpec(t).Name
	exchange, ok, full = name+".x", name+".ok", name+".full"
	ch := channel(t, dial(t))
	defer ch.Close()
	if err := ch.ExchangeDeclare(exchange, "topic", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for q, args := range map[string]amqp.Table{ok: nil, full: {"x-max-length": int32(0), "x-overflow": "reject-publish"}} {
		if _, err := ch.QueueDeclare(q, false, false, false, false, args); err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind(q, strings.TrimPrefix(q, name+".")+".#", exchange, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ch := channel(t, dial(t))
		defer ch.Close()
		_, _ = ch.QueueDelete(ok, false, false, false)
		_, _ = ch.QueueDelete(full, false, false, false)
		_ = ch.ExchangeDelete(exchange, false, false)
	})
	return exchange, ok, full
}

// closeSendChannel has the broker close p's channel and leave its
// connection: a Send to an exchange (<exchange>.gone, bound to nothing) that
// p found and that was deleted since. That Send ends unconfirmed.
func closeSendChannel(t *testing.T, p *runtime.Publisher, exchange string) {
	t.Helper()
	gone := exchange + ".gone"
	ch := channel(t, dial(t))
	defer ch.Close()
	if err := ch.ExchangeDeclare(gone, "fanout", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Send(context.Background(), message(t, gone, "", "unrouted")); !errors.Is(err, runtime.ErrReturned) {
		t.Fatalf("send to an exchange with no queue: %v", err)
	}
	if err := ch.ExchangeDelete(gone, false, false); err != nil {
		t.Fatal(err)
	}
	if err := p.Send(context.Background(), message(t, gone, "", "gone")); !errors.Is(err, runtime.ErrUnconfirmed) {
		t.Fatalf("send to an exchange deleted since: %v", err)
	}
}

// newPublisher is a Publisher to url with a window of window, closed when
// the test ends. Its step (30 s) outlasts any broker step of a passing run
// on a loaded machine: a test that needs a step to run out (a Send
// unconfirmed, an open unanswered, a channel closed at a stall) sets a
// short one through tweak.
func newPublisher(t *testing.T, url string, window int, tweak ...func(*runtime.Config)) *runtime.Publisher {
	t.Helper()
	cfg := runtime.Config{URLs: []string{url}, StepTimeout: 30 * time.Second, ReconnectMax: 500 * time.Millisecond}
	for _, f := range tweak {
		f(&cfg)
	}
	p, err := runtime.NewPublisher(cfg, window)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// message is OrderPlaced v1 with order id and message id id, to exchange
// with routing key key.
func message(t *testing.T, exchange, key, id string) runtime.Message {
	return runtime.Message{Exchange: exchange, RoutingKey: key, Publishing: order(t, id)}
}

// ids lists the message ids a queue holds, taking them out.
func ids(t *testing.T, queue string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, d := range drain(t, queue) {
		out[d.MessageId]++
	}
	return out
}

// Sends in flight at once, to a bound key, to a key nothing is bound to, to
// a queue that refuses every publish, and ones AMQP or the broker cannot
// take (a header of a type it has no word for, a message id over 255 bytes,
// an expiration that is not milliseconds, a delivery mode of 3, on which
// the broker would close the channel): each is answered on its own, and
// only the confirmed ones are in a queue.
func TestBrokerPublisherAnswersEachSend(t *testing.T) {
	t.Parallel()
	exchange, ok, full := publishTopology(t)
	p := newPublisher(t, brokerURL(t), 16)
	const n = 400
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		key := [...]string{"ok.", "nowhere.", "full.", "ok."}[i%4] + strconv.Itoa(i)
		m := message(t, exchange, key, strconv.Itoa(i))
		if i%4 == 3 {
			switch i / 4 % 4 {
			case 0:
				m.Headers = amqp.Table{"x-tags": []string{"a", "b"}}
			case 1:
				m.MessageId = strings.Repeat("m", 300)
			case 2:
				m.Expiration = "5s"
			case 3:
				m.DeliveryMode = 3
			}
		}
		wg.Go(func() { errs[i] = p.Send(context.Background(), m) })
	}
	wg.Wait()
	for i, err := range errs {
		var want error
		switch i % 4 {
		case 1:
			want = runtime.ErrReturned
		case 2:
			want = runtime.ErrNacked
		case 3:
			// Not written: none of the broker's answers.
			why := [...]string{"headers: x-tags: value []string not supported", "message_id: 300 bytes", "expiration: not a whole number", "delivery_mode: 3, not"}[i/4%4]
			if err == nil || errors.Is(err, runtime.ErrUnconfirmed) || !strings.Contains(err.Error(), why) {
				t.Errorf("send %d that AMQP cannot carry: %v, want not sent, %s", i, err, why)
			}
			continue
		}
		if want == nil && err != nil || want != nil && !errors.Is(err, want) {
			t.Errorf("send %d: %v, want %v", i, err, want)
		}
	}
	if err := errs[1]; err == nil || !strings.Contains(err.Error(), "routes key nowhere.1 to no queue") {
		t.Errorf("a returned send says %v", err)
	}
	assertCounts(t, map[string][2]int{ok: {n / 4, 0}, full: {0, 0}})
	got := ids(t, ok)
	for i := 0; i < n; i += 4 {
		if got[strconv.Itoa(i)] != 1 {
			t.Errorf("message %d is %d times in %s", i, got[strconv.Itoa(i)], ok)
		}
	}
	if len(got) != n/4 {
		t.Errorf("%s holds %d messages, want %d", ok, len(got), n/4)
	}
}

// A Send whose context has already ended writes nothing, though a publish
// slot and the channel are free: each is answered not sent, none is
// unconfirmed, and the queue holds only the Send before them.
func TestBrokerPublisherCancelledSendWritesNothing(t *testing.T) {
	t.Parallel()
	exchange, ok, _ := publishTopology(t)
	p := newPublisher(t, brokerURL(t), 16)
	if err := p.Send(context.Background(), message(t, exchange, "ok.warm", "warm")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 200 {
		err := p.Send(ctx, message(t, exchange, "ok.x", strconv.Itoa(i)))
		if err == nil || errors.Is(err, runtime.ErrUnconfirmed) {
			t.Fatalf("send %d with its context ended: %v, want not sent", i, err)
		}
	}
	assertCounts(t, map[string][2]int{ok: {1, 0}})
	if got := ids(t, ok); len(got) != 1 || got["warm"] != 1 {
		t.Errorf("%s holds %v, want only warm", ok, got)
	}
}

// The connection is cut while a window of Sends waits for its confirms.
// Every Send confirmed is in the queue; a Send that says it was not written
// is not; an unconfirmed one may be either. The Sends after the cut go
// through a new connection.
func TestBrokerPublisherConnectionCutMidWindow(t *testing.T) {
	t.Parallel()
	exchange, ok, _ := publishTopology(t)
	proxy := newProxy(t)
	p := newPublisher(t, proxy.url(), 64)
	const n = 600
	errs := make([]error, n)
	var wg sync.WaitGroup
	var sent sync.WaitGroup
	sent.Add(n / 2)
	for i := range n {
		wg.Go(func() {
			if i >= n/2 {
				// The second half starts once the first has returned: by
				// then the client has seen the cut, which a Send made just
				// after it may not have.
				sent.Wait()
			}
			errs[i] = p.Send(context.Background(), message(t, exchange, "ok."+strconv.Itoa(i), strconv.Itoa(i)))
			if i < n/2 {
				sent.Done()
			}
		})
		if i == n/4 {
			// Cut while sends are in flight.
			eventually(t, 2*time.Minute, "a connection through the proxy", proxy.connected)
			proxy.Cut()
		}
	}
	wg.Wait()
	got := ids(t, ok)
	var confirmed, unconfirmed, unsent int
	for i, err := range errs {
		id := strconv.Itoa(i)
		switch {
		case err == nil:
			confirmed++
			if got[id] != 1 {
				t.Errorf("message %s was confirmed, and is %d times in the queue", id, got[id])
			}
		case errors.Is(err, runtime.ErrUnconfirmed):
			unconfirmed++
			if got[id] > 1 {
				t.Errorf("unconfirmed message %s is %d times in the queue", id, got[id])
			}
		case errors.Is(err, runtime.ErrReturned), errors.Is(err, runtime.ErrNacked):
			t.Errorf("send %s: %v", id, err)
		default:
			unsent++
			if got[id] != 0 {
				t.Errorf("message %s was not written (%v), and is %d times in the queue", id, err, got[id])
			}
		}
	}
	t.Logf("%d confirmed, %d unconfirmed, %d not written", confirmed, unconfirmed, unsent)
	for i := n / 2; i < n; i++ {
		if errs[i] != nil {
			t.Errorf("send %d after the cut: %v", i, errs[i])
		}
	}
}

// While the broker blocks the connection (connection.blocked), a Send waits,
// within its context, and writes nothing; after connection.unblocked it goes
// through.
func TestBrokerPublisherWaitsWhileBlocked(t *testing.T) {
	t.Parallel()
	exchange, ok, _ := publishTopology(t)
	proxy := newProxy(t)
	p := newPublisher(t, proxy.url(), 4)
	if err := p.Send(context.Background(), message(t, exchange, "ok.1", "before")); err != nil {
		t.Fatal(err)
	}
	// The channel closes first: the block belongs to the connection, and the
	// channel opened after it must wait too.
	closeSendChannel(t, p, exchange)
	all := func(string) bool { return true }
	if proxy.Block(all, "low on memory") != 1 {
		t.Fatal("no connection to block")
	}
	// A Send just after the block may race the notification and go through;
	// what is asserted is that a Send at last waits and gives up unwritten.
	// One that raced it opens the channel first: its context must outlast
	// the open on a loaded broker, which took more than 500 ms, so that it
	// then meets the block (or goes through) rather than give up in the open.
	want := map[string]int{"before": 1, "after": 1}
	// maybe are the Sends written before the block whose confirm came after
	// their ctx ended: unconfirmed, yet in the queue.
	var maybe []string
	var err error
	attempt := 0
	eventually(t, 2*time.Minute, "a send waiting on the block", func() bool {
		attempt++
		id := "blocked-" + strconv.Itoa(attempt)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		switch err = p.Send(ctx, message(t, exchange, "ok.2", id)); {
		case err == nil:
			want[id] = 1
		case errors.Is(err, runtime.ErrUnconfirmed):
			maybe = append(maybe, id)
		default:
			return true
		}
		return false
	})
	if !strings.Contains(err.Error(), "blocks publishes") {
		t.Errorf("the send that gave up: %v; want not written while the broker blocks publishes", err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Send(context.Background(), message(t, exchange, "ok.3", "after")) }()
	select {
	case err := <-done:
		t.Fatalf("send returned while blocked: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	proxy.Unblock(all)
	if err := <-done; err != nil {
		t.Errorf("send after the unblock: %v", err)
	}
	got := ids(t, ok)
	for _, id := range maybe {
		if got[id] <= 1 {
			delete(got, id)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the queue holds %v, want %v", got, want)
	}
}

// A Send waits for the channel another Send is opening only within its own
// context: behind a channel open the broker does not answer, it returns
// unwritten while the open still hangs (for the whole step, ten minutes).
func TestBrokerPublisherWaitsForAnotherSendsOpenWithinItsContext(t *testing.T) {
	t.Parallel()
	exchange, ok, _ := publishTopology(t)
	proxy := newProxy(t)
	p := newPublisher(t, proxy.url(), 4, func(cfg *runtime.Config) { cfg.StepTimeout = 10 * time.Minute })
	// The channel closes, the connection stays: the next Send opens a channel.
	closeSendChannel(t, p, exchange)
	// The broker's replies are dropped from now on, its heartbeats passed,
	// so the connection lives on; the second Send starts once the first has
	// asked for its channel.
	opening := make(chan struct{})
	var once sync.Once
	proxy.Intercept(func(f faults.Frame) faults.Action {
		if f.Dir == faults.ToClient && f.Type == 1 {
			return faults.Drop
		}
		if f.Is(faults.Method{Class: 20, ID: 10}) { // channel.open
			once.Do(func() { close(opening) })
		}
		return faults.Forward
	})
	first := make(chan error, 1)
	go func() { first <- p.Send(context.Background(), message(t, exchange, "ok.1", "first")) }()
	select {
	case <-opening:
	case <-time.After(60 * time.Second):
		t.Fatal("the first Send did not open a channel")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	second := make(chan error, 1)
	go func() { second <- p.Send(ctx, message(t, exchange, "ok.2", "second")) }()
	var err error
	eventually(t, 60*time.Second, "the second Send returning while the open hangs", func() bool {
		select {
		case err = <-second:
			return true
		default:
			return false
		}
	})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, runtime.ErrUnconfirmed) {
		t.Errorf("the second Send: %v; want not sent, its context's deadline", err)
	}
	select {
	case err := <-first:
		t.Fatalf("the opening Send returned before its open was released: %v", err)
	default:
	}
	proxy.cut()
	if err := <-first; err != nil {
		t.Errorf("the first Send, once the hanging open was cut: %v", err)
	}
	if got := ids(t, ok); fmt.Sprint(got) != "map[first:1]" {
		t.Errorf("the queue holds %v", got)
	}
}

// confirmHeldBack is a Publisher through a proxy that has sent "before" to
// queue ok, and then "first", which is in the queue while the proxy holds
// the broker's answers back: its Send waits for its confirm, answered on
// first once the proxy resumes. Its step (five minutes) outlasts whatever
// the test does before it resumes the proxy on a loaded machine: the wait
// for the confirm is bounded by the step alone. The test's own short Sends
// end on their contexts.
func confirmHeldBack(t *testing.T, exchange, ok string) (*runtime.Publisher, *proxy, <-chan error) {
	t.Helper()
	proxy := newProxy(t)
	p := newPublisher(t, proxy.url(), 4, func(cfg *runtime.Config) { cfg.StepTimeout = 5 * time.Minute })
	if err := p.Send(context.Background(), message(t, exchange, "ok.0", "before")); err != nil {
		t.Fatal(err)
	}
	ch := channel(t, dial(t))
	defer ch.Close()
	proxy.Stall(faults.ToClient)
	first := make(chan error, 1)
	go func() { first <- p.Send(context.Background(), message(t, exchange, "ok.1", "first")) }()
	eventually(t, 2*time.Minute, "the first Send in its queue, its confirm held back", func() bool {
		state, err := ch.QueueDeclarePassive(ok, false, false, false, false, nil)
		return err == nil && state.Messages == 2
	})
	return p, proxy, first
}

// A look for an exchange cut short by its Send's own deadline proves nothing
// about the connection: the Sends in flight on it are not failed with it.
// With the broker's answers held back, one Send waits for its confirm while
// another, with a short deadline, looks for a new exchange and gives up; once
// the answers flow, the first is confirmed.
func TestBrokerPublisherShortLookLeavesTheConnection(t *testing.T) {
	t.Parallel()
	exchange, ok, _ := publishTopology(t)
	other := exchange + ".other"
	ch := channel(t, dial(t))
	defer ch.Close()
	if err := ch.ExchangeDeclare(other, "fanout", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(ok, "", other, false, nil); err != nil {
		t.Fatal(err)
	}
	p, proxy, first := confirmHeldBack(t, exchange, ok)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := p.Send(ctx, message(t, other, "", "short")); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, runtime.ErrUnconfirmed) {
		t.Errorf("the Send looking for a new exchange: %v; want not sent, its deadline", err)
	}
	proxy.Resume()
	if err := <-first; err != nil {
		t.Errorf("the Send in flight beside the look: %v", err)
	}
	if got := ids(t, ok); fmt.Sprint(got) != "map[before:1 first:1]" {
		t.Errorf("the queue holds %v", got)
	}
}

// dropReply is a Publisher (a step of 2 s) through a proxy that, once it has
// sent "before" to ok, has dropped the reply m to every request for it while
// drop is set; starts counts the connection the setup ended on and those
// dialled after it, asked the requests for m (from then on), dropped the
// replies dropped. A setup slowed past a step on a loaded machine may have
// dialled again: that is not the test's to count. With blockAsked set, the
// next request for m that passes while drop is set has the proxy block the
// connection (connection.blocked): the client learns of the block while it
// waits for the reply.
type dropReply struct {
	p                      *runtime.Publisher
	proxy                  *proxy
	drop, blockAsked       atomic.Bool
	starts, asked, dropped atomic.Int32
}

func newDropReply(t *testing.T, exchange string, m faults.Method) *dropReply {
	t.Helper()
	d := &dropReply{proxy: newProxy(t)}
	// Each reply's request is the method before it: channel.open for
	// channel.open-ok, confirm.select for confirm.select-ok.
	request := faults.Method{Class: m.Class, ID: m.ID - 1}
	var counting atomic.Bool
	d.proxy.Intercept(func(f faults.Frame) faults.Action {
		switch {
		case f.Dir == faults.ToBroker && f.Is(faults.ConnectionStartOk):
			d.starts.Add(1)
		case f.Dir == faults.ToBroker && f.Is(request) && counting.Load():
			d.asked.Add(1)
			if d.drop.Load() && d.blockAsked.CompareAndSwap(true, false) {
				go d.proxy.Block(func(string) bool { return true }, "low on memory")
			}
		case f.Dir == faults.ToClient && f.Is(m) && d.drop.Load():
			d.dropped.Add(1)
			return faults.Drop
		}
		return faults.Forward
	})
	d.p = newPublisher(t, d.proxy.url(), 4, func(cfg *runtime.Config) { cfg.StepTimeout = 2 * time.Second })
	if err := d.p.Send(context.Background(), message(t, exchange, "ok.0", "before")); err != nil {
		t.Fatal(err)
	}
	// The channel closes, the connection stays: the next Send opens a
	// channel.
	closeSendChannel(t, d.p, exchange)
	// No dial is under way: each Send of the setup has its answer.
	d.starts.Store(1)
	counting.Store(true)
	return d
}

// openMethods are the broker's replies to the two requests that open a
// publishing channel.
var openMethods = map[string]faults.Method{
	"channel.open-ok":   {Class: 20, ID: 11},
	"confirm.select-ok": {Class: 85, ID: 11},
}

// A broker that leaves a channel's opening unanswered for a whole step will
// not read a publish either: the connection is abandoned, and a Send after
// it dials a new one, rather than open channel after channel on it, each
// hanging (a goroutine and a channel id) until the connection ends. The
// second connection comes within a few unanswered steps, not after many;
// once the replies flow, a Send goes through.
func TestBrokerPublisherUnansweredOpenAbandonsTheConnection(t *testing.T) {
	t.Parallel()
	for name, m := range openMethods {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			exchange, ok, _ := publishTopology(t)
			d := newDropReply(t, exchange, m)
			d.drop.Store(true)
			eventually(t, 60*time.Second, "a second connection dialled", func() bool {
				if n := d.dropped.Load(); n >= 4 && d.starts.Load() < 2 {
					t.Fatalf("%d replies dropped, each unanswered for a whole step, and no connection dialled after the first", n)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
				defer cancel()
				if err := d.p.Send(ctx, message(t, exchange, "ok.1", "unanswered")); err == nil || errors.Is(err, runtime.ErrUnconfirmed) {
					t.Fatalf("a Send while the open goes unanswered: %v; want not sent", err)
				}
				return d.starts.Load() >= 2
			})
			d.drop.Store(false)
			if err := d.p.Send(context.Background(), message(t, exchange, "ok.2", "after")); err != nil {
				t.Errorf("a Send once the broker answers: %v", err)
			}
			if got := ids(t, ok); fmt.Sprint(got) != "map[after:1 before:1]" {
				t.Errorf("the queue holds %v", got)
			}
		})
	}
}

// A blocked connection is not a dead one: the broker stops reading it under
// a resource alarm and reads it again once the alarm clears, and another
// connection would be blocked too. A channel's opening it leaves unanswered
// for a whole step, the block having come while it waited, fails the Send
// opening the channel, and leaves the connection (and whatever else
// publishes on it); the Send's next attempt waits on the block and asks
// nothing more. Once unblocked, a Send goes through on the same connection.
func TestBrokerPublisherBlockedConnectionOutlivesAnUnansweredOpen(t *testing.T) {
	t.Parallel()
	for name, m := range openMethods {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			exchange, ok, _ := publishTopology(t)
			d := newDropReply(t, exchange, m)
			d.blockAsked.Store(true)
			d.drop.Store(true)
			// The Send's first attempt waits a whole step (2 s) for the reply,
			// within its context.
			ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
			defer cancel()
			err := d.p.Send(ctx, message(t, exchange, "ok.1", "blocked"))
			if err == nil || errors.Is(err, runtime.ErrUnconfirmed) || !strings.Contains(err.Error(), "blocks publishes") {
				t.Fatalf("a Send while the open goes unanswered on a blocked connection: %v; want not sent while the broker blocks publishes", err)
			}
			if asked, dropped := d.asked.Load(), d.dropped.Load(); asked != 1 || dropped != 1 {
				t.Errorf("%d requests, %d replies dropped; want 1, 1", asked, dropped)
			}
			if n := d.starts.Load(); n != 1 {
				t.Errorf("%d connections dialled while the broker blocked the first; want 1", n)
			}
			d.unblockOnTheSameConnection(t, exchange, ok)
		})
	}
}

// While the broker blocks a connection it does not read it, so a channel
// open would hang until the alarm clears: a Send waits on the block before
// opening its channel, and gives up within its context having asked
// nothing, rather than leave a hanging open (a goroutine and a channel id)
// behind each Send and each retry for the whole alarm. Once unblocked, a
// Send goes through on the same connection.
func TestBrokerPublisherBlockedConnectionOpensNoChannel(t *testing.T) {
	t.Parallel()
	exchange, ok, _ := publishTopology(t)
	d := newDropReply(t, exchange, openMethods["channel.open-ok"])
	// As the broker under an alarm: what it would answer a blocked
	// connection never comes.
	d.drop.Store(true)
	all := func(string) bool { return true }
	if d.proxy.Block(all, "low on memory") != 1 {
		t.Fatal("no connection to block")
	}
	send := func(id string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		err := d.p.Send(ctx, message(t, exchange, "ok.1", id))
		if err == nil || errors.Is(err, runtime.ErrUnconfirmed) {
			t.Fatalf("a Send while the broker blocks the connection: %v; want not sent", err)
		}
		return err
	}
	// A Send just after the block may race the notification and open a
	// channel; one that waited on the block shows the client knows of it.
	var known int32
	eventually(t, 2*time.Minute, "a Send waiting on the block", func() bool {
		if err := send("racing"); strings.Contains(err.Error(), "blocks publishes") {
			known = d.asked.Load()
			return true
		}
		if n := d.asked.Load(); n >= 5 {
			t.Fatalf("%d channel opens asked for while the broker blocks the connection, and no Send waited on the block", n)
		}
		return false
	})
	for i := range 5 {
		if err := send("blocked-" + strconv.Itoa(i)); !strings.Contains(err.Error(), "blocks publishes") {
			t.Errorf("Send %d while the broker blocks the connection: %v; want not sent while the broker blocks publishes", i, err)
		}
	}
	if n := d.asked.Load() - known; n != 0 {
		t.Errorf("%d channel opens asked for on the blocked connection once the client knew of the block; want none", n)
	}
	d.unblockOnTheSameConnection(t, exchange, ok)
}

// unblockOnTheSameConnection lets the broker's replies through and unblocks
// the connection, then checks that a Send goes through on the connection
// the test began with: the queue ok holds "before" and "after", no more.
func (d *dropReply) unblockOnTheSameConnection(t *testing.T, exchange, ok string) {
	t.Helper()
	d.drop.Store(false)
	d.proxy.Unblock(func(string) bool { return true })
	if err := d.p.Send(context.Background(), message(t, exchange, "ok.2", "after")); err != nil {
		t.Errorf("a Send once unblocked: %v", err)
	}
	if n := d.starts.Load(); n != 1 {
		t.Errorf("%d connections dialled; want 1", n)
	}
	if got := ids(t, ok); fmt.Sprint(got) != "map[after:1 before:1]" {
		t.Errorf("the queue holds %v", got)
	}
}

// A node that completes the handshake and then answers no channel open is
// abandoned once an open has waited a whole step, and the next dial starts
// at the next URL, the silent node tried last: the Sends reach the healthy
// node within a few steps rather than redial the silent one for ever.
func TestBrokerPublisherSilentNodeIsLeftForTheNext(t *testing.T) {
	t.Parallel()
	exchange, ok, _ := publishTopology(t)
	silent, healthy := newProxy(t), newProxy(t)
	var silentStarts, healthyStarts atomic.Int32
	silent.Intercept(func(f faults.Frame) faults.Action {
		switch {
		case f.Dir == faults.ToBroker && f.Is(faults.ConnectionStartOk):
			silentStarts.Add(1)
		case f.Dir == faults.ToClient && f.Is(openMethods["channel.open-ok"]):
			return faults.Drop
		}
		return faults.Forward
	})
	healthy.Intercept(func(f faults.Frame) faults.Action {
		if f.Dir == faults.ToBroker && f.Is(faults.ConnectionStartOk) {
			healthyStarts.Add(1)
		}
		return faults.Forward
	})
	p := newPublisher(t, silent.url(), 4, func(cfg *runtime.Config) {
		cfg.URLs = append(cfg.URLs, healthy.url())
		cfg.StepTimeout = time.Second
	})
	want := map[string]int{}
	attempt := 0
	eventually(t, 60*time.Second, "a Send through the second node", func() bool {
		if n := silentStarts.Load(); n > 1 {
			t.Fatalf("the silent node dialled %d times, the healthy one %d", n, healthyStarts.Load())
		}
		attempt++
		id := "send-" + strconv.Itoa(attempt)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		switch err := p.Send(ctx, message(t, exchange, "ok.1", id)); {
		case err == nil:
			want[id] = 1
			return true
		case errors.Is(err, runtime.ErrUnconfirmed):
			t.Fatalf("a Send on the silent node: %v; want not sent", err)
		}
		return false
	})
	if err := p.Send(context.Background(), message(t, exchange, "ok.2", "again")); err != nil {
		t.Errorf("a Send after: %v", err)
	}
	want["again"] = 1
	if s, h := silentStarts.Load(), healthyStarts.Load(); s != 1 || h != 1 {
		t.Errorf("connections dialled: %d to the silent node, %d to the healthy one; want 1, 1", s, h)
	}
	if got := ids(t, ok); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the queue holds %v, want %v", got, want)
	}
}

// The window bounds the publishes the broker has not answered, not only
// those a Send still waits for: a Send that gave up on its confirm keeps its
// slot until the answer comes, so Returns never pile up past the room kept
// for them. With the broker's answers held back, two Sends fill a window of
// two and give up; a third finds no slot and writes nothing. Once the
// answers arrive, the slots are free again.
func TestBrokerPublisherWindowHoldsUnansweredPublishes(t *testing.T) {
	t.Parallel()
	exchange, ok, _ := publishTopology(t)
	proxy := newProxy(t)
	p := newPublisher(t, proxy.url(), 2)
	if err := p.Send(context.Background(), message(t, exchange, "ok.0", "before")); err != nil {
		t.Fatal(err)
	}
	proxy.Stall(faults.ToClient)
	// A Send that must be written has time to reach its write on a loaded
	// machine; the one that must find no slot gives up sooner.
	send := func(key, id string, within time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		return p.Send(ctx, message(t, exchange, key, id))
	}
	for i := range 2 {
		if err := send("nowhere."+strconv.Itoa(i), "unanswered-"+strconv.Itoa(i), 2*time.Second); !errors.Is(err, runtime.ErrUnconfirmed) {
			t.Errorf("send %d while the answers are held: %v; want unconfirmed", i, err)
		}
	}
	if err := send("ok.1", "no-slot", 300*time.Millisecond); err == nil || errors.Is(err, runtime.ErrUnconfirmed) || !strings.Contains(err.Error(), "no publish slot") {
		t.Errorf("send with the window full of unanswered publishes: %v; want not written, no slot", err)
	}
	proxy.Resume()
	eventually(t, 2*time.Minute, "a send once the answers arrived", func() bool { return send("ok.2", "after", 2*time.Second) == nil })
	if got := ids(t, ok); got["before"] != 1 || got["after"] < 1 || got["no-slot"] != 0 {
		t.Errorf("the queue holds %v", got)
	}
}

// A Send to an exchange that does not exist, among Sends in flight to one
// that does: it fails alone, not written, and its neighbours are confirmed.
// An exchange deleted after it was found closes the channel once (the Sends
// on it are unconfirmed); the next Send to it looks again.
func TestBrokerPublisherMissingExchange(t *testing.T) {
	t.Parallel()
	exchange, ok, _ := publishTopology(t)
	p := newPublisher(t, brokerURL(t), 16)
	const n = 100
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	for i := range n + 1 {
		m := message(t, exchange, "ok."+strconv.Itoa(i), strconv.Itoa(i))
		if i == n/2 {
			m = message(t, exchange+".missing", "ok.x", "lost")
		}
		wg.Go(func() { errs[i] = p.Send(context.Background(), m) })
	}
	wg.Wait()
	for i, err := range errs {
		if i == n/2 {
			if err == nil || errors.Is(err, runtime.ErrUnconfirmed) || !strings.Contains(err.Error(), "no exchange "+exchange+".missing") {
				t.Errorf("send to a missing exchange: %v", err)
			}
		} else if err != nil {
			t.Errorf("send %d beside it: %v", i, err)
		}
	}
	if got := ids(t, ok); len(got) != n || got["lost"] != 0 {
		t.Errorf("the queue holds %d messages, lost %d times; want %d and none", len(got), got["lost"], n)
	}

	// The exchange goes away after the publisher found it.
	gone := exchange + ".gone"
	ch := channel(t, dial(t))
	defer ch.Close()
	if err := ch.ExchangeDeclare(gone, "fanout", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(ok, "", gone, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Send(context.Background(), message(t, gone, "", "before")); err != nil {
		t.Fatalf("send to an exchange that exists: %v", err)
	}
	if err := ch.ExchangeDelete(gone, false, false); err != nil {
		t.Fatal(err)
	}
	if err := p.Send(context.Background(), message(t, gone, "", "after")); !errors.Is(err, runtime.ErrUnconfirmed) {
		t.Errorf("send to an exchange deleted since it was found: %v, want unconfirmed", err)
	}
	if err := p.Send(context.Background(), message(t, gone, "", "again")); err == nil || !strings.Contains(err.Error(), "no exchange "+gone) {
		t.Errorf("the next send to it: %v, want no exchange", err)
	}
	if err := p.Send(context.Background(), message(t, exchange, "ok.next", "next")); err != nil {
		t.Errorf("send after: %v", err)
	}
	if got := ids(t, ok); fmt.Sprint(got) != "map[before:1 next:1]" {
		t.Errorf("the queue holds %v", got)
	}
}

// A channel Lily closes (here half the window stalled, a step after a Send
// gave up) as the broker closes it for a reason of its own (here a publish
// just before to an exchange deleted since it was found) answers the close
// with the broker's channel.close (404), not channel.close-ok: the channel
// is closed all the same, and the connection the other Sends share stays.
// The broker's answers are held back until Lily's channel.close has passed,
// then released; the control deletes nothing, and the close is answered
// close-ok. Either way the next Send goes on the same connection.
func TestBrokerPublisherCloseMeetingTheBrokersKeepsTheConnection(t *testing.T) {
	t.Parallel()
	for _, deleted := range []bool{false, true} {
		t.Run(fmt.Sprintf("deleted=%t", deleted), func(t *testing.T) {
			t.Parallel()
			exchange, ok, _ := publishTopology(t)
			found := exchange + ".found"
			ch := channel(t, dial(t))
			defer ch.Close()
			if err := ch.ExchangeDeclare(found, "fanout", false, true, false, false, nil); err != nil {
				t.Fatal(err)
			}
			if err := ch.QueueBind(ok, "", found, false, nil); err != nil {
				t.Fatal(err)
			}
			proxy := newProxy(t)
			// armed, once "before" is confirmed, leaves out the close of the
			// channel its look at the exchange opened.
			var starts atomic.Int32
			var armed atomic.Bool
			brokerClosed, lilyClosed := make(chan struct{}), make(chan struct{})
			var brokerOnce, lilyOnce sync.Once
			proxy.Intercept(func(f faults.Frame) faults.Action {
				switch {
				case f.Dir == faults.ToBroker && f.Is(faults.ConnectionStartOk):
					starts.Add(1)
				case !armed.Load():
				case f.Dir == faults.ToClient && f.Is(faults.ChannelClose):
					brokerOnce.Do(func() { close(brokerClosed) })
				case f.Dir == faults.ToBroker && f.Is(faults.ChannelClose):
					lilyOnce.Do(func() { close(lilyClosed) })
				}
				return faults.Forward
			})
			// A step of 2 s: the answers must be released within a step of
			// the close, or the close times out, which takes the connection.
			p := newPublisher(t, proxy.url(), 2, func(c *runtime.Config) { c.StepTimeout = 2 * time.Second })
			if err := p.Send(context.Background(), message(t, found, "", "before")); err != nil {
				t.Fatal(err)
			}
			armed.Store(true)
			if deleted {
				if err := ch.ExchangeDelete(found, false, false); err != nil {
					t.Fatal(err)
				}
			}
			proxy.Stall(faults.ToClient)
			// Time to reach its write on a loaded machine.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if err := p.Send(ctx, message(t, found, "", "held")); !errors.Is(err, runtime.ErrUnconfirmed) {
				t.Errorf("the Send whose answer is held: %v; want unconfirmed", err)
			}
			select {
			case <-lilyClosed:
			case <-time.After(time.Minute):
				t.Fatal("no channel.close from the publisher within a minute")
			}
			if deleted {
				select {
				case <-brokerClosed:
				case <-time.After(time.Minute):
					t.Fatal("no channel.close from the broker within a minute")
				}
			}
			proxy.Resume()
			eventually(t, 30*time.Second, "a Send after the close", func() bool {
				return p.Send(context.Background(), message(t, exchange, "ok.after", "after")) == nil
			})
			if n := starts.Load(); n != 1 || !proxy.connected() {
				t.Errorf("%d connections opened, one open now: %t; want the first, still open", n, proxy.connected())
			}
			want := map[string]int{"before": 1, "after": 1}
			got := ids(t, ok)
			if !deleted {
				want["held"] = 1
			}
			if !maps.Equal(got, want) {
				t.Errorf("the queue holds %v, want %v", got, want)
			}
		})
	}
}

// A handoff waits while the broker blocks its connection only until a
// second before its budget ends: then it gives up unwritten, and the
// delivery gets its one bounded requeue instead of being left unresolved.
// Its redelivery, once the block ends, is handed off.
func TestBrokerBlockedHandoffIsRequeuedWithinItsBudget(t *testing.T) {
	t.Parallel()
	// The step is short only so that the budget, which must carry four of
	// them, is; it still bounds the first connection's whole opening, which
	// a loaded broker took more than 500 ms to answer.
	const step = 2 * time.Second
	q := brokerSpec(t, hourRetry, func(q *runtime.QueueSpec) {
		q.HandlerTimeout = 100 * time.Millisecond
		q.SettlementBudget = q.HandlerTimeout + 4*step + 2*time.Second
	})
	declareTopology(t, q)
	p := newProxy(t)
	r := start(t, q, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		return runtime.Retryable(errors.New("later"))
	}, through(p), func(cfg *runtime.Config) { cfg.StepTimeout = step })
	publish(t, q.Name, order(t, "warm"))
	r.await(1) // the handoff connection is open
	handoffs := func(name string) bool { return strings.HasSuffix(name, " handoff") }
	if p.Block(handoffs, "low on memory") != 1 {
		t.Fatal("no handoff connection to block")
	}
	// The client hands the block to the publisher on a goroutine of its own:
	// a delivery handed off just after Block may race it and go through.
	seen, blocked := 1, ""
	for attempt := 1; blocked == ""; attempt++ {
		if attempt > 20 {
			t.Fatal("no handoff waited on the block")
		}
		id := "blocked-" + strconv.Itoa(attempt)
		publish(t, q.Name, order(t, id))
		seen++
		switch rec := r.await(seen)[seen-1]; {
		case rec.MessageID == id && rec.Path == runtime.PathRequeued && rec.Handoff == "timed out":
			blocked = id
		case rec.MessageID != id || rec.Path != runtime.PathRetried:
			t.Fatalf("while blocked: %+v, want requeued after a timed-out handoff (or retried, before the block arrived)", rec)
		}
	}
	p.Unblock(handoffs)
	if rec := r.await(seen + 1)[seen]; rec.MessageID != blocked || rec.Path != runtime.PathRetried {
		t.Errorf("after the block: %+v, want %s retried", rec, blocked)
	}
	r.stop()
	// In the bucket: the warm-up, whatever went through before the block
	// arrived, and the blocked message once the block ended.
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket(q, time.Hour): {seen, 0}})
}

// A Send's own short deadline is not evidence that the broker stopped
// reading: it does not close the connection the other Sends share. With the
// broker's side of the proxy stalled, a large Send waits in its write; a
// small Send with a short deadline waits behind it past that deadline. Once
// the bytes flow, the large Send is confirmed, and the small one, written
// after its deadline, is answered as written. The large message goes to a
// queue of its own, counted, not read: reading 96 MiB back on a loaded
// machine can outlast the broker's send timeout, which resets the reader.
//
// Everything while the proxy stalls must fit in the broker's heartbeat
// timeout, since the client's heartbeats stall too: under load, building
// the body there took longer, and the broker closed the connection, so the
// large Send dialled anew through the stall (or its write failed) instead of
// waiting in it. The body is built before the stall, and the connection asks
// for the broker's longest heartbeat.
func TestBrokerPublisherShortDeadlineLeavesTheConnection(t *testing.T) {
	t.Parallel()
	exchange, ok, _ := publishTopology(t)
	large := exchange + ".large"
	ch := channel(t, dial(t))
	if _, err := ch.QueueDeclare(large, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = channel(t, dial(t)).QueueDelete(large, false, false, false) })
	if err := ch.QueueBind(large, "large.#", exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	proxy := newProxy(t)
	p := newPublisher(t, longHeartbeat(t, proxy.url()), 4, func(c *runtime.Config) { c.StepTimeout = time.Minute })
	if err := p.Send(context.Background(), message(t, exchange, "ok.0", "before")); err != nil {
		t.Fatal(err)
	}
	// One pass over 96 MiB under the race detector takes seconds, on a
	// loaded machine tens of them.
	big := message(t, exchange, "large.1", "large")
	big.Body = bytes.Repeat([]byte{' '}, 96<<20)
	copy(big.Body, `{"order_id":"large","note":"`)
	copy(big.Body[len(big.Body)-2:], `"}`)
	proxy.Stall(faults.ToBroker)
	first := make(chan error, 1)
	go func() { first <- p.Send(context.Background(), big) }()
	eventually(t, time.Minute, "the large Send waiting in its write", func() bool {
		return stacksHold("(*coalescing).Write", "sync.(*Cond).Wait", t.Name()) == 1
	})
	// Short beside the step (a minute), and long enough for the Send to
	// reach its write on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	second := make(chan error, 1)
	go func() { second <- p.Send(ctx, message(t, exchange, "ok.2", "short")) }()
	<-ctx.Done()
	time.Sleep(time.Second) // a watchdog at the short deadline would have fired
	proxy.Resume()
	if err := <-first; err != nil {
		t.Errorf("the large Send: %v; want confirmed", err)
	}
	if err := <-second; err != nil && !errors.Is(err, runtime.ErrUnconfirmed) {
		t.Errorf("the Send past its deadline: %v; want confirmed or unconfirmed, as it was written", err)
	}
	// The large message's confirm may come before the broker has routed the
	// publish written behind it.
	awaitReady(t, ok, "the Send past its deadline routed", 2)
	if got := ids(t, ok); fmt.Sprint(got) != "map[before:1 short:1]" {
		t.Errorf("the queue holds %v", got)
	}
	assertCounts(t, map[string][2]int{large: {1, 0}})
}

// A slow link is not a broker that stopped reading. Sends in flight
// together whose bodies take several steps to cross it each wait behind the
// others' frames longer than a step, while bytes keep going out: every one
// is confirmed, on the connection dialled first, none abandoned under the
// others for the time the ones ahead of it took.
func TestBrokerPublisherSlowLinkKeepsTheConnection(t *testing.T) {
	t.Parallel()
	exchange, ok, _ := publishTopology(t)
	proxy := newProxy(t)
	var starts atomic.Int32
	proxy.Intercept(func(f faults.Frame) faults.Action {
		if f.Dir == faults.ToBroker && f.Is(faults.ConnectionStartOk) {
			starts.Add(1)
		}
		return faults.Forward
	})
	// 96 MiB at 32 MiB/s: three seconds, three steps, for the last Send's
	// frames to go out behind the others'; a loaded machine only slows it
	// further. The link is fast beside the kernel's buffers (the client's
	// send buffer grows to megabytes on loopback), which the bytes of the
	// Sends written before one must cross within the step its confirm
	// waits after its write: a tenth of it, unloaded.
	const window, size, step = 24, 4 << 20, time.Second
	proxy.Limit(faults.ToBroker, 32<<20)
	p := newPublisher(t, proxy.url(), window, func(c *runtime.Config) { c.StepTimeout = step })
	if err := p.Send(context.Background(), message(t, exchange, "ok.0", "first")); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, window)
	for i := range window {
		m := message(t, exchange, "ok."+strconv.Itoa(i), "slow-"+strconv.Itoa(i))
		body := bytes.Repeat([]byte{' '}, size)
		copy(body, `{"order_id":"slow","note":"`)
		copy(body[len(body)-2:], `"}`)
		m.Body = body
		go func() { errs <- p.Send(context.Background(), m) }()
	}
	for range window {
		if err := <-errs; err != nil {
			t.Errorf("a Send over the slow link: %v; want confirmed", err)
		}
	}
	if n := starts.Load(); n != 1 {
		t.Errorf("%d connections dialled; want the first alone", n)
	}
	assertCounts(t, map[string][2]int{ok: {window + 1, 0}})
}

// stacksHold counts the goroutines whose stacks hold every one of frames;
// a test's name among them keeps to the goroutines it started.
func stacksHold(frames ...string) int {
	buf := make([]byte, 1<<20)
	for goruntime.Stack(buf, true) == len(buf) {
		buf = make([]byte, 2*len(buf)) // cut short: the test's own may be last
	}
	n := 0
	for g := range strings.SplitSeq(string(buf[:goruntime.Stack(buf, true)]), "\n\n") {
		if !slices.ContainsFunc(frames, func(f string) bool { return !strings.Contains(g, f) }) {
			n++
		}
	}
	return n
}

// A user_id that is not the connection's own, a CC header that is not an
// array, or a reply_to of the bare direct reply-to pseudo-queue (from a
// channel that does not consume it) would have the broker close the channel
// under every publish in flight on it, and headers larger than a frame, or
// holding a NaN or an infinity, the connection, as would a table deeper or
// wider than the client decodes once its message came back as a Return; an
// x-death the broker's dead-lettering cannot read would crash the queue
// that dead-letters the message; an
// int outside the int32 range the client would truncate to 32 bits: each
// such Send is refused before the write, alone. With the broker's answers held back,
// one Send waits for its confirm while the others are refused; once the
// answers flow, the first is confirmed. The connection's own user_id is
// published.
func TestBrokerPublisherUnpublishableFailsItsSendAlone(t *testing.T) {
	t.Parallel()
	exchange, ok, _ := publishTopology(t)
	p, proxy, first := confirmHeldBack(t, exchange, ok)
	foreign := message(t, exchange, "ok.2", "foreign")
	foreign.UserId = "nobody"
	large := message(t, exchange, "ok.2", "large")
	large.Headers["blob"] = strings.Repeat("x", 200_000)
	nan := message(t, exchange, "ok.2", "nan")
	nan.Headers["x-score"] = []any{float32(math.NaN())}
	cc := message(t, exchange, "ok.2", "cc")
	cc.Headers["CC"] = "ok.3"
	wide := message(t, exchange, "ok.2", "wide")
	wide.Headers["x-wide"] = make([]any, 8193)
	xdeath := message(t, exchange, "ok.2", "x-death")
	xdeath.Headers["x-death"] = []any{amqp.Table{"count": 1.5, "queue": "q", "reason": "rejected"}}
	replyTo := message(t, exchange, "ok.2", "reply-to")
	replyTo.ReplyTo = "amq.rabbitmq.reply-to"
	big := message(t, exchange, "ok.2", "big")
	big.Headers["x-big"] = []any{int(5_000_000_000)}
	deep := message(t, exchange, "ok.2", "deep")
	nested := amqp.Table{}
	deep.Headers["x-deep"] = nested
	for range 32 {
		nested["in"] = amqp.Table{}
		nested = nested["in"].(amqp.Table)
	}
	for _, refused := range []struct {
		m    runtime.Message
		want string
	}{
		{foreign, "user_id"}, {large, "more than the 131064 of a frame"}, {nan, "x-score: [0]: NaN is not a finite number"},
		{cc, "CC: not an array"}, {xdeath, "x-death: the count of entry 0 is a float"}, {wide, "x-wide: 8193 entries, more than the 8192"}, {deep, "x-deep: in: in: in:"},
		{replyTo, `reply_to: "amq.rabbitmq.reply-to" is taken only from a channel that consumes it`},
		{big, "x-big: [0]: the int 5000000000 is outside the int32 range, and an int is sent as 32 bits: use int64"},
	} {
		err := p.Send(context.Background(), refused.m)
		if err == nil || errors.Is(err, runtime.ErrUnconfirmed) || !strings.Contains(err.Error(), refused.want) {
			t.Errorf("the Send of %s: %v; want not sent, %q", refused.m.MessageId, err, refused.want)
		}
	}
	proxy.Resume()
	if err := <-first; err != nil {
		t.Errorf("the Send in flight beside them: %v", err)
	}
	own := message(t, exchange, "ok.3", "own")
	own.UserId = "guest"
	if err := p.Send(context.Background(), own); err != nil {
		t.Errorf("the Send with the connection's own user_id: %v", err)
	}
	if got := ids(t, ok); fmt.Sprint(got) != "map[before:1 first:1 own:1]" {
		t.Errorf("the queue holds %v", got)
	}
}

// silentBroker accepts connections and never answers: a dial to it waits
// out its step.
func silentBroker(t *testing.T) string {
	return fakeNode(t, func(conn net.Conn) {
		_, _ = io.Copy(io.Discard, conn) // until the client gives up
		_ = conn.Close()
	})
}

// A Send waits for a connection within its ctx, whether it dials itself or
// waits for another Send's dial: cancelled, it returns, not a step later.
func TestBrokerPublisherSendStopsDialingWithItsContext(t *testing.T) {
	t.Parallel()
	p := newPublisher(t, silentBroker(t), 4, func(c *runtime.Config) { c.StepTimeout = time.Hour })
	first, cancelFirst := context.WithCancel(context.Background())
	second, cancelSecond := context.WithCancel(context.Background())
	answers := make(chan error, 2)
	go func() { answers <- p.Send(first, message(t, "x", "k", "dials")) }()
	eventually(t, time.Minute, "the first Send dialing", func() bool { return stacksHold("(*Conn).open(", t.Name()) == 1 })
	go func() { answers <- p.Send(second, message(t, "x", "k", "waits")) }()
	eventually(t, time.Minute, "the second Send waiting for the dial", func() bool {
		return stacksHold("(*Publisher).channel(", "awaitOpen(", t.Name()) == 1
	})
	cancelSecond()
	cancelFirst()
	for range 2 {
		select {
		case err := <-answers:
			if !errors.Is(err, context.Canceled) || errors.Is(err, runtime.ErrUnconfirmed) {
				t.Errorf("a cancelled Send answered %v; want not sent, its context's error", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("a cancelled Send still waits for its connection a minute later")
		}
	}
}

// stallVhost is a virtual host of the test's own on the local broker with
// a topic exchange x, a queue ok bound to "ok.#" and a queue stalled bound
// to "stalled.#", whose process is suspended, so that it confirms nothing,
// until the returned resume (also run when the test ends, and by the broker
// itself five minutes on, longer than any test using it takes, should the
// test die first). In a vhost of its own:
// while a queue is suspended, rabbitmqctl list_queues waits for it, and
// other tests list "/". It returns the vhost's URL.
func stallVhost(t *testing.T) (url string, resume func()) {
	t.Helper()
	brokerURL(t) // skipped under -short before rabbitmqctl changes the broker
	var b [3]byte
	_, _ = rand.Read(b[:])
	vhost := "lilytest-stall-" + hex.EncodeToString(b[:])
	ctl := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("rabbitmqctl", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("rabbitmqctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	ctl("add_vhost", vhost)
	t.Cleanup(func() { _ = exec.Command("rabbitmqctl", "delete_vhost", vhost).Run() })
	uri, err := amqp.ParseURI(brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	ctl("set_permissions", "-p", vhost, uri.Username, ".*", ".*", ".*")
	uri.Vhost = vhost
	url = uri.String()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch := channel(t, conn)
	if err := ch.ExchangeDeclare("x", "topic", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"ok", "stalled"} {
		if _, err := ch.QueueDeclare(q, false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind(q, q+".#", "x", false, nil); err != nil {
			t.Fatal(err)
		}
	}
	pid := `{ok, Q} = rabbit_amqqueue:lookup(rabbit_misc:r(<<"` + vhost + `">>, queue, <<"stalled">>)), P = amqqueue:get_pid(Q), `
	if out := ctl("eval", pid+`sys:suspend(P), timer:apply_after(300000, sys, resume, [P]).`); !strings.Contains(out, "ok") {
		t.Fatalf("suspend: %s", out)
	}
	var once sync.Once
	// Resumed before the vhost is deleted: cleanups run last first.
	resume = func() { once.Do(func() { ctl("eval", pid+`sys:resume(P).`) }) }
	t.Cleanup(resume)
	return url, resume
}

// A destination that never answers does not take the window from the
// others: with one queue's process suspended, Sends to it fill the window
// and give up on their confirms; once half the window has waited a step
// more, the channel is closed, which answers them, and a Send to another
// queue goes through. The copies written to the suspended queue reach it
// once it resumes.
func TestBrokerPublisherStalledDestinationFreesTheWindow(t *testing.T) {
	t.Parallel()
	url, resume := stallVhost(t)
	// A step that carries the first dial on a loaded machine.
	p := newPublisher(t, url, 4, func(c *runtime.Config) { c.StepTimeout = 3 * time.Second })
	// Connected, and the exchange found, before the short sends below.
	if err := p.Send(context.Background(), message(t, "x", "ok.0", "before")); err != nil {
		t.Fatal(err)
	}
	send := func(key, id string, within time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		return p.Send(ctx, message(t, "x", key, id))
	}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			if err := send("stalled."+strconv.Itoa(i), "stalled-"+strconv.Itoa(i), 300*time.Millisecond); !errors.Is(err, runtime.ErrUnconfirmed) {
				t.Errorf("send %d to the suspended queue: %v; want unconfirmed", i, err)
			}
		})
	}
	wg.Wait()
	eventually(t, 2*time.Minute, "a send to another queue", func() bool { return send("ok.1", "after", 5*time.Second) == nil })
	resume()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	got := map[string]int{}
	for _, d := range drainOn(t, conn, "ok") {
		got[d.MessageId]++
	}
	if got["before"] != 1 || got["after"] < 1 {
		t.Errorf("queue ok holds %v", got)
	}
	eventually(t, 2*time.Minute, "the suspended queue's copies", func() bool {
		ch := channel(t, conn)
		defer ch.Close()
		state, err := ch.QueueDeclarePassive("stalled", false, false, false, false, nil)
		return err == nil && state.Messages == 4
	})
}

// Closing the stalled channel while Sends to other queues write on it: a
// frame written after its channel.close reaches RabbitMQ as the first frame
// of a channel never opened, which closes the connection (504) under every
// publish on it and every channel it carries. The writes under way end
// before the close, and later ones go to the next channel: the connection
// stays, and each Send confirmed meanwhile is in its queue once.
func TestBrokerPublisherRetiresAChannelWithoutItsConnection(t *testing.T) {
	t.Parallel()
	url, resume := stallVhost(t)
	uri, err := amqp.ParseURI(url)
	if err != nil {
		t.Fatal(err)
	}
	// on lists the pids of the vhost's connections, or of its confirm-mode
	// channels: the publisher's.
	on := func(what string, items ...string) []string {
		out, err := exec.Command("rabbitmqctl", append([]string{"list_" + what, "-q", "--no-table-headers", "pid", "vhost"}, items...)...).CombinedOutput()
		if err != nil {
			t.Errorf("list_%s: %v\n%s", what, err, out)
			return nil
		}
		var pids []string
		for line := range strings.Lines(string(out)) {
			if f := strings.Fields(line); len(f) == 2+len(items) && f[1] == uri.Vhost && (len(items) == 0 || f[2] == "true") {
				pids = append(pids, f[0])
			}
		}
		return pids
	}
	// A step that no channel open or close of a passing run outlasts on a
	// loaded machine, which would abandon the connection: the stalled
	// Sends give up on their own contexts, and the close comes a step
	// after.
	p := newPublisher(t, url, 32, func(c *runtime.Config) { c.StepTimeout = 5 * time.Second })
	if err := p.Send(context.Background(), message(t, "x", "ok.0", "before")); err != nil {
		t.Fatal(err)
	}
	conns, first := on("connections"), on("channels", "confirm")
	if len(conns) != 1 || len(first) != 1 {
		t.Fatalf("connections %v, confirm channels %v: want the publisher's", conns, first)
	}
	send := func(key, id string, within time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		return p.Send(ctx, message(t, "x", key, id))
	}
	stop := make(chan struct{})
	var mu sync.Mutex
	var confirmed []string
	// unconfirmed counts the busy Sends the close answered.
	var unconfirmed atomic.Int32
	var busy sync.WaitGroup
	for i := range 16 {
		busy.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("busy-%d-%d", i, n)
				switch err := send("ok.busy", id, 10*time.Second); {
				case err == nil:
					mu.Lock()
					confirmed = append(confirmed, id)
					mu.Unlock()
				case errors.Is(err, runtime.ErrUnconfirmed):
					unconfirmed.Add(1)
				}
			}
		})
	}
	var stalled sync.WaitGroup
	for i := range 16 {
		stalled.Go(func() {
			// Time enough to be written beside the busy Sends on a loaded
			// machine: the close needs half the window stalled.
			if err := send("stalled."+strconv.Itoa(i), "stalled-"+strconv.Itoa(i), 2*time.Second); !errors.Is(err, runtime.ErrUnconfirmed) {
				t.Errorf("send %d to the suspended queue: %v; want unconfirmed", i, err)
			}
		})
	}
	stalled.Wait()
	// The close answers the busy Sends in flight on the channel; each look
	// at the broker starts a rabbitmqctl, so it looks once a second.
	for deadline, look := time.Now().Add(60*time.Second), time.Now(); unconfirmed.Load() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the stalled channel not closed within a minute")
		}
		if time.Since(look) > time.Second {
			if !slices.Contains(on("channels", "confirm"), first[0]) {
				break
			}
			look = time.Now()
		}
	}
	close(stop)
	busy.Wait()
	if err := send("ok.1", "after", 5*time.Second); err != nil {
		t.Errorf("a send after the close: %v", err)
	}
	for deadline := time.Now().Add(30 * time.Second); slices.Contains(on("channels", "confirm"), first[0]); time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("the stalled channel %s still open", first[0])
		}
	}
	if now := on("connections"); !slices.Equal(now, conns) {
		t.Errorf("connections %v, want %v: the close took the connection", now, conns)
	}
	resume()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	got := map[string]int{}
	for _, d := range drainOn(t, conn, "ok") {
		got[d.MessageId]++
	}
	for _, id := range append(confirmed, "before", "after") {
		if got[id] != 1 {
			t.Errorf("queue ok holds %s %d times, want once", id, got[id])
		}
	}
}

// confirmChannel is a confirm-mode channel as rabbitmqctl lists it: its
// process, its number on its connection (they count up), and the publishes
// on it the broker has not confirmed.
type confirmChannel struct {
	pid                 string
	number, unconfirmed int
}

// listConfirmChannels lists the confirm-mode channels of vhost, a virtual
// host of the test's own: its publisher's.
func listConfirmChannels(t *testing.T, vhost string) []confirmChannel {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", "list_channels", "-q", "--no-table-headers", "pid", "vhost", "confirm", "number", "messages_unconfirmed").CombinedOutput()
	if err != nil {
		t.Fatalf("list_channels: %v\n%s", err, out)
	}
	var chs []confirmChannel
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) != 5 || f[1] != vhost || f[2] != "true" {
			continue
		}
		number, _ := strconv.Atoi(f[3])
		unconfirmed, _ := strconv.Atoi(f[4])
		chs = append(chs, confirmChannel{f[0], number, unconfirmed})
	}
	return chs
}

// awaitConfirmChannels looks at vhost's confirm-mode channels once a second
// (each look starts a rabbitmqctl) until ok holds of them, for a minute at
// most.
func awaitConfirmChannels(t *testing.T, vhost, what string, ok func([]confirmChannel) bool) []confirmChannel {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(time.Second) {
		chs := listConfirmChannels(t, vhost)
		if ok(chs) {
			return chs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute; confirm channels %v", what, chs)
		}
	}
}

// A nack retires its channel from publishing: RabbitMQ 3.10 nacks every
// publish on a channel opened while a quorum queue elects a leader, for
// seconds, while a new channel publishes at once (TestClusterPublisher…).
// Here a full queue (max-length 0, reject-publish) nacks: the next Send goes
// on a new channel, a Send in flight on the nacked one (to a suspended
// queue) keeps it open and is confirmed once the queue resumes, then the
// nacked channel closes. A burst of nacks opens a channel a second at most,
// and leaves one open.
func TestBrokerPublisherNackRenewsTheChannel(t *testing.T) {
	t.Parallel()
	url, uri, conn, resume := nackingVhost(t)
	confirmChannels := func() []confirmChannel { return listConfirmChannels(t, uri.Vhost) }
	await := func(what string, ok func([]confirmChannel) bool) []confirmChannel {
		t.Helper()
		return awaitConfirmChannels(t, uri.Vhost, what, ok)
	}
	// A step that outlasts the looks below, each a rabbitmqctl that takes
	// seconds on a loaded machine and an await that gives up after a
	// minute: the Send in flight waits for its confirm within it, until
	// resume. (30 s ran out once in CI, 65 s into the test.)
	p := newPublisher(t, url, 8, func(c *runtime.Config) { c.StepTimeout = 5 * time.Minute })
	if err := p.Send(context.Background(), message(t, "", "ok", "before")); err != nil {
		t.Fatal(err)
	}
	opened := time.Now() // the channel, a moment before
	stalled := make(chan error, 1)
	go func() { stalled <- p.Send(context.Background(), message(t, "", "stalled", "in-flight")) }()
	first := await("the Send to the suspended queue in flight", func(chs []confirmChannel) bool {
		return len(chs) == 1 && chs[0].unconfirmed == 1
	})[0]
	// A nack retires a channel a second old (confirm.renewAfter).
	time.Sleep(time.Until(opened.Add(time.Second)))
	if err := p.Send(context.Background(), message(t, "", "full", "nacked")); !errors.Is(err, runtime.ErrNacked) {
		t.Fatalf("send to the full queue: %v; want nacked", err)
	}
	if err := p.Send(context.Background(), message(t, "", "ok", "after")); err != nil {
		t.Fatalf("a send after the nack: %v", err)
	}
	chs := confirmChannels()
	if len(chs) != 2 || !slices.Contains(chs, first) {
		t.Fatalf("confirm channels %v after the nack; want %v, kept for the Send in flight, and a new one", chs, first)
	}
	second := chs[0]
	if second == first {
		second = chs[1]
	}
	resume()
	if err := <-stalled; err != nil {
		t.Errorf("the Send in flight on the nacked channel: %v; want confirmed", err)
	}
	await("the nacked channel closed", func(chs []confirmChannel) bool {
		return len(chs) == 1 && chs[0].pid == second.pid
	})

	began := time.Now()
	for i := range 50 {
		if err := p.Send(context.Background(), message(t, "", "full", "burst-"+strconv.Itoa(i))); !errors.Is(err, runtime.ErrNacked) {
			t.Fatalf("send %d to the full queue: %v; want nacked", i, err)
		}
	}
	took := time.Since(began)
	if err := p.Send(context.Background(), message(t, "", "ok", "last")); err != nil {
		t.Fatalf("a send after the burst: %v", err)
	}
	last := await("one confirm channel after the burst", func(chs []confirmChannel) bool { return len(chs) == 1 })[0]
	// The channel numbers of a connection count up: the burst opened
	// last.number - second.number channels, one per second it took at most.
	if opened, most := last.number-second.number, int(took/time.Second)+1; opened > most {
		t.Errorf("50 nacks in %v opened %d channels; want %d at most", took.Round(time.Millisecond), opened, most)
	}
	got := map[string]int{}
	for _, q := range []string{"ok", "stalled"} {
		for _, d := range drainOn(t, conn, q) {
			got[q+" "+d.MessageId]++
		}
	}
	if want := map[string]int{"ok before": 1, "ok after": 1, "ok last": 1, "stalled in-flight": 1}; !maps.Equal(got, want) {
		t.Errorf("the queues hold %v, want %v", got, want)
	}
}

// Half the window stalled closes every channel a stalled Send waits on, one
// a nack retired included: with a window of 4, a Send to a suspended queue
// given up on channel A, a nack that retires A, and another such Send on
// the next channel, B, close both, which answers both. Before, only B was
// closed: the Send on A kept its slot and its stall until the queue
// answered, and from then on a single stall closed the current channel
// under every healthy Send in flight on it. Now one stall on the next
// channel, C, leaves it open.
func TestBrokerPublisherStallClosesRetiredChannelsToo(t *testing.T) {
	t.Parallel()
	url, uri, conn, resume := nackingVhost(t)
	const step = 2 * time.Second
	p := newPublisher(t, url, 4, func(c *runtime.Config) { c.StepTimeout = step })
	send := func(key, id string) error { return p.Send(context.Background(), message(t, "", key, id)) }
	stall := func(id string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := p.Send(ctx, message(t, "", "stalled", id)); !errors.Is(err, runtime.ErrUnconfirmed) {
			t.Fatalf("send %s to the suspended queue: %v; want unconfirmed", id, err)
		}
	}
	gone := func(pid string) func([]confirmChannel) bool {
		return func(chs []confirmChannel) bool {
			return !slices.ContainsFunc(chs, func(c confirmChannel) bool { return c.pid == pid })
		}
	}
	if err := send("ok", "before"); err != nil {
		t.Fatal(err)
	}
	opened := time.Now() // channel A, a moment before
	stall("on-a")
	// A nack retires a channel a second old (confirm.renewAfter).
	time.Sleep(time.Until(opened.Add(time.Second)))
	if err := send("full", "nacked"); !errors.Is(err, runtime.ErrNacked) {
		t.Fatalf("send to the full queue: %v; want nacked", err)
	}
	if err := send("ok", "on-b"); err != nil {
		t.Fatal(err)
	}
	chs := listConfirmChannels(t, uri.Vhost)
	if len(chs) != 2 {
		t.Fatalf("confirm channels %v after the nack; want A, kept for its stalled Send, and B", chs)
	}
	slices.SortFunc(chs, func(x, y confirmChannel) int { return x.number - y.number })
	a, b := chs[0], chs[1]
	stall("on-b")
	awaitConfirmChannels(t, uri.Vhost, "channel B closed at half the window stalled", gone(b.pid))
	// Both closes start together; A's may be listed a moment longer.
	for deadline := time.Now().Add(30 * time.Second); !gone(a.pid)(listConfirmChannels(t, uri.Vhost)); time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Errorf("channel A, retired by the nack, still open with its stalled Send 30 s after B closed")
			break
		}
	}

	if err := send("ok", "on-c"); err != nil {
		t.Fatal(err)
	}
	// The channel numbers of a connection count up: C is the one after B.
	chs = listConfirmChannels(t, uri.Vhost)
	i := slices.IndexFunc(chs, func(c confirmChannel) bool { return c.number > b.number })
	if i < 0 {
		t.Fatalf("confirm channels %v; want C, the one after B, on which a Send was just confirmed", chs)
	}
	c := chs[i]
	stall("on-c")
	// The stall is counted a step after the Send gave up; a close would
	// follow at once. Three steps of looks find C still open.
	for until := time.Now().Add(3 * step); time.Now().Before(until); time.Sleep(time.Second) {
		if gone(c.pid)(listConfirmChannels(t, uri.Vhost)) {
			t.Fatal("a single stalled Send closed the current channel C")
		}
	}
	resume()
	got := map[string]int{}
	for _, d := range drainOn(t, conn, "ok") {
		got[d.MessageId]++
	}
	if want := map[string]int{"before": 1, "on-b": 1, "on-c": 1}; !maps.Equal(got, want) {
		t.Errorf("queue ok holds %v, want %v", got, want)
	}
	// Each stalled Send was written: the queue holds its copy once it
	// resumes.
	eventually(t, 2*time.Minute, "the suspended queue's copies", func() bool {
		ch := channel(t, conn)
		defer ch.Close()
		state, err := ch.QueueDeclarePassive("stalled", false, false, false, false, nil)
		return err == nil && state.Messages == 3
	})
}

// The exchanges a channel found are not asked about again on the channel
// that follows it once a nack retired it, on the same connection: before,
// each new channel asked again, so that a queue nacking every publish cost
// a look (a channel open and close) per exchange sent to besides the
// channel itself, each second. A new connection asks again: an exchange
// deleted meanwhile fails the Send alone, unwritten, rather than closing
// the channel under it.
func TestBrokerPublisherRetirementKeepsTheExchangesFound(t *testing.T) {
	t.Parallel()
	url, uri, conn, _ := nackingVhost(t)
	ch := channel(t, conn)
	if err := ch.QueueBind("full", "full.#", "x", false, nil); err != nil {
		t.Fatal(err)
	}
	p := newPublisher(t, url, 8)
	// retire opens a channel with a Send to x, then retires it with a nack
	// once it is a second old (confirm.renewAfter), and returns it as
	// listed while it was the current one.
	retire := func(n int) confirmChannel {
		t.Helper()
		if err := p.Send(context.Background(), message(t, "x", "ok."+strconv.Itoa(n), "ok-"+strconv.Itoa(n))); err != nil {
			t.Fatal(err)
		}
		opened := time.Now() // the channel, a moment before at most
		chs := listConfirmChannels(t, uri.Vhost)
		if len(chs) == 0 {
			t.Fatal("no confirm channel after a confirmed Send")
		}
		// Channel numbers count up: the newest is the current one.
		current := slices.MaxFunc(chs, func(x, y confirmChannel) int { return x.number - y.number })
		time.Sleep(time.Until(opened.Add(time.Second)))
		if err := p.Send(context.Background(), message(t, "x", "full."+strconv.Itoa(n), "nacked-"+strconv.Itoa(n))); !errors.Is(err, runtime.ErrNacked) {
			t.Fatalf("send %d to the full queue: %v; want nacked", n, err)
		}
		return current
	}
	retire(0)
	b := retire(1)
	c := retire(2)
	if c.number != b.number+1 {
		t.Errorf("channel %d follows channel %d: a look at exchange x opened the ones between", c.number, b.number)
	}

	// A new connection: the broker closes this one, and x goes meanwhile.
	out, err := exec.Command("rabbitmqctl", "list_connections", "-q", "--no-table-headers", "pid", "vhost", "client_properties").CombinedOutput()
	if err != nil {
		t.Fatalf("list_connections: %v\n%s", err, out)
	}
	closed := 0
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) > 2 && f[1] == uri.Vhost && strings.Contains(line, "lily publisher") {
			if out, err := exec.Command("rabbitmqctl", "close_connection", f[0], "a new connection for the test").CombinedOutput(); err != nil {
				t.Fatalf("close_connection: %v\n%s", err, out)
			}
			closed++
		}
	}
	if closed != 1 {
		t.Fatalf("closed %d connections of the publisher; want its one\n%s", closed, out)
	}
	if err := ch.ExchangeDelete("x", false, false); err != nil {
		t.Fatal(err)
	}
	// Through the default exchange, which needs no look, until the Send is
	// confirmed on the new connection.
	eventually(t, 2*time.Minute, "a Send on a new connection", func() bool {
		return p.Send(context.Background(), message(t, "", "ok", "reconnected")) == nil
	})
	if err := p.Send(context.Background(), message(t, "x", "ok.3", "ok-3")); err == nil || errors.Is(err, runtime.ErrUnconfirmed) || !strings.Contains(err.Error(), "no exchange x") {
		t.Errorf("send to x, deleted while the connection was lost: %v; want no exchange, not written", err)
	}
	got := map[string]int{}
	for _, d := range drainOn(t, conn, "ok") {
		got[d.MessageId]++
	}
	for _, id := range []string{"ok-0", "ok-1", "ok-2"} {
		if got[id] != 1 {
			t.Errorf("queue ok holds %s %d times, want once (all: %v)", id, got[id], got)
		}
	}
}

// A node that takes each connection and closes it at once (wrong
// credentials, a connection limit) while a hundred Sends wait: the
// connection's one backoff paces the dials, and each Send waiting for a
// dial takes its failure rather than dial again. Each Send is answered
// not sent. Before the shared backoff, the same run made about 600 dials.
func TestPublisherRefusedDialsShareOneBackoff(t *testing.T) {
	services.Slow(t, "five seconds of refused dials")
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepts atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepts.Add(1)
			c.Close()
		}
	}()
	p, err := runtime.NewPublisher(runtime.Config{
		URLs: []string{"amqp://guest:guest@" + ln.Addr().String() + "/"}, StepTimeout: 2 * time.Second, Logger: slog.New(slog.DiscardHandler),
	}, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	errs := make([]error, 100)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			errs[i] = p.Send(ctx, runtime.Message{RoutingKey: "q", Publishing: runtime.Publishing{MessageId: strconv.Itoa(i)}})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil || errors.Is(err, runtime.ErrUnconfirmed) {
			t.Errorf("send %d: %v, want not sent", i, err)
		}
	}
	// The waits double from 100 ms, each between half and all of its
	// bound: at most 7 dials fit in 5 s; the rest is room.
	if n := accepts.Load(); n > 12 {
		t.Errorf("%d dials for 100 Sends over 5 s, want one backoff's", n)
	}
}

// A Send waiting to connect again, in the wait between attempts (a minute
// here), fails when the Publisher closes, not once its wait is over, and
// leaves no goroutine behind. Before, Close woke none of them: each slept
// its wait out, ReconnectMax (30 s) at most by default.
func TestPublisherCloseEndsTheSendsWaitingToConnect(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now: each dial is refused
	p, err := runtime.NewPublisher(runtime.Config{URLs: []string{"amqp://guest:guest@" + addr + "/"}, Logger: slog.New(slog.DiscardHandler)}, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.SetReconnectWait(time.Minute)
	answer := make(chan error, 1)
	go func() {
		answer <- p.Send(context.Background(), runtime.Message{RoutingKey: "fx-pubclose-q", Publishing: runtime.Publishing{MessageId: "waits"}})
	}()
	// In connect, past its dial: in the wait before the next.
	eventually(t, time.Minute, "the Send waiting to connect again", func() bool {
		return stacksHold("(*Publisher).connect(", t.Name()) == 1 && stacksHold("(*Publisher).channel(", t.Name()) == 0
	})
	p.Close()
	select {
	case err := <-answer:
		if err == nil || errors.Is(err, runtime.ErrUnconfirmed) || !strings.Contains(err.Error(), "the publisher has closed") {
			t.Errorf("the Send waiting when the Publisher closed: %v; want not sent, the publisher closed", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("a Send waiting to connect again still waits 15 s after Close")
	}
	eventually(t, time.Minute, "the Send's goroutine gone", func() bool { return stacksHold("(*Publisher).Send(", t.Name()) == 0 })
}

// requestReply has a requester consume RabbitMQ's direct reply-to
// pseudo-queue (no-ack, as the broker requires) on ch and send a request to
// a server-named queue of its own, and returns the replies it receives and
// the request's ReplyTo as the responder reads it: the reply-to address,
// amq.rabbitmq.reply-to.<token>.
func requestReply(t *testing.T, ch *amqp.Channel) (replies <-chan amqp.Delivery, replyTo string) {
	t.Helper()
	replies, err := ch.Consume("amq.rabbitmq.reply-to", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish("", q.Name, false, false, amqp.Publishing{ReplyTo: "amq.rabbitmq.reply-to", Body: []byte("request")}); err != nil {
		t.Fatal(err)
	}
	var request amqp.Delivery
	eventually(t, 2*time.Minute, "the request in its queue", func() bool {
		d, ok, err := ch.Get(q.Name, true)
		if err != nil {
			t.Fatal(err)
		}
		request = d
		return ok
	})
	if !strings.HasPrefix(request.ReplyTo, "amq.rabbitmq.reply-to.") {
		t.Fatalf("the request's reply_to is %q", request.ReplyTo)
	}
	return replies, request.ReplyTo
}

// A reply to a direct reply-to address goes to the requester's channel, no
// queue, and RabbitMQ returns a mandatory publish of it though it delivered
// it: answered returned, it would be sent again, and delivered again. Its
// Send is confirmed, and the requester receives it once: the next reply,
// sent after it on the same channel, is the next to arrive. A reply to a
// requester gone since is confirmed too, and dropped.
func TestBrokerPublisherDirectReplyIsConfirmedAndDeliveredOnce(t *testing.T) {
	t.Parallel()
	requester := channel(t, dial(t))
	replies, replyTo := requestReply(t, requester)
	p := newPublisher(t, brokerURL(t), 4)
	for _, id := range []string{"reply", "after"} {
		if err := p.Send(context.Background(), message(t, "", replyTo, id)); err != nil {
			t.Fatalf("the Send of %s: %v", id, err)
		}
	}
	var got []string
	for len(got) < 2 {
		select {
		case d := <-replies:
			got = append(got, d.MessageId)
		case <-time.After(30 * time.Second):
			t.Fatalf("the requester received %v", got)
		}
	}
	if !slices.Equal(got, []string{"reply", "after"}) {
		t.Errorf("the requester received %v, want reply, then after", got)
	}
	if err := requester.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Send(context.Background(), message(t, "", replyTo, "late")); err != nil {
		t.Errorf("the Send to a requester gone: %v", err)
	}
}

// nackingVhost is stallVhost's vhost, its URL parsed, a connection to it,
// and in it the queue "full", which nacks every publish (max-length 0,
// reject-publish).
func nackingVhost(t *testing.T) (url string, uri amqp.URI, conn *amqp.Connection, resume func()) {
	t.Helper()
	url, resume = stallVhost(t)
	uri, err := amqp.ParseURI(url)
	if err != nil {
		t.Fatal(err)
	}
	if conn, err = amqp.Dial(url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := channel(t, conn).QueueDeclare("full", false, false, false, false, amqp.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"}); err != nil {
		t.Fatal(err)
	}
	return url, uri, conn, resume
}

// NewPublisher refuses a window over its maximum, with the other problems
// of its Config, and takes one at it. Before, any window was taken: one of
// 100,000 cost 100 MB at each channel open, and one too large for the
// Return buffer panicked inside the first Send, leaving every later Send
// waiting on the channel it was opening.
func TestNewPublisherRefusesAWindowOverItsMaximum(t *testing.T) {
	for _, window := range []int{4097, 100_000, math.MaxInt} {
		_, err := runtime.NewPublisher(runtime.Config{StepTimeout: -time.Second}, window)
		want := fmt.Sprintf("publisher window %d is over 4096 publishes in flight", window)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "Config.StepTimeout") {
			t.Errorf("window %d: %v; want refused, %q and the StepTimeout both said", window, err, want)
		}
	}
	p, err := runtime.NewPublisher(runtime.Config{}, 4096)
	if err != nil {
		t.Fatalf("window 4096: %v; want taken", err)
	}
	p.Close()
}

// A publish the broker refuses by closing its channel (here a 403: the
// user may not write to the default exchange) answers with the broker's
// reason, not only that the channel closed: it is what an operator needs
// to mend it, and the record and Health of a failed handoff carry it.
func TestBrokerPublisherSaysWhyTheBrokerClosedItsChannel(t *testing.T) {
	t.Parallel()
	user := brokerUser(t, "nowrite", "secret")
	rabbitmqctl(t, "set_permissions", "-p", "/", user, ".*", "^$", ".*")
	q := brokerSpec(t)
	declareTopology(t, q)
	p := newPublisher(t, brokerURL(t), 0, func(cfg *runtime.Config) {
		cfg.Credentials = func(context.Context) (string, string, error) { return user, "secret", nil }
	})
	err := p.Send(t.Context(), message(t, "", q.Name, "refused"))
	if !errors.Is(err, runtime.ErrUnconfirmed) || !strings.Contains(err.Error(), "channel closed before the confirm: ") ||
		!strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "ACCESS_REFUSED") {
		t.Errorf("Send = %v; want unconfirmed, with the broker's 403", err)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}})
}
