package tenantmsg

import (
	"testing"
	"time"

	"github.com/lily-mq/lily/runtime/lilytest"
)

// An AMQP timestamp holds whole seconds and no zone: the producer sends a
// time header as that, so that what it hands the publisher is the instant a
// consumer reads, in the consumer's local zone (amqp091-go's time.Unix).
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
	d, err := lilytest.RawDelivery(AccountsQueueSpec(), AccountsRoutes(UnimplementedAccountsHandler{}), p)
	if err != nil {
		t.Fatal(err)
	}
	h, err := extractAccountOpenedV1Headers(d.Header)
	if err != nil {
		t.Fatal(err)
	}
	if got := *h.XSentAt; !got.Equal(want) || got.Location() != time.Local {
		t.Errorf("a consumer reads x-sent-at %v (%v), want %v in the local zone", got, got.Location(), want)
	}
}
