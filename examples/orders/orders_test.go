package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/examples/orders/ordersmsg"
	"github.com/lily-mq/lily/internal/services"
	_ "github.com/lily-mq/lily/internal/update"
	"github.com/lily-mq/lily/runtime"
)

// declareScratch declares the example's topology under a queue name of its
// own, so a test leaves the demo's queues alone, and deletes it at the end.
func declareScratch(t *testing.T) (string, runtime.QueueSpec) {
	t.Helper()
	spec := ordersmsg.OrdersQueueSpec()
	var b [3]byte
	_, _ = rand.Read(b[:])
	spec.Name = "lilytest.example." + hex.EncodeToString(b[:])
	spec.Topology.DeadLetterQueue = spec.Name + ".dlq"
	// Bound to nothing: the tests publish to the queue itself, and the
	// demo, which may run beside them, publishes to the shop team's
	// exchange, whose binding would bring its orders here too.
	spec.Topology.Exchanges, spec.Topology.Bindings = nil, nil
	url := services.RabbitMQ(t)
	t.Cleanup(func() { _ = deleteQueues(url, spec, io.Discard) })
	if err := withConnection(url, func(conn *amqp.Connection) error { return runtime.DeclareTopology(conn, spec) }); err != nil {
		t.Fatalf("RabbitMQ must be running: %v", err)
	}
	return url, spec
}

// recorder keeps the typed messages the generated routes hand to it.
type recorder struct{ got chan *ordersmsg.OrderPlacedV2 }

func (r recorder) HandleOrderPlacedV1(context.Context, *ordersmsg.OrderPlacedV1, runtime.RawDelivery) error {
	return nil
}

func (r recorder) HandleOrderPlacedV2(_ context.Context, msg *ordersmsg.OrderPlacedV2, _ runtime.RawDelivery) error {
	r.got <- msg
	return nil
}

// The generated code end to end on the real broker: a v2 message reaches its
// method typed, and one that breaks the schema goes to the DLQ naming the field.
func TestGeneratedConsumerOnTheBroker(t *testing.T) {
	url, spec := declareScratch(t)
	want := &ordersmsg.OrderPlacedV2{
		OrderID: "o-1", AmountCents: 4200,
		Customer: ordersmsg.OrderPlacedV2Customer{Email: "ada@example.com"},
		Items:    []ordersmsg.OrderPlacedV2ItemsItem{{SKU: "A", Qty: 2}},
		PlacedAt: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC),
		Channel:  ordersmsg.OrderPlacedV2ChannelWeb,
		Headers:  ordersmsg.OrderPlacedV2Headers{XTenant: "acme"},
	}
	good, err := ordersmsg.NewOrderPlacedV2("o-1", want)
	if err != nil {
		t.Fatal(err)
	}
	// The generated producer refuses to build what breaks the schema, so
	// this one is built by hand, as a foreign producer might send it.
	bad := runtime.NewPublishing(envelope.Message{Type: ordersmsg.OrderPlacedType}, 2, "o-2", []byte(`{"order_id":"o-2","amount_cents":1,`+
		`"customer":{"email":"ada@example.com"},"items":[{"sku":"","qty":2}],"placed_at":"2026-12-02T10:00:00Z"}`))
	bad.Headers["x-tenant"] = "acme"
	if err := publishTo(url, "", spec.Name, []demoMessage{{msg: good}, {msg: bad}}); err != nil {
		t.Fatal(err)
	}

	// Room for redeliveries too: Observe must never block the consumer.
	records := make(chan runtime.Record, 64)
	rec := recorder{got: make(chan *ordersmsg.OrderPlacedV2, 2)}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	consumer, err := runtime.NewConsumer(spec, ordersmsg.OrdersRoutes(rec), runtime.Config{
		URLs: []string{url}, Logger: quiet, Observe: func(r runtime.Record) { records <- r },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { _, err := consumer.Run(ctx); ran <- err }()
	paths := map[string]runtime.Record{}
	for range 2 {
		select {
		case r := <-records:
			paths[r.MessageID] = r
		case <-time.After(20 * time.Second):
			t.Fatalf("records so far: %v", paths)
		}
	}
	stop()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}

	if diff := cmp.Diff(want, <-rec.got); diff != "" {
		t.Errorf("typed message (-want +got):\n%s", diff)
	}
	if p := paths["o-1"].Path; p != runtime.PathAcked {
		t.Errorf("o-1 path %s", p)
	}
	if r := paths["o-2"]; r.Path != runtime.PathDeadLettered || !strings.Contains(r.Reason, "field items[0].sku: empty") {
		t.Errorf("o-2: %s (%s)", r.Path, r.Reason)
	}
	if len(rec.got) != 0 {
		t.Errorf("the handler saw the message that broke the schema")
	}
	err = withChannel(url, func(ch *amqp.Channel) error {
		for name, want := range map[string]int{spec.Name: 0, spec.Topology.DeadLetterQueue: 1} {
			q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
			if err != nil {
				return err
			}
			if q.Messages != want {
				t.Errorf("%s holds %d messages after the consumer closed, want %d", name, q.Messages, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// -clean deletes every queue the demo declares, full or empty, and may run
// again once they are gone.
func TestDeleteQueuesOnTheBroker(t *testing.T) {
	url, spec := declareScratch(t)
	msg, err := ordersmsg.NewOrderPlacedV1("o-1", &ordersmsg.OrderPlacedV1{OrderID: "o-1", AmountCents: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := publishTo(url, "", spec.Topology.DeadLetterQueue, []demoMessage{{msg: msg}}); err != nil {
		t.Fatal(err)
	}
	var said strings.Builder
	if err := deleteQueues(url, spec, &said); err != nil {
		t.Fatal(err)
	}
	for _, q := range queueNames(spec) {
		if !strings.Contains(said.String(), "deleted queue "+q+" ") {
			t.Errorf("no word of %s in:\n%s", q, said.String())
		}
		// A passive declare of a queue that is gone closes its channel with 404.
		err := withChannel(url, func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
			return err
		})
		if e, ok := errors.AsType[*amqp.Error](err); !ok || e.Code != amqp.NotFound {
			t.Errorf("%s after the clean-up: %v, want 404 NOT_FOUND", q, err)
		}
	}
	if !strings.Contains(said.String(), "deleted queue "+spec.Topology.DeadLetterQueue+" (1 messages)") {
		t.Errorf("the DLQ's message is not counted:\n%s", said.String())
	}
	if err := deleteQueues(url, spec, io.Discard); err != nil {
		t.Errorf("a second clean-up: %v", err)
	}
}
