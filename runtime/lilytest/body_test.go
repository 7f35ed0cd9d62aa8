package lilytest_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
	"github.com/lily-mq/lily/runtime/lilytest"
)

// scribble overwrites the start of d's body, and writes past its end into
// whatever the slice's capacity holds, as a careless handler might.
func scribble(d runtime.RawDelivery) {
	copy(d.Body(), "XXXXXXXX")
	b := d.Body()
	_ = append(b, "ZZZZZZZZ"...)
}

// A handler, and a Scope before it, that write into RawDelivery.Body change
// their own copy of it, not the delivery's bytes: the extractor decodes the
// message as sent, the retry copy carries the original body, and its next
// attempt is handled. Body was the delivery's own buffer, so the retry copy
// carried the scribbled bytes, whose next attempt failed in the extractor
// and went to the DLQ as permanent: the message was lost.
func TestHandlerCannotChangeTheBodyHandedOff(t *testing.T) {
	var seen []string
	scope := func(ctx context.Context, d runtime.RawDelivery) (context.Context, func(context.Context) error, error) {
		copy(d.Body(), "SSSS")
		return ctx, func(context.Context) error { return nil }, nil
	}
	h := harness(t, func(_ context.Context, msg *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		seen = append(seen, msg.OrderID)
		if d.Attempt() > 1 {
			return nil
		}
		scribble(d)
		if got := string(d.Body()[:8]); got != "XXXXXXXX" {
			t.Errorf("a later call of Body reads %q, want the handler's own copy as it left it", got)
		}
		return runtime.Retryable(errors.New("busy"))
	}, func(cfg *runtime.Config) { cfg.Scope = scope })
	p := order(t, "alias-1")
	res := h.Deliver(p)
	wantPath(t, res, runtime.PathRetried)
	if string(res.Copy.Body) != string(p.Body) {
		t.Fatalf("the retry copy carries %q, want the original %q", res.Copy.Body, p.Body)
	}
	wantPath(t, h.Deliver(*res.Copy), runtime.PathAcked)
	if len(seen) != 2 || seen[0] != "alias-1" || seen[1] != "alias-1" {
		t.Errorf("the handler saw orders %q, want alias-1 twice", seen)
	}
}

// scribbling handles the foreign fixture's payments by scribbling on their
// body and failing retryably.
type scribbling struct {
	fixture.UnimplementedLilytestForeignHandler
}

func (scribbling) HandlePaymentAuthorizedV1(_ context.Context, _ *fixture.PaymentAuthorizedV1, d runtime.RawDelivery) error {
	scribble(d)
	return runtime.Retryable(errors.New("busy"))
}

// The same for a structured CloudEvent, whose Body is its data member: a
// slice of the delivery's body, whose capacity ran on over the rest of the
// event.
func TestHandlerCannotChangeTheStructuredEventHandedOff(t *testing.T) {
	h, err := lilytest.New(fixture.LilytestForeignQueueSpec(), fixture.LilytestForeignRoutes(scribbling{}), runtime.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	event := `{"specversion":"1.0","id":"se-1","source":"s","type":"com.acme.payment.authorized.v1","data":{"payment_id":"se-1"},"subject":"after the data"}`
	res := h.Deliver(runtime.Publishing{ContentType: "application/cloudevents+json", Body: []byte(event)})
	wantPath(t, res, runtime.PathRetried)
	if string(res.Copy.Body) != event {
		t.Errorf("the retry copy carries %q, want the original event", res.Copy.Body)
	}
}

// A handler that writes into a header's table, array or byte slice changes
// its own copy, not the delivery's headers: the retry copy carries them as
// received. Header returned the delivery's own values, so the retry copy
// carried what the handler wrote.
func TestHandlerCannotChangeTheHeadersHandedOff(t *testing.T) {
	h := harness(t, func(_ context.Context, _ *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		v, _ := d.Header("x-nested")
		tab := v.(amqp.Table)
		tab["added"] = "by the handler"
		copy(tab["b"].([]byte), "XX")
		tab["l"].([]any)[0] = "replaced"
		return runtime.Retryable(errors.New("busy"))
	})
	p := order(t, "header-1")
	p.Headers["x-nested"] = amqp.Table{"b": []byte("bytes"), "l": []any{"first"}}
	res := h.Deliver(p)
	wantPath(t, res, runtime.PathRetried)
	want := amqp.Table{"b": []byte("bytes"), "l": []any{"first"}}
	if got := res.Copy.Headers["x-nested"]; !reflect.DeepEqual(got, want) {
		t.Errorf("the retry copy carries x-nested %v, want %v as received", got, want)
	}
}
