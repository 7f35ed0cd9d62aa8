package guard

import (
	"reflect"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The payload's first claim for an extractor is granted once; user code
// gets a copy, the same one at every call, and a later attempt run in line
// (Again) has a claim and a copy of its own, made from the bytes as
// received, not from the copy an earlier attempt's handler wrote into.
func TestHeldPayloadIsACopyKeptPerAttempt(t *testing.T) {
	body := []byte(`{"order_id":"h-1"}`)
	e := newEnvelope(Envelope{Attempt: 1})
	if !e.Extracting() || e.Extracting() {
		t.Fatal("the extractor's claim is not granted exactly once")
	}
	held := e.Held(body)
	copy(held, "XX")
	if string(body) != `{"order_id":"h-1"}` {
		t.Fatalf("writing into the held copy changed the body: %q", body)
	}
	if again := e.Held(body); &again[0] != &held[0] {
		t.Error("a later call made another copy")
	}
	next := e.Again(2)
	if next.Attempt != 2 || !next.Extracting() {
		t.Fatalf("attempt %d, or no claim of its own", next.Attempt)
	}
	if got := string(next.Held(body)); got != `{"order_id":"h-1"}` {
		t.Errorf("the later attempt holds %q", got)
	}
	if empty := e.Held(nil); empty != nil {
		t.Errorf("an empty payload is held as %q", empty)
	}
}

// A header value user code is given is its own: writing into a table, an
// array or a byte slice in it, at any depth, leaves the delivery's headers as
// received.
func TestDetachedHeaderIsACopyAllTheWayDown(t *testing.T) {
	headers := amqp.Table{"t": amqp.Table{"b": []byte("bytes"), "l": []any{amqp.Table{"n": int32(1)}, []byte("in a list")}}}
	v := Detached(headers["t"]).(amqp.Table)
	v["added"] = "x"
	copy(v["b"].([]byte), "XX")
	l := v["l"].([]any)
	l[0].(amqp.Table)["n"] = int32(2)
	copy(l[1].([]byte), "YY")
	l[0] = "replaced"
	want := amqp.Table{"t": amqp.Table{"b": []byte("bytes"), "l": []any{amqp.Table{"n": int32(1)}, []byte("in a list")}}}
	if !reflect.DeepEqual(headers, want) {
		t.Errorf("the delivery's headers are %v after user code wrote into its copy, want %v", headers, want)
	}
	if got := Detached("s"); got != "s" {
		t.Errorf("a string is given as %v", got)
	}
}
