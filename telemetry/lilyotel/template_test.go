package lilyotel_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/lilytest"
	"github.com/lily-mq/lily/telemetry/lilyotel"
)

// A delivery whose routing key its producer picked gives its spans' names
// a template, "{exchange}:{routing key}:{queue}": the process and settle
// spans carry that template and the routing key itself, as the conventions
// ask of a span named by a template.
func TestSpansNamedByATemplateCarryIt(t *testing.T) {
	spec := harnessSpec("q")
	spec.Messages = []envelope.Message{{Type: "t", Inbox: envelope.InboxOptional}}
	routes := runtime.Routes{{Type: "t", Version: 1, ContentType: "application/json"}: func(context.Context, runtime.RawDelivery) error { return nil }}
	p := runtime.NewPublishing(envelope.Message{Type: "t"}, 1, "m-1", []byte(`{}`))
	d, err := lilytest.RawDelivery(spec, routes, p, lilytest.Via("shop", "order.eu.42"))
	if err != nil {
		t.Fatal(err)
	}
	spans := tracetest.NewSpanRecorder()
	tel, err := lilyotel.New(lilyotel.Options{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := tel.Received(context.Background(), "q", d)
	tel.Settle(ctx, "ack")("ack sent", time.Now())
	tel.Settled(ctx, runtime.Record{Queue: "q", MessageID: "m-1", Path: runtime.PathAcked, Handler: "ok"})
	ended := spans.Ended()
	if len(ended) != 2 {
		t.Fatalf("%d spans ended, want the settle and the process span", len(ended))
	}
	for _, s := range ended {
		attrs := map[string]string{}
		for _, a := range s.Attributes() {
			attrs[string(a.Key)] = a.Value.String()
		}
		if attrs["messaging.destination.template"] != "shop:{routing key}:q" || attrs["messaging.rabbitmq.destination.routing_key"] != "order.eu.42" ||
			attrs["messaging.destination.name"] != "shop:order.eu.42:q" {
			t.Errorf("span %q: template %q, routing key %q, destination %q", s.Name(), attrs["messaging.destination.template"],
				attrs["messaging.rabbitmq.destination.routing_key"], attrs["messaging.destination.name"])
		}
	}
}
