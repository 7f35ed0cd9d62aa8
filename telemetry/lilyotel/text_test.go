package lilyotel

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/lily-mq/lily/runtime"
)

// An id a publish names reaches its span valid, printable and bounded,
// whatever the message carried; an ordinary id, unchanged.
func TestIDText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"order-42", "order-42"},
		{"a b", "a b"},
		{"sipariş-7", "sipariş-7"},
		{"\xff\xfe\x1b[2J\u202eevil", `\xff\xfe\x1b[2J\xe2\x80\xaeevil`},
		{"tab\there\u0085", `tab\x09here\xc2\x85`},
		{"zero\u200bwidth\u2028line\U000e0041", `zero\xe2\x80\x8bwidth\xe2\x80\xa8line\xf3\xa0\x81\x81`},
		{strings.Repeat("x", 200), strings.Repeat("x", maxIDText-3) + "..."},
		{strings.Repeat("é", 100), strings.Repeat("é", (maxIDText-3)/2) + "..."},
	} {
		got := idText(tc.in)
		if got != tc.want || !utf8.ValidString(got) || len(got) > maxIDText {
			t.Errorf("idText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = idText("01J9ZK3M4XQ7-order-42") }); n != 0 {
		t.Errorf("%v allocations for an ordinary id", n)
	}
}

// A send span names its exchange and routing key valid, printable and
// within AMQP's 255 bytes, whatever the Send was given: the telemetry
// hook runs before the publisher checks them, and an OTLP exporter refuses
// a whole batch for invalid UTF-8 in one span.
func TestSendSpanNamesAreText(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tel, err := New(Options{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))})
	if err != nil {
		t.Fatal(err)
	}
	key := "orders.\xff" + strings.Repeat("k", 300)
	tel.Publish(context.Background(), "ex\xfe", key, &runtime.Publishing{})("confirmed", time.Now())
	ended := spans.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended, want 1", len(ended))
	}
	texts := []string{ended[0].Name()}
	for _, a := range ended[0].Attributes() {
		if a.Value.Type() == attribute.STRING {
			texts = append(texts, a.Value.AsString())
		}
	}
	for _, s := range texts {
		if !utf8.ValidString(s) || len(s) > 2*maxNameText+1 {
			t.Errorf("the span holds %.60q (%d bytes)", s, len(s))
		}
	}
}
