package lilyotel_test

import (
	"context"
	"fmt"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/telemetry/lilyotel"
)

// A Telemetry goes into the runtime.Config of each consumer and publisher.
// Here, without a broker, it is told of a publish as a Publisher's Send tells
// it: the send span is exported, and the message carries its context.
func ExampleNew() {
	exported := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exported))
	tel, err := lilyotel.New(lilyotel.Options{TracerProvider: tp, BodySize: true})
	if err != nil {
		panic(err)
	}
	cfg := runtime.Config{Telemetry: tel} // for runtime.NewConsumer or runtime.NewPublisher
	_ = cfg

	msg := runtime.NewPublishing(envelope.Message{Type: "order.placed"}, 1, "order-1", []byte(`{"order_id":"1"}`))
	done := tel.Publish(context.Background(), "shop.events", "order.placed", &msg)
	// The broker's answer, and the instant it came.
	done("confirmed", time.Now())

	span := exported.GetSpans()[0]
	fmt.Println(span.Name, span.SpanKind)
	for _, a := range span.Attributes {
		if a.Key == "messaging.destination.name" || a.Key == "messaging.message.body.size" {
			fmt.Println(a.Key, a.Value.String())
		}
	}
	fmt.Println("traceparent:", msg.Headers["traceparent"] == fmt.Sprintf("00-%s-%s-01", span.SpanContext.TraceID(), span.SpanContext.SpanID()))
	// Output:
	// send shop.events:{routing key} producer
	// messaging.destination.name shop.events:order.placed
	// messaging.message.body.size 16
	// traceparent: true
}
