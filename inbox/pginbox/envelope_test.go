package pginbox_test

import (
	"context"
	"sync"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/inbox/pginbox"
	"github.com/lily-mq/lily/runtime"
)

// event is a CloudEvent in binary content mode from source, as an emitter
// publishes it.
func event(source, id string) amqp.Publishing {
	return amqp.Publishing{
		ContentType: "application/json",
		Headers: amqp.Table{
			"cloudEvents_specversion": "1.0", "cloudEvents_id": id, "cloudEvents_source": source,
			"cloudEvents_type": "payment.authorized",
		},
		Body: []byte(`{"key":"k"}`),
	}
}

// A CloudEvent is identified by its source and its id: events of two sources
// that share an id are two messages, each claimed and handled once; the same
// event twice is one. A message whose inbox policy is none is never claimed,
// though its queue's consumer has an inbox.
func TestInboxPerMessageAndCloudEventKeys(t *testing.T) {
	t.Parallel()
	c := newConsumerEnv(t)
	c.spec.Messages = []envelope.Message{
		{Type: "payment.authorized", Profile: envelope.Profile{Kind: envelope.CloudEvents, Version: envelope.Version{Fixed: 1}}, Inbox: envelope.InboxRequired},
		{Type: "Ping", Inbox: envelope.InboxNone},
	}
	var mu sync.Mutex
	runs := map[string]int{}
	count := func(key string) {
		mu.Lock()
		runs[key]++
		mu.Unlock()
	}
	routes := runtime.Routes{
		{Type: "payment.authorized", Version: 1, ContentType: "application/json"}: func(ctx context.Context, d runtime.RawDelivery) error {
			src, _ := d.Header("cloudEvents_source")
			count(src.(string) + " " + d.MessageID())
			return c.write(ctx, "k", 0)
		},
		{Type: "Ping", Version: 1, ContentType: "application/json"}: func(_ context.Context, d runtime.RawDelivery) error {
			count(d.MessageID())
			return nil
		},
	}
	ch := c.channel()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	publish := func(ps ...amqp.Publishing) {
		for _, p := range ps {
			dc, err := ch.PublishWithDeferredConfirm("", c.spec.Name, true, false, p)
			if err != nil || !dc.Wait() {
				t.Fatalf("publish: %v", err)
			}
		}
	}
	ping := runtime.NewPublishing(envelope.Message{Type: "Ping"}, 1, "ping-1", []byte(`{}`))
	// The copies go once the first ones are settled: copies handled at the
	// same time would meet in the consumer's memory of work in hand first.
	publish(event("https://a.example", "e-1"), event("https://b.example", "e-1"), ping)
	c.run(pginbox.New(c.pool, pginbox.Options{}), routes, nil)
	c.await(3)
	publish(event("https://a.example", "e-1"), ping)
	recs := c.await(5)

	commits := map[string]int{}
	for _, r := range recs {
		if r.Path != runtime.PathAcked {
			t.Errorf("record %+v not acked", r)
		}
		commits[r.MessageID+" "+r.Commit]++
	}
	want := map[string]int{
		"https://a.example e-1 committed": 1, "https://b.example e-1 committed": 1, "https://a.example e-1 duplicate": 1,
		"ping-1 ": 2,
	}
	if len(commits) != len(want) {
		t.Errorf("records by id and commit %v, want %v", commits, want)
	}
	for k, n := range want {
		if commits[k] != n {
			t.Errorf("records by id and commit %v, want %v", commits, want)
			break
		}
	}
	mu.Lock()
	if runs["https://a.example e-1"] != 1 || runs["https://b.example e-1"] != 1 || runs["ping-1"] != 2 {
		t.Errorf("handler runs %v", runs)
	}
	mu.Unlock()
	for _, key := range []string{"https://a.example e-1", "https://b.example e-1"} {
		if n, err := c.countClaims(c.ctx, c.spec.Name, key); err != nil || n != 1 {
			t.Errorf("claims of %q: %d, %v", key, n, err)
		}
	}
	if n, err := c.countClaims(c.ctx, c.spec.Name, "ping-1"); err != nil || n != 0 {
		t.Errorf("claims of ping-1: %d, %v", n, err)
	}
	if n, err := c.countRows(c.ctx, "k"); err != nil || n != 2 {
		t.Errorf("business rows: %d, %v", n, err)
	}
	c.expectQueues(0, 0)
}
