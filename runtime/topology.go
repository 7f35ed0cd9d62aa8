package runtime

import (
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/queue"
)

// DeclareTopology declares q's main queue, its retry buckets and its DLQ on
// ch, as the consumer does when it connects: all durable, of q's type, routed
// through the default exchange by queue name. A queue that exists with other
// arguments is refused by the broker (406), which DeclareTopology returns.
func DeclareTopology(ch *amqp.Channel, q QueueSpec) error {
	for _, d := range queue.Declarations(q.topology()) {
		if _, err := ch.QueueDeclare(d.Name, true, false, false, false, d.Args); err != nil {
			return fmt.Errorf("declare queue %s: %w", d.Name, err)
		}
	}
	return nil
}
