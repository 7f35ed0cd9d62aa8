package ordersmsg_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lily-mq/lily/examples/orders/ordersmsg"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/wire"
)

// A producer checks its message against the schema, as a consumer will, and
// returns it in Lily's canonical envelope, typed headers included.
func ExampleNewOrderPlacedV2() {
	msg := &ordersmsg.OrderPlacedV2{
		OrderID: "order-1", AmountCents: 1250,
		Customer: ordersmsg.OrderPlacedV2Customer{Email: "ada@example.com"},
		Items:    []ordersmsg.OrderPlacedV2ItemsItem{{SKU: "A-1", Qty: 2}},
		PlacedAt: time.Date(2026, 12, 3, 9, 30, 0, 0, time.UTC),
		Channel:  ordersmsg.OrderPlacedV2ChannelWeb,
		Headers:  ordersmsg.OrderPlacedV2Headers{XTenant: "acme"},
	}
	p, err := ordersmsg.NewOrderPlacedV2("order-1", msg)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Type, p.Headers["x-lily-version"], p.Headers["x-tenant"], p.ContentType)

	msg.Headers.XTenant = "Acme Corp"
	_, err = ordersmsg.NewOrderPlacedV2("order-2", msg)
	fmt.Println(err)
	// Output:
	// OrderPlaced 2 acme application/json
	// field headers.x-tenant: does not match ^[a-z][a-z0-9-]*$
}

// An extractor decodes a body straight into the version's struct, checking
// every bound of the schema; a failure names the field.
func ExampleExtractOrderPlacedV1() {
	msg, err := ordersmsg.ExtractOrderPlacedV1([]byte(`{"order_id": "order-1", "amount_cents": 1250}`))
	fmt.Println(msg.OrderID, msg.AmountCents, msg.Note == nil, err)

	_, err = ordersmsg.ExtractOrderPlacedV1([]byte(`{"order_id": "order-1", "amount_cents": 0}`))
	var fe *wire.FieldError
	fmt.Println(errors.As(err, &fe), fe.Path, fe.Problem)
	// Output:
	// order-1 1250 true <nil>
	// true amount_cents less than 1
}

// recorder is a runtime.Sender that keeps what it is sent, as a test's
// would.
type recorder []runtime.Message

func (r *recorder) Send(_ context.Context, m runtime.Message) error {
	*r = append(*r, m)
	return nil
}

// A Publish function sends what the producer builds where the schema
// publishes the message: here, through a recorder; in a service, through a
// *runtime.Publisher or an outbox. A message the producer refuses is not
// sent.
func ExamplePublishOrderPlacedV1() {
	var sent recorder
	err := ordersmsg.PublishOrderPlacedV1(context.Background(), &sent, "order-1", &ordersmsg.OrderPlacedV1{OrderID: "order-1", AmountCents: 1250})
	fmt.Println(err)
	err = ordersmsg.PublishOrderPlacedV1(context.Background(), &sent, "order-2", &ordersmsg.OrderPlacedV1{OrderID: "order-2"})
	fmt.Println(err)
	for _, m := range sent {
		fmt.Println(m.Exchange, m.RoutingKey, m.OrderKey, m.MessageId)
	}
	// Output:
	// <nil>
	// field amount_cents: less than 1
	// shop.events order.placed.v1 order-1 order-1
}
