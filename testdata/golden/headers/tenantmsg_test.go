package tenantmsg

import (
	"testing"
	"time"
)

// An AMQP timestamp holds whole seconds and no zone: the producer sends a
// time header as that, so that what it hands the publisher is what a
// consumer reads.
func TestNewAccountOpenedV1TimeHeader(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 987654321, time.FixedZone("", 3*60*60))
	msg := &AccountOpenedV1{AccountID: "acc-1", Headers: AccountOpenedV1Headers{
		XTenant: "acme", XRegion: AccountOpenedV1HeadersXRegionEu, XSentAt: &at,
	}}
	p, err := NewAccountOpenedV1("m-1", msg)
	if err != nil {
		t.Fatal(err)
	}
	want := time.Date(2026, 1, 2, 0, 4, 5, 0, time.UTC)
	if got, ok := p.Headers["x-sent-at"].(time.Time); !ok || got != want {
		t.Errorf("x-sent-at %#v, want %v", p.Headers["x-sent-at"], want)
	}
	if *msg.Headers.XSentAt != at {
		t.Errorf("msg's time changed to %v", *msg.Headers.XSentAt)
	}
}
