package runtime_test

import (
	"strings"
	"testing"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/examples/orders/ordersmsg"
	"github.com/lily-mq/lily/runtime"
)

// A queue whose schema requires an inbox refuses to run without one, also
// when its consumer is built from the generated spec and routes directly.
func TestNewConsumerRefusesARequiredInboxLeftOut(t *testing.T) {
	spec := ordersmsg.OrdersQueueSpec()
	spec.Messages = []envelope.Message{{Type: ordersmsg.OrderPlacedType, Inbox: envelope.InboxRequired}}
	_, err := runtime.NewConsumer(spec, ordersmsg.OrdersRoutes(ordersmsg.UnimplementedOrdersHandler{}), runtime.Config{})
	if err == nil || !strings.Contains(err.Error(), "requires an inbox") {
		t.Fatalf("NewConsumer without the required inbox: %v", err)
	}
}
