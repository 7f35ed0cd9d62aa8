package pgoutbox_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/outbox/pgoutbox"
	"github.com/lily-mq/lily/runtime"
)

// A row that replies to a direct reply-to address (a request's ReplyTo,
// amq.rabbitmq.reply-to.<token>): RabbitMQ hands it to the requester's
// channel, no queue, and returns a mandatory publish of it though it
// delivered it, so a relay that took that for returned would deliver it at
// every retry. It is published once, and its row deleted; the requester
// receives it once, followed by the row written after it.
func TestDirectReplyRowIsPublishedOnceAndDeleted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	requester := e.channel()
	defer requester.Close()
	replies, err := requester.Consume("amq.rabbitmq.reply-to", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	requests := e.queue("requests", nil)
	if err := requester.Publish("", requests, false, false, amqp.Publishing{ReplyTo: "amq.rabbitmq.reply-to", Body: []byte("request")}); err != nil {
		t.Fatal(err)
	}
	e.eventually("the request in its queue", func() bool { return e.ready(requests) == 1 })
	replyTo := e.takeOne(requests).ReplyTo
	if !strings.HasPrefix(replyTo, "amq.rabbitmq.reply-to.") {
		t.Fatalf("the request's reply_to is %q", replyTo)
	}
	ordered := func(id string) runtime.Message { m := message(replyTo, id); m.OrderKey = "reply"; return m }
	e.write(ordered("reply"), ordered("after"))
	stop := e.relay(pgoutbox.Options{Poll: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	var got []string
	for len(got) < 2 {
		select {
		case d := <-replies:
			got = append(got, d.MessageId)
		case <-time.After(time.Minute):
			t.Fatalf("the requester received %v", got)
		}
	}
	if !cmp.Equal(got, []string{"reply", "after"}) {
		t.Fatalf("the requester received %v, want reply, then after", got)
	}
	e.eventually("the rows deleted", func() bool { return len(e.rows()) == 0 })
	rep := stop()
	if want := map[runtime.Path]int{"published": 2}; !cmp.Equal(counts(rep), want) {
		t.Errorf("report counts %v, want %v", rep.Counts, want)
	}
}
