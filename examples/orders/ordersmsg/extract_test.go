package ordersmsg

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	_ "github.com/lily-mq/lily/internal/update"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/wire"
)

const goodV2 = `{
	"order_id": "order-1", "amount_cents": 1250, "note": null, "coupon": "new fields are ignored",
	"customer": {"email": "ada@example.com"},
	"items": [{"sku": "A-1", "qty": 2}, {"sku": "B-2", "qty": 1}],
	"placed_at": "2025-03-01T12:30:00Z"
}`

func TestExtractOrderPlacedV2(t *testing.T) {
	got, err := ExtractOrderPlacedV2([]byte(goodV2))
	if err != nil {
		t.Fatal(err)
	}
	want := &OrderPlacedV2{
		OrderID:     "order-1",
		AmountCents: 1250,
		Customer:    OrderPlacedV2Customer{Email: "ada@example.com"},
		Items:       []OrderPlacedV2ItemsItem{{SKU: "A-1", Qty: 2}, {SKU: "B-2", Qty: 1}},
		PlacedAt:    time.Date(2025, 3, 1, 12, 30, 0, 0, time.UTC),
		Channel:     OrderPlacedV2ChannelWeb, // the default
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// The extractor allocates only what it returns: the payload, its strings
// (the order id, the email, the name and its box, for an optional field is
// a pointer; the item's SKU) and the list's array. Its reader stays on the
// stack, which needs the element reader to use it rather than take it.
func TestExtractOrderPlacedV2Allocations(t *testing.T) {
	body := []byte(`{"order_id":"order-3","amount_cents":4200,"customer":{"email":"ada@example.com","name":"Ada"},"items":[{"sku":"LILY-1","qty":2}],"placed_at":"2026-12-02T10:00:00Z"}`)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := ExtractOrderPlacedV2(body); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 7 {
		t.Errorf("%v allocations, want 7", allocs)
	}
}

func TestExtractOrderPlacedV2Failures(t *testing.T) {
	for _, tc := range []struct {
		name, from, to string // replace from with to in goodV2
		want           wire.FieldError
	}{
		{"missing required", `"order_id": "order-1", `, "", wire.FieldError{Path: "order_id", Problem: "required"}},
		{"null required", `"order-1"`, "null", wire.FieldError{Path: "order_id", Problem: "required"}},
		{"empty string", `"order-1"`, `""`, wire.FieldError{Path: "order_id", Problem: "empty"}},
		{"too long in characters", `"order-1"`, `"` + strings.Repeat("é", 65) + `"`, wire.FieldError{Path: "order_id", Problem: "longer than 64 characters"}},
		{"below min", `1250`, `0`, wire.FieldError{Path: "amount_cents", Problem: "less than 1"}},
		{"nested object", `"email": "ada@example.com"`, `"name": "Ada"`, wire.FieldError{Path: "customer.email", Problem: "required"}},
		{"list element", `"sku": "B-2"`, `"sku": "` + strings.Repeat("x", 33) + `"`, wire.FieldError{Path: "items[1].sku", Problem: "longer than 32 characters"}},
		{"null list element", `{"sku": "A-1", "qty": 2}`, `null`, wire.FieldError{Path: "items[0]", Problem: "required"}},
		{"empty list", `[{"sku": "A-1", "qty": 2}, {"sku": "B-2", "qty": 1}]`, `[]`, wire.FieldError{Path: "items", Problem: "empty"}},
		{"bad time", `2025-03-01T12:30:00Z`, `yesterday`, wire.FieldError{Path: "placed_at", Problem: "not an RFC 3339 time"}},
		{"wrong JSON type", `1250`, `"1250"`, wire.FieldError{Path: "amount_cents", Problem: "unexpected JSON string"}},
		{"not an integer", `"qty": 1}`, `"qty": 1.5}`, wire.FieldError{Path: "items[1].qty", Problem: "not an integer (a fraction or exponent)"}},
		{"beyond int64", `"qty": 1}`, `"qty": 9223372036854775808}`, wire.FieldError{Path: "items[1].qty", Problem: "beyond int64"}},
		{"not JSON", `{`, `[`, wire.FieldError{Problem: "invalid JSON at byte 13: invalid character ':' after a value; want ',' or ']'"}},
		{"not JSON after a problem", `1250`, `0, ]`, wire.FieldError{Problem: "invalid JSON at byte 45: invalid character ']' where a member name should be"}},
		{"repeated name", `"note": null`, `"note": null, "note": "x"`, wire.FieldError{Path: "note", Problem: "repeated"}},
		{"repeated unknown name", `"note": null`, `"coupon": "x"`, wire.FieldError{Problem: `invalid JSON at byte 63: repeated member name "coupon"`}},
		{"name in another case", `"order_id"`, `"ORDER_ID"`, wire.FieldError{Path: "order_id", Problem: "required"}},
		{"invalid UTF-8", `"A-1"`, "\"A\xff\"", wire.FieldError{Problem: "invalid JSON at byte 162: invalid UTF-8 in a string"}},
		{"lone surrogate", `"A-1"`, `"\ud800"`, wire.FieldError{Problem: "invalid JSON at byte 161: a lone surrogate escape is not UTF-16"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := strings.Replace(goodV2, tc.from, tc.to, 1)
			_, err := ExtractOrderPlacedV2([]byte(body))
			var fe *wire.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("want a *wire.FieldError, got %v", err)
			}
			if *fe != tc.want {
				t.Errorf("got %+v, want %+v", *fe, tc.want)
			}
		})
	}
}

// A body nests at most 1,000 deep counted from its root, wherever the deep
// value is: the object, list and item a skipped member is in count, as the
// schema's checker counts them. The error does not depend on another
// problem read before the deep value.
func TestExtractOrderPlacedV2Nesting(t *testing.T) {
	for _, tc := range []struct {
		name, from, to string
		depth          int // of the array put after to
		tooDeep        bool
	}{
		{"in the body", `"coupon": `, `"coupon": `, 999, false},
		{"in the body", `"coupon": `, `"coupon": `, 1000, true},
		{"in an item", `"qty": 2`, `"qty": 2, "x": `, 997, false},
		{"in an item", `"qty": 2`, `"qty": 2, "x": `, 998, true},
	} {
		for _, orderID := range []string{`"order-1"`, `""`} {
			body := strings.Replace(goodV2, `"order-1"`, orderID, 1)
			if tc.from == `"coupon": ` {
				body = strings.Replace(body, `"new fields are ignored"`, "", 1)
			}
			deep := strings.Repeat("[", tc.depth) + strings.Repeat("]", tc.depth)
			body = strings.Replace(body, tc.from, tc.to+deep, 1)
			want := ""
			switch {
			case tc.tooDeep:
				at := strings.Index(body, tc.to) + len(tc.to) + tc.depth - 1
				want = "payload: invalid JSON at byte " + strconv.Itoa(at) + ": nested deeper than 1000"
			case orderID == `""`:
				want = "field order_id: empty"
			}
			got := ""
			if _, err := ExtractOrderPlacedV2([]byte(body)); err != nil {
				got = err.Error()
			}
			if got != want {
				t.Errorf("%s, %d deep, order id %s: %q, want %q", tc.name, tc.depth, orderID, got, want)
			}
		}
	}
}

// nopHandler satisfies OrdersHandler; routes cannot run without a broker's
// delivery, so only the table's shape is tested here.
type nopHandler struct{}

func (nopHandler) HandleOrderPlacedV1(context.Context, *OrderPlacedV1, runtime.RawDelivery) error {
	return nil
}

func (nopHandler) HandleOrderPlacedV2(context.Context, *OrderPlacedV2, runtime.RawDelivery) error {
	return nil
}

func TestOrdersRoutesAndSpec(t *testing.T) {
	routes := OrdersRoutes(nopHandler{})
	for _, v := range []int{1, 2} {
		if routes[runtime.RouteKey{Type: "OrderPlaced", Version: v, ContentType: "application/json"}] == nil {
			t.Errorf("no route for OrderPlaced version %d", v)
		}
	}
	if len(routes) != 2 {
		t.Errorf("%d routes, want 2", len(routes))
	}
	if _, err := runtime.NewConsumer(OrdersQueueSpec(), routes, runtime.Config{}); err != nil {
		t.Errorf("the runtime refuses the generated spec and routes: %v", err)
	}
}

// The producer checks what a consumer would, typed headers included, and
// its publishing carries them.
func TestNewOrderPlacedV2(t *testing.T) {
	msg, err := ExtractOrderPlacedV2([]byte(goodV2))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewOrderPlacedV2("m-1", msg); err == nil || err.Error() != "field headers.x-tenant: empty" {
		t.Errorf("without its tenant: %v", err)
	}
	msg.Headers.XTenant = "Acme Corp"
	if _, err := NewOrderPlacedV2("m-1", msg); err == nil || err.Error() != "field headers.x-tenant: does not match ^[a-z][a-z0-9-]*$" {
		t.Errorf("with a tenant breaking its pattern: %v", err)
	}
	msg.Headers.XTenant = "acme"
	p, err := NewOrderPlacedV2("m-1", msg)
	if err != nil {
		t.Fatal(err)
	}
	if p.Type != OrderPlacedType || p.MessageId != "m-1" || p.Headers["x-lily-version"] != int64(2) || p.Headers["x-tenant"] != "acme" {
		t.Errorf("publishing %+v", p)
	}
	msg.Items = nil
	if _, err := NewOrderPlacedV2("m-1", msg); err == nil || err.Error() != "field items: required" {
		t.Errorf("without items: %v", err)
	}
}

// encoding/json would send a string that is not UTF-8 with U+FFFD for each
// bad byte, and a consumer read other text than the producer holds, and
// keys its order by: the producer refuses it, naming the field.
func TestNewOrderPlacedNotUTF8(t *testing.T) {
	var sent recorder
	err := PublishOrderPlacedV1(context.Background(), &sent, "m-1", &OrderPlacedV1{OrderID: "ord-\xff", AmountCents: 1})
	if err == nil || err.Error() != "field order_id: not UTF-8" {
		t.Errorf("order id not UTF-8: %v", err)
	}
	if len(sent) != 0 {
		t.Errorf("sent %+v", sent)
	}
	note := "at the \xfe door"
	if _, err := NewOrderPlacedV1("m-1", &OrderPlacedV1{OrderID: "ord-1", AmountCents: 1, Note: &note}); err == nil || err.Error() != "field note: not UTF-8" {
		t.Errorf("note not UTF-8: %v", err)
	}

	msg, err := ExtractOrderPlacedV2([]byte(goodV2))
	if err != nil {
		t.Fatal(err)
	}
	msg.Headers.XTenant = "acme"
	msg.Items[1].SKU = "B-\xc3"
	if _, err := NewOrderPlacedV2("m-1", msg); err == nil || err.Error() != "field items[1].sku: not UTF-8" {
		t.Errorf("an item's sku not UTF-8: %v", err)
	}
	msg.Items[1].SKU = "B-\u00e9\ufffd" // valid: U+FFFD is a character like any other
	name := "Ad\xe9"
	msg.Customer.Name = &name
	if _, err := NewOrderPlacedV2("m-1", msg); err == nil || err.Error() != "field customer.name: not UTF-8" {
		t.Errorf("customer name not UTF-8: %v", err)
	}
	msg.Customer.Name = nil
	if _, err := NewOrderPlacedV2("m-1", msg); err != nil {
		t.Error(err)
	}
}

// encoding/json refuses a time RFC 3339 cannot write, with an error that
// names no field: the producer refuses it first, at the field.
func TestNewOrderPlacedV2TimeBeyondRFC3339(t *testing.T) {
	msg, err := ExtractOrderPlacedV2([]byte(goodV2))
	if err != nil {
		t.Fatal(err)
	}
	msg.Headers.XTenant = "acme"
	for _, tc := range []struct {
		at   time.Time
		want string
	}{
		{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), "field placed_at: year not in 0 to 9999"},
		{time.Date(-1, 12, 31, 0, 0, 0, 0, time.UTC), "field placed_at: year not in 0 to 9999"},
		{time.Date(2026, 12, 2, 10, 0, 0, 0, time.FixedZone("", 24*60*60)), "field placed_at: zone offset of 24 hours or more"},
		{time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), ""},
		{time.Date(9999, 12, 31, 23, 59, 59, 0, time.FixedZone("", -(23*60+59)*60)), ""},
	} {
		msg.PlacedAt = tc.at
		got := ""
		if _, err := NewOrderPlacedV2("m-1", msg); err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("%v: %q, want %q", tc.at, got, tc.want)
		}
	}
}

type recorder []runtime.Message

func (r *recorder) Send(_ context.Context, m runtime.Message) error {
	*r = append(*r, m)
	return nil
}

// RFC 3339 writes a zone offset in minutes: encoding/json would send a time
// in local mean time, +00:19:32, 32 s off its instant. The producer refuses
// it; an offset in whole minutes, or UTC, goes through unchanged.
func TestNewOrderPlacedV2OffsetSeconds(t *testing.T) {
	msg, err := ExtractOrderPlacedV2([]byte(goodV2))
	if err != nil {
		t.Fatal(err)
	}
	msg.Headers.XTenant = "acme"
	for _, offset := range []int{1172, -1172, 59} {
		msg.PlacedAt = time.Date(2026, 12, 2, 10, 0, 0, 0, time.FixedZone("LMT", offset))
		if _, err := NewOrderPlacedV2("m-1", msg); err == nil || err.Error() != "field placed_at: zone offset not in whole minutes" {
			t.Errorf("offset %ds: %v", offset, err)
		}
	}
	for _, zone := range []*time.Location{time.UTC, time.FixedZone("NPT", 5*60*60+45*60), time.FixedZone("", -3*60*60-30*60)} {
		msg.PlacedAt = time.Date(2026, 12, 2, 10, 0, 0, 123456789, zone)
		p, err := NewOrderPlacedV2("m-1", msg)
		if err != nil {
			t.Fatalf("%v: %v", zone, err)
		}
		back, err := ExtractOrderPlacedV2(p.Body)
		if err != nil {
			t.Fatal(err)
		}
		if !back.PlacedAt.Equal(msg.PlacedAt) {
			t.Errorf("sent %v, read %v", msg.PlacedAt, back.PlacedAt)
		}
	}
}
