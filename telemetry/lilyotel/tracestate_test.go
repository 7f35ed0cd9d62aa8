package lilyotel_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/telemetry/lilyotel"
)

// A producer's tracestate may be any the W3C allows, thousands of bytes
// in 32 members; the process span, its creation context's child, inherits
// it. What a Send from the journey writes is cut to the size a Lily
// consumer's guard counts apart from the producer's headers, as the W3C
// has it cut: members over 128 characters first, then from the end. Longer,
// it would be one of the application's own 64.
func TestPublishTrimsAProducersTracestate(t *testing.T) {
	members := []string{"lily=first", "big=" + strings.Repeat("b", 200)}
	for i := range 30 {
		members = append(members, fmt.Sprintf("v%02d=%s", i, strings.Repeat("v", 120)))
	}
	tel, err := lilyotel.New(lilyotel.Options{TracerProvider: sdktrace.NewTracerProvider()})
	if err != nil {
		t.Fatal(err)
	}
	// Within 512 bytes: the first member, then as many of the 125-byte
	// ones (a comma before each) as fit, in order; 510 bytes, which travel
	// whole.
	long := strings.Join(members, ",")
	fits := strings.Join(append([]string{members[0]}, members[2:6]...), ",")
	for sent, want := range map[string]string{long: fits, fits: fits} {
		d, _ := fromAForeignTrace(t, map[string]any{"tracestate": sent})
		ctx := tel.Received(context.Background(), "q", d)
		p := runtime.NewPublishing(envelope.Message{Type: "t"}, 1, "m-2", []byte(`{}`))
		tel.Publish(ctx, "", "elsewhere", &p)("confirmed", time.Now())
		if got, _ := p.Headers["tracestate"].(string); got != want {
			t.Errorf("from a tracestate of %d bytes, a Send carries one of %d bytes, %d members; want the %d bytes, %d members of %.24q…",
				len(sent), len(got), strings.Count(got, ",")+1, len(want), strings.Count(want, ",")+1, want)
		}
	}
}
