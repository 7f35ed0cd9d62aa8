package confirm

import (
	"crypto/rand"
	"encoding/hex"
	"math"
	"net"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/services"
	"github.com/lily-mq/lily/runtime/internal/outcome"
	"github.com/lily-mq/lily/runtime/internal/transport"
)

// The Publisher's channels against the real broker, where a test needs to
// see them: each test asserts which are open.

// ctl runs rabbitmqctl and returns what it printed.
func ctl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// brokerVhost is a virtual host of the test's own on the local broker with
// a queue ok, a queue full that nacks every publish (max-length 0, overflow
// reject-publish) and a queue stalled whose process is suspended, so that
// it confirms nothing, until the test ends (or five minutes on, by the
// broker itself, should the test die first). In a vhost of its own: while
// a queue is suspended, rabbitmqctl list_queues waits for it, and other
// tests list "/". It returns the vhost's URL and name.
func brokerVhost(t *testing.T) (url, vhost string) {
	t.Helper()
	uri, err := amqp.ParseURI(services.RabbitMQ(t))
	if err != nil {
		t.Fatal(err)
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	vhost = "lily-confirm-" + hex.EncodeToString(b[:])
	ctl(t, "add_vhost", vhost)
	t.Cleanup(func() { _ = exec.Command("rabbitmqctl", "delete_vhost", vhost).Run() })
	ctl(t, "set_permissions", "-p", vhost, uri.Username, ".*", ".*", ".*")
	uri.Vhost = vhost
	url = uri.String()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	for q, args := range map[string]amqp.Table{"ok": nil, "stalled": nil, "full": {"x-max-length": int32(0), "x-overflow": "reject-publish"}} {
		if _, err := ch.QueueDeclare(q, false, false, false, false, args); err != nil {
			t.Fatal(err)
		}
	}
	suspend(t, `{ok, Q} = rabbit_amqqueue:lookup(rabbit_misc:r(<<"`+vhost+`">>, queue, <<"stalled">>)), P = amqqueue:get_pid(Q), `)
	return url, vhost
}

// suspend suspends the process that find (Erlang binding P, ending with a
// comma) finds on the broker, until the returned resume, which the test's
// end runs too (and the broker itself five minutes on).
func suspend(t *testing.T, find string) (resume func()) {
	t.Helper()
	out := ctl(t, "eval", find+`sys:suspend(P), timer:apply_after(300000, sys, resume, [P]), pid_to_list(P).`)
	pid := strings.Trim(strings.TrimSpace(out), `"`)
	if !strings.HasPrefix(pid, "<") {
		t.Fatalf("suspend: %s", out)
	}
	var once sync.Once
	// Resumed before the vhost is deleted: cleanups run last first.
	resume = func() { once.Do(func() { ctl(t, "eval", `sys:resume(list_to_pid("`+pid+`")).`) }) }
	t.Cleanup(resume)
	return resume
}

// publish publishes to queue, within d.
func publish(p *Publisher, queue string, d time.Duration) outcome.HandoffEvidence {
	msg := amqp.Publishing{Headers: amqp.Table{}, Body: []byte(queue)}
	return p.Publish(Bounds{Deadline: time.Now().Add(d)}, "", queue, msg, func() error { return nil })
}

func (p *Publisher) currentChannel() *channel {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.current
}

// eventually polls ok until it holds, and fails the test if it does not
// within the given time.
func eventually(t *testing.T, within time.Duration, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
	}
}

// newPublisher returns a publisher on url, with a step of 5 s and a window
// of 4, closed when the test ends.
func newPublisher(t *testing.T, url string) *Publisher {
	t.Helper()
	conn := NewConn(func() (*amqp.Connection, net.Conn, func(), error) {
		conn, socket, err := transport.Dial(url, amqp.Config{}, nil)
		return conn, socket, nil, err
	}, 5*time.Second)
	t.Cleanup(conn.Close)
	p := New(conn, 4)
	t.Cleanup(p.Close)
	return p
}

// retiredBehind returns a publisher on url with channel a, which a nack
// retired and a publish to the suspended queue, given up, holds open, and
// its current channel b.
func retiredBehind(t *testing.T, url string) (p *Publisher, a, b *channel) {
	t.Helper()
	p = newPublisher(t, url)
	if ev := publish(p, "ok", 30*time.Second); ev.Status != outcome.HandoffConfirmed {
		t.Fatalf("publish to ok: %v %s", ev.Status, ev.Detail)
	}
	a = p.currentChannel()
	if ev := publish(p, "stalled", time.Second); ev.Status != outcome.HandoffTimedOut || !ev.Published {
		t.Fatalf("publish to the suspended queue: %v %s; want written and timed out", ev.Status, ev.Detail)
	}
	// A nack retires a channel renewAfter old.
	time.Sleep(time.Until(a.opened.Add(renewAfter)))
	if ev := publish(p, "full", 30*time.Second); ev.Status != outcome.HandoffNacked {
		t.Fatalf("publish to full: %v %s; want nacked", ev.Status, ev.Detail)
	}
	if ev := publish(p, "ok", 30*time.Second); ev.Status != outcome.HandoffConfirmed {
		t.Fatalf("publish to ok after the nack: %v %s", ev.Status, ev.Detail)
	}
	if b = p.currentChannel(); b == a || a.ch.IsClosed() {
		t.Fatalf("after the nack: current channel the same %v, the nacked one closed %v; want a new one, and the nacked one open", b == a, a.ch.IsClosed())
	}
	return p, a, b
}

// CloseBy closes every channel it holds, the retired ones too, whatever
// its deadline: one past already, or used up by a close the broker does
// not answer (here the current channel's process is suspended). Before,
// CloseBy closed them one after another under its deadline, and a close
// begun after it was never sent: the retired channel stayed open on the
// connection, which under Config.Publisher outlives the consumer.
func TestBrokerCloseByClosesRetiredChannels(t *testing.T) {
	t.Parallel()
	t.Run("deadline passed", func(t *testing.T) {
		t.Parallel()
		url, _ := brokerVhost(t)
		p, a, b := retiredBehind(t, url)
		p.CloseBy(time.Now().Add(-time.Second))
		eventually(t, 30*time.Second, "the current channel closed", b.ch.IsClosed)
		eventually(t, 30*time.Second, "the retired channel closed", a.ch.IsClosed)
	})
	t.Run("close unanswered", func(t *testing.T) {
		t.Parallel()
		url, vhost := brokerVhost(t)
		p, a, b := retiredBehind(t, url)
		// The channel numbers of a connection count up: b's is the vhost's
		// highest.
		resume := suspend(t, `{_, P} = lists:max([{N, C} || C <- rabbit_channel:list_local(), [{vhost, V}, {number, N}] <- [rabbit_channel:info(C, [vhost, number])], V =:= <<"`+vhost+`">>]), `)
		p.CloseBy(time.Now().Add(time.Second))
		eventually(t, 30*time.Second, "the retired channel closed", a.ch.IsClosed)
		resume()
		eventually(t, 30*time.Second, "the current channel closed once the broker answers", b.ch.IsClosed)
	})
}

// A panic while a publish opens its channel (here the Return buffer of a
// window too large for it, as a hand-built QueueSpec's Concurrency gives a
// consumer's handoffs, which recover panics) ends the opening: the next
// publish opens again rather than wait on it, and nothing was opened to be
// left behind. Before, the panic came once the channel was open, and left
// it open on the connection, and the opening unended: every later publish
// waited on it until its bound.
func TestBrokerPanicWhileOpeningLeavesNoOpeningBehind(t *testing.T) {
	t.Parallel()
	url := services.RabbitMQ(t)
	var dials atomic.Int32
	conn := NewConn(func() (*amqp.Connection, net.Conn, func(), error) {
		dials.Add(1)
		conn, socket, err := transport.Dial(url, amqp.Config{}, nil)
		return conn, socket, nil, err
	}, 2*time.Second)
	t.Cleanup(conn.Close)
	p := New(conn, math.MaxInt)
	t.Cleanup(p.Close)
	for i := 1; i <= 2; i++ {
		var ev outcome.HandoffEvidence
		recovered := func() (r any) {
			defer func() { r = recover() }()
			ev = publish(p, "lily-confirm-nowhere", 30*time.Second)
			return nil
		}()
		if recovered == nil {
			t.Fatalf("publish %d: %v %s; want the open's panic", i, ev.Status, ev.Detail)
		}
	}
	p.mu.Lock()
	opening := p.opening
	p.mu.Unlock()
	if opening != nil {
		t.Error("the panics left an opening behind")
	}
	if n := dials.Load(); n != 0 {
		t.Errorf("%d connections dialled for publishes that panicked before they could use one; want none", n)
	}
}
