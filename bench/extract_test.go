package main

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/bytedance/sonic"
	"github.com/mailru/easyjson"
	segmentio "github.com/segmentio/encoding/json"

	"github.com/lily-mq/lily/bench/easyorder"
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

// decoders are the peers the generated extractor is measured against, by
// name: each decodes the body into a new struct of the same JSON fields and
// Go types, which it returns, as the extractor returns its payload for the
// handler (so that it lives on the heap for all), and checks no bound.
// encoding/json/v2 joins them in a build with GOEXPERIMENT=jsonv2
// (extract_jsonv2_test.go).
var decoders = map[string]func([]byte) (any, error){
	"encoding-json": func(body []byte) (any, error) {
		msg := new(ordersmsg.OrderPlacedV2)
		return msg, json.Unmarshal(body, msg)
	},
	// easyjson's decoder is generated from the struct (bench/easyorder).
	"easyjson": func(body []byte) (any, error) {
		msg := new(easyorder.Order)
		return msg, easyjson.Unmarshal(body, msg)
	},
	// sonic compiles a decoder for the struct at its first use (JIT).
	"sonic": func(body []byte) (any, error) {
		msg := new(ordersmsg.OrderPlacedV2)
		return msg, sonic.Unmarshal(body, msg)
	},
	"segmentio": func(body []byte) (any, error) {
		msg := new(ordersmsg.OrderPlacedV2)
		return msg, segmentio.Unmarshal(body, msg)
	},
}

// decoded keeps each benchmark's last result, as a handler would keep it.
var decoded any

// BenchmarkExtract compares the generated extractor (read the body with
// wire.JSONReader straight into the typed struct, checking every bound)
// with each of the decoders, on both payloads:
//
//	go test -run '^$' -bench Extract -count 10 . | benchstat -col /decoder -
func BenchmarkExtract(b *testing.B) {
	generated := func(body []byte) (any, error) { return ordersmsg.ExtractOrderPlacedV2(body) }
	for name, body := range payloads(b) {
		// The generated extractor first: benchstat compares the others with it.
		for _, decoder := range append([]string{"generated"}, slices.Sorted(maps.Keys(decoders))...) {
			decode, ok := decoders[decoder]
			if !ok {
				decode = generated
			}
			b.Run("payload="+name+"/decoder="+decoder, func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					msg, err := decode(body)
					if err != nil {
						b.Fatal(err)
					}
					decoded = msg
				}
			})
		}
	}
}

// TestDecoders: every peer reads the payloads to the same values as the
// generated extractor (but for the schema's default, which only the
// extractor fills in), or BenchmarkExtract would compare unlike work.
func TestDecoders(t *testing.T) {
	for name, body := range payloads(t) {
		want, err := ordersmsg.ExtractOrderPlacedV2(body)
		if err != nil {
			t.Fatal(err)
		}
		for decoder, decode := range decoders {
			msg, err := decode(body)
			if err != nil {
				t.Errorf("%s on %s: %v", decoder, name, err)
				continue
			}
			switch got := msg.(type) {
			case *easyorder.Order:
				if got.OrderID != want.OrderID || len(got.Items) != len(want.Items) || !got.PlacedAt.Equal(want.PlacedAt) || *got.Customer.Name != *want.Customer.Name {
					t.Errorf("%s on %s read %+v, want the order of %+v", decoder, name, *got, *want)
				}
			case *ordersmsg.OrderPlacedV2:
				if got.Channel == "" {
					got.Channel = ordersmsg.OrderPlacedV2ChannelWeb // the schema's default
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s on %s read %+v, want %+v", decoder, name, *got, *want)
				}
			default:
				t.Errorf("%s returned a %T", decoder, msg)
			}
		}
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
