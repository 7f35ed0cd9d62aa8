package runtime

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/queue"
)

// DeclareTopology declares q's queues on conn, as the consumer does when it
// connects: its DLQ, retry buckets and main queue, all durable, of q's type,
// routed through the default exchange by queue name. A queue that exists with
// other arguments is refused by the broker (406), which DeclareTopology
// returns; but a DLQ that exists is left as it is (queue.Declaration's
// KeepExisting says why).
func DeclareTopology(conn *amqp.Connection, q QueueSpec) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open a channel to declare on: %w", err)
	}
	defer func() { _ = ch.Close() }()
	for _, d := range queue.Declarations(q.topology(brokerMajor(conn))) {
		if d.KeepExisting {
			_, err := ch.QueueDeclarePassive(d.Name, true, false, false, false, nil)
			var ae *amqp.Error
			if err == nil || !errors.As(err, &ae) || ae.Code != amqp.NotFound {
				if err != nil {
					return fmt.Errorf("declare queue %s: %w", d.Name, err)
				}
				continue
			}
			// The 404 closed the channel.
			if ch, err = conn.Channel(); err != nil {
				return fmt.Errorf("open a channel to declare on: %w", err)
			}
		}
		if _, err := ch.QueueDeclare(d.Name, true, false, false, false, d.Args); err != nil {
			return fmt.Errorf("declare queue %s: %w", d.Name, err)
		}
	}
	return nil
}

// brokerMajor reads the broker's major version from the properties it sent
// when the connection opened ("3.10.8" → 3). A broker that does not say is
// taken for one older than 4, which never reads -1 as "no delivery limit":
// declared there, it would dead-letter at the first return.
func brokerMajor(conn *amqp.Connection) int {
	v, _ := conn.Properties["version"].(string)
	major, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(major)
	if err != nil {
		return 3
	}
	return n
}
