package lilytest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"maps"
	"reflect"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/frame"
	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/internal/services"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
)

type failing struct{}

func (failing) HandleOrderPlacedV1(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
	return errors.New("busy")
}

// A retry copy, published as the consumer handed it to a retry bucket of
// each queue type on RabbitMQ, declared as the runtime declares it, comes
// back to the queue as Result.Copy says, delivered: with the same headers
// (the time of the x-death within a second or two), through the default
// exchange with the queue's name as its routing key.
func TestBrokerBucketHandsBackWhatCopySays(t *testing.T) {
	conn, err := amqp.Dial(services.RabbitMQ(t))
	if err != nil {
		t.Fatalf("dial: %v (start RabbitMQ, or set LILY_AMQP_URL)", err)
	}
	t.Cleanup(func() { conn.Close() })
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	for _, typ := range []string{queue.Classic, queue.Quorum} {
		spec := fixture.LilytestQueueSpec()
		spec.Name = "lilytest-bucket." + typ + "." + hex.EncodeToString(suffix)
		spec.Topology.Type = typ
		h, err := New(spec, fixture.LilytestRoutes(failing{}), runtime.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		p, err := fixture.NewOrderPlacedV1("bucket-1", &fixture.OrderPlacedV1{OrderID: "bucket-1"})
		if err != nil {
			t.Fatal(err)
		}
		res := h.Deliver(p)
		h.Close()
		if res.Path != runtime.PathRetried || res.Copy == nil {
			t.Fatalf("%s: %+v", typ, res)
		}
		handed := *res.Copy
		handed.Headers = maps.Clone(handed.Headers)
		maps.DeleteFunc(handed.Headers, func(k string, _ any) bool { return envelope.BrokerRecord(k) })

		got := bucketRoundTrip(t, conn, spec, res.Destination, amqp.Publishing(handed))
		want, err := delivery(*res.Copy, spec.Name, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got.Exchange != want.Exchange || got.RoutingKey != want.RoutingKey {
			t.Errorf("%s: delivered via %q %q, lilytest %q %q", typ, got.Exchange, got.RoutingKey, want.Exchange, want.RoutingKey)
		}
		sameDeathTime(t, typ, got.Headers, want.Headers)
		if !reflect.DeepEqual(got.Headers, want.Headers) {
			t.Errorf("%s: the bucket hands back %#v, lilytest %#v", typ, got.Headers, want.Headers)
		}
	}
}

// bucketRoundTrip declares spec's queue and its retry bucket on conn, as the
// runtime does, publishes copy to bucket and returns it as the queue
// delivers it once it expired there. The queues are deleted when the test
// ends.
func bucketRoundTrip(t *testing.T, conn *amqp.Connection, spec runtime.QueueSpec, bucket string, copy amqp.Publishing) amqp.Delivery {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	for _, decl := range queue.Declarations(queue.Topology{Name: spec.Name, Queue: spec.Topology, BrokerMajor: 3}) {
		if decl.Name != spec.Name && decl.Name != bucket {
			continue // the DLQ, not needed
		}
		if _, err := ch.QueueDeclare(decl.Name, true, false, false, false, decl.Args); err != nil {
			t.Fatalf("declare %s: %v", decl.Name, err)
		}
		t.Cleanup(func() {
			if ch, err := conn.Channel(); err == nil {
				_, _ = ch.QueueDelete(decl.Name, false, false, false)
				_ = ch.Close()
			}
		})
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	confirm, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", bucket, true, false, copy)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := confirm.WaitContext(ctx); !ok || err != nil {
		t.Fatalf("publish to %s: confirmed %v, %v", bucket, ok, err)
	}
	// Consumed, not got: on 3.10.8 a quorum queue's basic.get adds an
	// x-delivery-count of 0, which a consumer's first delivery lacks.
	deliveries, err := ch.Consume(spec.Name, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var d amqp.Delivery
	select {
	case d = <-deliveries:
	case <-ctx.Done():
		t.Fatalf("%s: not handed back by %s", spec.Name, bucket)
	}
	return d
}

// sameDeathTime checks that the x-death times of got and want, one entry
// each, are within two seconds of each other, and then sets got's to want's.
func sameDeathTime(t *testing.T, typ string, got, want amqp.Table) {
	t.Helper()
	g, _ := got[frame.XDeath].([]any)
	w, _ := want[frame.XDeath].([]any)
	if len(g) != 1 || len(w) != 1 {
		t.Fatalf("%s: x-death %#v, lilytest %#v", typ, got[frame.XDeath], want[frame.XDeath])
	}
	ge, _ := g[0].(amqp.Table)
	we, _ := w[0].(amqp.Table)
	gt, _ := ge["time"].(time.Time)
	wt, _ := we["time"].(time.Time)
	if d := gt.Sub(wt); d < -2*time.Second || d > 2*time.Second {
		t.Errorf("%s: x-death time %v, lilytest %v", typ, gt, wt)
	}
	ge["time"] = wt
}
