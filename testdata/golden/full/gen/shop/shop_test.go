package shop

import (
	"testing"
	"time"
)

// A time whose zone offset has seconds, which RFC 3339 drops, is refused
// wherever it is: a nested list's element is named by both its indexes.
func TestNewOrderPlacedV2OffsetSeconds(t *testing.T) {
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	lmt := time.Date(1850, 1, 1, 0, 0, 0, 0, time.FixedZone("LMT", 6952))
	msg := &OrderPlacedV2{
		OrderID: "ord-1", AmountCents: 1, PlacedAt: at,
		Items:           []OrderPlacedV2ItemsItem{{SKU: "A-1", Qty: 1}},
		DeliveryWindows: [][]time.Time{{at, at}, {at, lmt}},
	}
	if _, err := NewOrderPlacedV2("m-1", msg); err == nil || err.Error() != "field delivery_windows[1][1]: zone offset not in whole minutes" {
		t.Errorf("got %v", err)
	}
	msg.DeliveryWindows[1][1] = lmt.UTC()
	if _, err := NewOrderPlacedV2("m-1", msg); err != nil {
		t.Error(err)
	}
}
