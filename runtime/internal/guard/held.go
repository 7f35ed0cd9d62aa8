package guard

import (
	"bytes"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"
)

// held is what user code has been given of a delivery's payload: whether a
// route's extractor has read it, and the copy that everyone else reads.
// Each Envelope the guard builds shares its allocation with its own.
type held struct {
	extracted atomic.Bool
	copy      atomic.Pointer[[]byte]
}

// envelopeHeld is an Envelope allocated together with its held state: one
// allocation for both on every delivery.
type envelopeHeld struct {
	env  Envelope
	held held
}

// newEnvelope is e, on the heap, with a held state of its own.
func newEnvelope(e Envelope) *Envelope {
	p := &envelopeHeld{env: e}
	p.env.held = &p.held
	return &p.env
}

// Again is e as a later attempt of its delivery runs it (a retry in line):
// the same reading, with attempt, and a held state of its own, so that the
// attempt's extractor reads the payload as received and its handler a copy
// of it, not the one an earlier attempt's handler changed.
func (e *Envelope) Again(attempt int) *Envelope {
	again := newEnvelope(*e)
	again.Attempt = attempt
	return again
}

// Extracting reports whether this call is the first to claim the payload
// for a route's extractor, which alone may read the delivery's own bytes
// (Payload): the generated route does so once, before its handler runs.
// Every later claim, an Envelope built by hand (a test's) included, is
// refused, and reads Held.
func (e *Envelope) Extracting() bool {
	return e.held != nil && e.held.extracted.CompareAndSwap(false, true)
}

// Held is the payload of a delivery whose body is body as user code holds
// it: a copy, made at the first call and kept for the later ones, so that
// whatever is written into it, through it or past its end, the delivery's
// own bytes, which its retry and DLQ copies carry, stay as received. An
// empty payload is handed out with no capacity instead, which costs
// nothing.
func (e *Envelope) Held(body []byte) []byte {
	p := e.Payload(body)
	if len(p) == 0 {
		return p[:0:0]
	}
	if e.held == nil {
		return append([]byte(nil), p...)
	}
	if c := e.held.copy.Load(); c != nil {
		return *c
	}
	c := append([]byte(nil), p...)
	if e.held.copy.CompareAndSwap(nil, &c) {
		return c
	}
	return *e.held.copy.Load()
}

// Detached is header value v as user code is given it: a table, an array or
// a byte slice copied, all the way down, so that what is written into it
// never reaches the delivery's own headers, which its retry and DLQ copies
// carry; any other value as it is. The guard has bounded the copy: depth,
// count and bytes.
func Detached(v any) any {
	switch v := v.(type) {
	case amqp.Table:
		t := make(amqp.Table, len(v))
		for k, x := range v {
			t[k] = Detached(x)
		}
		return t
	case []any:
		a := make([]any, len(v))
		for i, x := range v {
			a[i] = Detached(x)
		}
		return a
	case []byte:
		return bytes.Clone(v)
	}
	return v
}
