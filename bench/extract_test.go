package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/lily-mq/lily/examples/orders/ordersmsg"
)

// payloads are the bodies the extractor benchmarks decode: the 1 KiB body the
// broker benchmark publishes, and the schema's own small example.
func payloads(tb testing.TB) map[string][]byte {
	tpl, err := newTemplate()
	if err != nil {
		tb.Fatal(err)
	}
	p := tpl.stamp(42, time.Now())
	return map[string][]byte{
		"1KiB":    p.Body,
		"example": []byte(`{"order_id":"order-3","amount_cents":4200,"customer":{"email":"ada@example.com","name":"Ada"},"items":[{"sku":"LILY-1","qty":2}],"placed_at":"2026-12-02T10:00:00Z"}`),
	}
}

// BenchmarkExtract compares the generated extractor (read the body with
// wire.JSONReader straight into the typed struct, checking every bound)
// with encoding/json alone decoding the same body into the typed struct,
// which checks nothing.
func BenchmarkExtract(b *testing.B) {
	for name, body := range payloads(b) {
		b.Run("generated/"+name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ordersmsg.ExtractOrderPlacedV2(body); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("encoding-json/"+name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				var msg ordersmsg.OrderPlacedV2
				if err := json.Unmarshal(body, &msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestTemplate(t *testing.T) {
	tpl, err := newTemplate()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	p := tpl.stamp(1234567, now)
	if len(p.Body) != bodyBytes {
		t.Fatalf("body of %d bytes, want %d", len(p.Body), bodyBytes)
	}
	msg, err := ordersmsg.ExtractOrderPlacedV2(p.Body)
	if err != nil {
		t.Fatal(err)
	}
	if msg.OrderID != "order-0001234567" {
		t.Errorf("order id %q", msg.OrderID)
	}
	if at, ok := publishedAt(p.MessageId); !ok || !at.Equal(time.Unix(0, now.UnixNano())) {
		t.Errorf("message id %q gives %v, %v; want %v", p.MessageId, at, ok, now)
	}
}

func TestHistogram(t *testing.T) {
	var h histogram
	for us := int64(1); us <= 100_000; us++ {
		h.record(time.Duration(us) * time.Microsecond)
	}
	for _, c := range []struct{ q, want float64 }{{0.5, 50}, {0.99, 99}} {
		if got := h.quantile(c.q); got < c.want*0.98 || got > c.want*1.001 {
			t.Errorf("quantile %.2f = %.2f ms, want %.0f within 2%%", c.q, got, c.want)
		}
	}
	for b := 1; b < 64*40; b++ {
		if lowerBound(b) <= lowerBound(b-1) || bucketOf(lowerBound(b)) != b {
			t.Fatalf("bucket %d: lower bound %d, previous %d", b, lowerBound(b), lowerBound(b-1))
		}
	}
}
