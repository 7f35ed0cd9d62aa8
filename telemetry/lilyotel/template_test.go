package lilyotel_test

import (
	"context"
	"strings"
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

// A send's template is one its destination's name is built from, as the
// conventions mean it: the routing key put in for the placeholder gives
// messaging.destination.name. Through the default exchange the name is the
// key alone, so the template is the placeholder alone; its span is named
// by it.
func TestSendTemplateBuildsItsName(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tel, err := lilyotel.New(lilyotel.Options{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))})
	if err != nil {
		t.Fatal(err)
	}
	for _, to := range [][2]string{{"", "orders.reply-42"}, {"shop", "order.eu.42"}} {
		tel.Publish(context.Background(), to[0], to[1], &runtime.Publishing{})("confirmed", time.Now())
	}
	want := map[string]string{"send {routing key}": "{routing key}", "send shop:{routing key}": "shop:{routing key}"}
	for _, s := range spans.Ended() {
		a := attrs(s)
		template, _ := a["messaging.destination.template"].(string)
		key, _ := a["messaging.rabbitmq.destination.routing_key"].(string)
		if built := strings.ReplaceAll(template, "{routing key}", key); built != a["messaging.destination.name"] || want[s.Name()] != template {
			t.Errorf("span %q: template %q builds %q, destination %q", s.Name(), template, built, a["messaging.destination.name"])
		}
	}
}
