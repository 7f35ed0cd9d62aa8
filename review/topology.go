package review

import (
	"fmt"
	"reflect"

	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/schema"
)

// Definitions is the part of a RabbitMQ definitions document that
// `rabbitmqctl import_definitions` and the management API read for queues.
// Lily routes everything through the default exchange by queue name, so it
// declares no exchanges and no bindings.
type Definitions struct {
	Queues []QueueDefinition `json:"queues"`
}

// QueueDefinition is one queue of a definitions document.
type QueueDefinition struct {
	Name       string         `json:"name"`
	VHost      string         `json:"vhost"`
	Durable    bool           `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Arguments  map[string]any `json:"arguments"`
}

// Topology returns the queues runtime.DeclareTopology declares for every
// queue of files, with the same arguments, in virtual host vhost: each DLQ,
// retry bucket and main queue once, in declaration order. Two schemas that
// declare one queue with different arguments are an error, since RabbitMQ
// would refuse the second.
func Topology(vhost string, files ...*schema.File) (Definitions, error) {
	var d Definitions
	seen := map[string]int{}
	add := func(q *schema.Queue, name string, args map[string]any) error {
		// As in runtime.DeclareTopology: classic queues carry no
		// x-queue-type; quorum queues that dead-letter do it at least once,
		// which needs reject-publish overflow.
		if q.Type == schema.Quorum {
			args["x-queue-type"] = string(schema.Quorum)
			if _, dl := args["x-dead-letter-routing-key"]; dl {
				args["x-dead-letter-strategy"] = "at-least-once"
				args["x-overflow"] = "reject-publish"
			}
		}
		def := QueueDefinition{Name: name, VHost: vhost, Durable: true, Arguments: args}
		if i, ok := seen[name]; ok {
			if !reflect.DeepEqual(d.Queues[i], def) {
				return fmt.Errorf("queue %q is declared twice with different arguments (%v and %v)", name, d.Queues[i].Arguments, args)
			}
			return nil
		}
		seen[name] = len(d.Queues)
		d.Queues = append(d.Queues, def)
		return nil
	}
	for _, f := range files {
		for _, q := range f.Queues {
			if err := add(q, q.DLQ, map[string]any{}); err != nil {
				return d, err
			}
			for _, delay := range q.Retry.Delays {
				err := add(q, runtime.QueueSpec{Name: q.Name}.RetryBucket(delay), map[string]any{
					"x-message-ttl":             delay.Milliseconds(),
					"x-dead-letter-exchange":    "",
					"x-dead-letter-routing-key": q.Name,
				})
				if err != nil {
					return d, err
				}
			}
			err := add(q, q.Name, map[string]any{
				"x-dead-letter-exchange":    "",
				"x-dead-letter-routing-key": q.DLQ,
			})
			if err != nil {
				return d, err
			}
		}
	}
	return d, nil
}
