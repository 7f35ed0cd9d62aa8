package runtime

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/runtime/internal/guard"
	"github.com/lily-mq/lily/topology"
)

// refusingSpec is a classic queue of its own name with its DLQ, one slot,
// one attempt and a second for its handler: what its handler refuses goes
// to the DLQ at once, through the handoff the test stands in for.
func refusingSpec(name string) QueueSpec {
	return QueueSpec{
		Name: name, Topology: topology.Queue{Type: "classic", DeadLetterQueue: name + ".dlq"},
		Prefetch: 1, Concurrency: 1, MaxAttempts: 1, MaxBodyBytes: 1024, HandlerTimeout: time.Second,
	}
}

// refusingConsumer is a consumer of spec whose handler of wireType version 1
// refuses every message permanently, counting its calls in calls (nil: not
// counted); cfg logs nothing unless it names a logger.
func refusingConsumer(t *testing.T, spec QueueSpec, wireType string, cfg Config, calls *atomic.Int32) *Consumer {
	t.Helper()
	refuse := func(context.Context, RawDelivery) error {
		if calls != nil {
			calls.Add(1)
		}
		return Permanent(errors.New("refused"))
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c, err := NewConsumer(spec, Routes{{Type: wireType, Version: 1, ContentType: "application/json"}: refuse}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// versionOne is a delivery of message m-1, type t version 1, an empty JSON
// object, redelivered after its first tag.
func versionOne(tag uint64) *amqp.Delivery {
	return &amqp.Delivery{DeliveryTag: tag, Redelivered: tag > 1, MessageId: "m-1", Type: "t", ContentType: "application/json",
		Headers: amqp.Table{guard.HeaderVersion: int32(1)}, Body: []byte(`{}`)}
}
