package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/services"
	_ "github.com/lily-mq/lily/internal/update"
)

// The tests run in parallel (t.Parallel): each reads and moves only queues
// of its own (broker.queue). TestUsageHidesTheURL, which sets the
// environment, runs alone, before them.

// deadline bounds every wait of these tests for a condition on the broker.
const deadline = 60 * time.Second

// broker is a test's connection to RabbitMQ and its URL; the test is skipped
// under -short.
type broker struct {
	t    *testing.T
	url  string
	conn *amqp.Connection
}

func newBroker(t *testing.T) *broker {
	t.Helper()
	url := services.RabbitMQ(t)
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("dial %s: %v (start RabbitMQ, or set LILY_AMQP_URL)", url, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &broker{t: t, url: url, conn: conn}
}

func (b *broker) channel() *amqp.Channel {
	b.t.Helper()
	ch, err := b.conn.Channel()
	if err != nil {
		b.t.Fatalf("channel: %v", err)
	}
	return ch
}

// holdHead has another consumer of queue take its head copy and hold it
// unacknowledged (a colleague's list, a service): it returns that copy and
// the consumer's channel, whose close hands the copy back.
func (b *broker) holdHead(queue string) (amqp.Delivery, *amqp.Channel) {
	b.t.Helper()
	other := b.channel()
	if err := other.Qos(1, 0, false); err != nil {
		b.t.Fatal(err)
	}
	held, err := other.Consume(queue, "another reader", false, false, false, false, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	return <-held, other
}

// queue declares a durable queue of a name of its own (the test's, with a
// random suffix) and deletes it when the test ends.
func (b *broker) queue(role string, args amqp.Table) string {
	b.t.Helper()
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	name := "lilydlq-test." + strings.ReplaceAll(b.t.Name(), "/", ".") + "." + role + "." + hex.EncodeToString(suffix)
	ch := b.channel()
	defer ch.Close()
	if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
		b.t.Fatalf("declare %s: %v", name, err)
	}
	b.t.Cleanup(func() {
		conn, err := amqp.Dial(b.url)
		if err != nil {
			return
		}
		defer conn.Close()
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(name, false, false, false)
		}
	})
	return name
}

// publish sends each message to queue through the default exchange, each
// confirmed.
func (b *broker) publish(queue string, msgs ...amqp.Publishing) {
	b.t.Helper()
	ch := b.channel()
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		b.t.Fatalf("confirm mode: %v", err)
	}
	var last *amqp.DeferredConfirmation
	for _, m := range msgs {
		var err error
		if last, err = ch.PublishWithDeferredConfirm("", queue, true, false, m); err != nil {
			b.t.Fatalf("publish to %s: %v", queue, err)
		}
	}
	if last != nil {
		ok, err := last.WaitContext(context.Background())
		if err != nil || !ok {
			b.t.Fatalf("publish to %s: not confirmed (%v)", queue, err)
		}
	}
}

// ready is a queue's ready count, by a passive declare.
func (b *broker) ready(queue string) int {
	b.t.Helper()
	ch := b.channel()
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		b.t.Fatalf("queue %s: %v", queue, err)
	}
	return q.Messages
}

// assertCounts waits until queue holds ready messages and none
// unacknowledged, by both a passive declare and rabbitmqctl (whose figures
// for a quorum queue lag by a few seconds), and fails the test when that
// does not happen within the deadline.
func (b *broker) assertCounts(queue string, ready int) {
	b.t.Helper()
	var r, u, passive int
	// The passive declare is cheap; rabbitmqctl starts an Erlang VM, about
	// a second of CPU, so it runs only once the declare agrees, once a
	// second at most.
	for end := time.Now().Add(deadline); ; {
		wait := 100 * time.Millisecond
		if passive = b.ready(queue); passive == ready || time.Now().After(end) {
			r, u = queueCounts(b.t, queue)
			wait = time.Second
		}
		if r == ready && u == 0 && passive == ready || time.Now().After(end) {
			break
		}
		time.Sleep(wait)
	}
	if r != ready || u != 0 || passive != ready {
		b.t.Errorf("queue %s: %d ready (%d by a passive declare), %d unacked; want %d ready, 0 unacked", queue, r, passive, u, ready)
	}
}

// queueCounts reads a queue's ready and unacknowledged counts with rabbitmqctl.
func queueCounts(t *testing.T, name string) (ready, unacked int) {
	t.Helper()
	c, ok := services.QueueCounts(t)[name]
	if !ok {
		t.Fatalf("queue %s does not exist", name)
	}
	return c.Ready, c.Unacked
}

// take empties a queue and returns what it held, in order (basic.get with
// automatic acknowledgement: nothing is returned to the queue).
func (b *broker) take(queue string) []amqp.Delivery {
	b.t.Helper()
	n := b.ready(queue)
	ch := b.channel()
	defer ch.Close()
	var out []amqp.Delivery
	for len(out) < n {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			b.t.Fatalf("get from %s: %v", queue, err)
		}
		if !ok {
			break
		}
		out = append(out, d)
	}
	return out
}

// ids are the message ids of ds, in order.
func ids(ds []amqp.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.MessageId
	}
	return out
}

// lilyCopy is a DLQ copy as the runtime's handoff writes it.
func lilyCopy(id, typ, reason, kind, source string, attempt int64, at time.Time) amqp.Publishing {
	return amqp.Publishing{
		MessageId: id, Type: typ, ContentType: "application/json", DeliveryMode: amqp.Persistent,
		Timestamp: at, CorrelationId: "corr-" + id,
		Headers: amqp.Table{
			envelope.HeaderVersion:        int64(2),
			envelope.HeaderAttempt:        attempt, // a DLQ copy carries the attempt that failed
			envelope.HeaderFailureReason:  reason,
			envelope.HeaderFailureKind:    kind,
			envelope.HeaderFailureAttempt: attempt,
			envelope.HeaderFailureQueue:   source,
			envelope.HeaderFailureTime:    at.UTC().Truncate(time.Second),
			envelope.HeaderHandoffID:      "handoff-" + id,
			"x-user-header":               "kept",
		},
		Body: []byte(`{"id":"` + id + `"}`),
	}
}

// result is what one run of lilydlq printed and returned.
type result struct {
	stdout, stderr string
	code           int
}

// lilydlq runs the command in this process against the test's broker.
func (b *broker) lilydlq(args ...string) result {
	b.t.Helper()
	return b.lilydlqContext(context.Background(), args...)
}

// lilydlqTo runs the command with its stdout w, wrapped as main wraps
// os.Stdout; the result's stdout is empty.
func (b *broker) lilydlqTo(w io.Writer, args ...string) result {
	b.t.Helper()
	ctx, stdout := closable(b.t.Context(), w)
	var errs bytes.Buffer
	code := run(ctx, append(args, "-url", b.url), stdout, &errs)
	return result{"", errs.String(), code}
}

func (b *broker) lilydlqContext(ctx context.Context, args ...string) result {
	b.t.Helper()
	var out, errs bytes.Buffer
	code := run(ctx, append(args, "-url", b.url), &out, &errs)
	return result{out.String(), errs.String(), code}
}
