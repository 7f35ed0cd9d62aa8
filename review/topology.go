package review

import (
	"fmt"
	"reflect"

	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/schema"
)

// Definitions is the part of a RabbitMQ definitions document that
// `rabbitmqctl import_definitions` and the management API read for queues.
// Lily routes everything through the default exchange by queue name, so its
// exchanges and bindings are always empty; they are written all the same, so
// that the document says so rather than leaving a reader to wonder.
type Definitions struct {
	Queues    []QueueDefinition `json:"queues"`
	Exchanges []any             `json:"exchanges"`
	Bindings  []any             `json:"bindings"`
}

// QueueDefinition is one queue of a definitions document.
type QueueDefinition struct {
	Name       string         `json:"name"`
	VHost      string         `json:"vhost"`
	Durable    bool           `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Arguments  map[string]any `json:"arguments"`
}

// Topology returns the queues the runtime declares for every queue of files
// (queue.Declarations, one source for both) on a RabbitMQ of major version
// brokerMajor, in virtual host vhost: each DLQ, retry bucket and main queue
// once, in declaration order. Two schemas that declare one queue with
// different arguments are an error, since RabbitMQ would refuse the second.
func Topology(vhost string, brokerMajor int, files ...*schema.File) (Definitions, error) {
	d := Definitions{Exchanges: []any{}, Bindings: []any{}}
	seen := map[string]int{}
	for _, f := range files {
		for _, q := range f.Queues {
			t := queue.Topology{
				Name: q.Name, Type: string(q.Type), DeadLetterQueue: q.DLQ, RetryDelays: q.Retry.Delays,
				DeliveryLimit: q.DeliveryLimit, BrokerMajor: brokerMajor,
			}
			for _, decl := range queue.Declarations(t) {
				def := QueueDefinition{Name: decl.Name, VHost: vhost, Durable: true, Arguments: decl.Args}
				if i, ok := seen[decl.Name]; ok {
					if !reflect.DeepEqual(d.Queues[i], def) {
						return d, fmt.Errorf("queue %q is declared twice with different arguments (%v and %v)", decl.Name, d.Queues[i].Arguments, decl.Args)
					}
					continue
				}
				seen[decl.Name] = len(d.Queues)
				d.Queues = append(d.Queues, def)
			}
		}
	}
	return d, nil
}
