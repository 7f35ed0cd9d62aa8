package review

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/schema"
	"github.com/lily-mq/lily/topology"
)

// Definitions is the part of a RabbitMQ definitions document that
// `rabbitmqctl import_definitions` and the management API read for queues,
// exchanges, bindings and policies. It holds what Lily owns: an external
// exchange, queue or binding is another team's, and importing the document
// must not create or change it.
type Definitions struct {
	Queues    []QueueDefinition    `json:"queues"`
	Exchanges []ExchangeDefinition `json:"exchanges"`
	Bindings  []BindingDefinition  `json:"bindings"`
	Policies  []PolicyDefinition   `json:"policies"`
}

// QueueDefinition is one queue of a definitions document.
type QueueDefinition struct {
	Name       string         `json:"name"`
	VHost      string         `json:"vhost"`
	Durable    bool           `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Arguments  map[string]any `json:"arguments"`
}

// ExchangeDefinition is one exchange of a definitions document.
type ExchangeDefinition struct {
	Name       string         `json:"name"`
	VHost      string         `json:"vhost"`
	Type       string         `json:"type"`
	Durable    bool           `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Internal   bool           `json:"internal"`
	Arguments  map[string]any `json:"arguments"`
}

// BindingDefinition is one binding of a definitions document.
type BindingDefinition struct {
	Source          string         `json:"source"`
	VHost           string         `json:"vhost"`
	Destination     string         `json:"destination"`
	DestinationType string         `json:"destination_type"`
	RoutingKey      string         `json:"routing_key"`
	Arguments       map[string]any `json:"arguments"`
}

// PolicyDefinition is one policy of a definitions document.
type PolicyDefinition struct {
	VHost      string         `json:"vhost"`
	Name       string         `json:"name"`
	Pattern    string         `json:"pattern"`
	ApplyTo    string         `json:"apply-to"`
	Definition map[string]any `json:"definition"`
	Priority   int            `json:"priority"`
}

// QueueTopology is what the runtime declares for q of f, as the generated
// QueueSpec says it, on a RabbitMQ of major version brokerMajor.
func QueueTopology(f *schema.File, q *schema.Queue, brokerMajor int) queue.Topology {
	return queue.Topology{Name: q.Name, Queue: f.QueueTopology(q), BrokerMajor: brokerMajor}
}

// Topology returns what the runtime declares for every queue of files
// (queue.Declarations, one source for both) on a RabbitMQ of major version
// brokerMajor, in virtual host vhost, each once in declaration order: the
// owned exchanges, each DLQ, retry bucket and main queue (an external queue
// is left out), the owned bindings, and the policies that carry Lily's
// arguments where its declarations do not, at policyPriority. Two schemas
// that declare one queue or exchange differently are an error, since
// RabbitMQ would refuse the second, but for a shared DLQ's type and "no
// delivery limit", which are the first declarer's (yieldDLQ).
func Topology(vhost string, brokerMajor, policyPriority int, files ...*schema.File) (Definitions, error) {
	w := definer{
		vhost: vhost, brokerMajor: brokerMajor, policyPriority: policyPriority, seen: map[string]int{},
		d: Definitions{Queues: []QueueDefinition{}, Exchanges: []ExchangeDefinition{}, Bindings: []BindingDefinition{}, Policies: []PolicyDefinition{}},
	}
	for _, f := range files {
		for _, q := range f.Queues {
			if err := w.queue(q.Name, QueueTopology(f, q, brokerMajor)); err != nil {
				return w.d, err
			}
		}
	}
	return w.d, nil
}

// definer gathers the definitions of queues, each entity once.
type definer struct {
	vhost                       string
	brokerMajor, policyPriority int
	d                           Definitions
	// seen holds the index of each entity written, by kind and name.
	seen map[string]int
}

// queue adds what t, the topology of queue name, declares and Lily owns.
func (w *definer) queue(name string, t queue.Topology) error {
	var errs []error
	for _, x := range t.Exchanges {
		if !x.External {
			errs = append(errs, w.exchange(x))
		}
	}
	yielded := map[string]bool{}
	for _, decl := range queue.Declarations(t) {
		if !decl.Passive {
			def := QueueDefinition{Name: decl.Name, VHost: w.vhost, Durable: true, Arguments: decl.Args}
			if decl.KeepTypeAndLimit {
				def.Arguments, yielded[decl.Name] = w.yieldDLQ(def)
			}
			errs = append(errs, once(&w.d.Queues, w.seen, "queue", decl.Name, def))
		}
	}
	for _, b := range t.Bindings {
		if b.External {
			continue
		}
		def := BindingDefinition{Source: b.Source, VHost: w.vhost, Destination: name, DestinationType: "queue", RoutingKey: b.RoutingKey, Arguments: b.Arguments}
		if b.Exchange != "" {
			def.Destination, def.DestinationType = b.Exchange, "exchange"
		}
		if def.Arguments == nil {
			def.Arguments = map[string]any{}
		}
		// A binding is named by all it is (fmt prints maps sorted), so one
		// named twice is the same binding.
		errs = append(errs, once(&w.d.Bindings, w.seen, "binding", fmt.Sprintf("%+v", def), def))
	}
	for _, p := range queue.Policies(t) {
		if yielded[p.Queue] {
			// The DLQ is as the first declared it, with that queue's policy
			// if it had one: this one carries what this declaration left out.
			continue
		}
		def := PolicyDefinition{VHost: w.vhost, Name: p.Name, Pattern: p.Pattern, ApplyTo: "queues", Definition: p.Definition, Priority: w.policyPriority}
		errs = append(errs, once(&w.d.Policies, w.seen, "policy", p.Name, def))
	}
	return errors.Join(errs...)
}

// exchange adds x, an exchange Lily owns.
func (w *definer) exchange(x topology.Exchange) error {
	def := ExchangeDefinition{Name: x.Name, VHost: w.vhost, Type: x.Type, Durable: x.Durable, Internal: x.Internal, Arguments: map[string]any{}}
	if x.AlternateExchange != "" {
		def.Arguments["alternate-exchange"] = x.AlternateExchange
	}
	return once(&w.d.Exchanges, w.seen, "exchange", x.Name, def)
}

// yieldDLQ returns the arguments of def, a DLQ's declaration, with its
// type and its way of writing "no delivery limit" yielded to those of the
// queue of its name written already, as the runtime's declare yields to
// the DLQ the broker has: a DLQ shared by two queues is as the first in the
// schemas' order declares it. yielded says whether they changed. Any other
// difference is left for once to refuse, as is a value the runtime would
// refuse (a delivery limit, a stream).
func (w *definer) yieldDLQ(def QueueDefinition) (args map[string]any, yielded bool) {
	i, ok := w.seen["queue "+def.Name]
	if !ok {
		return def.Arguments, false
	}
	kept := w.d.Queues[i].Arguments
	args = def.Arguments
	for _, key := range []string{"x-queue-type", "x-delivery-limit"} {
		next, refusal := queue.YieldDLQ(args, key, kept[key], w.brokerMajor)
		if refusal != "" {
			return def.Arguments, false
		}
		if next != nil {
			args, yielded = next, true
		}
	}
	return args, yielded
}

// once appends def, the what named name, to defs unless it is there
// already, when it must be the same: what two schemas declare twice must
// agree.
func once[T any](defs *[]T, seen map[string]int, what, name string, def T) error {
	key := what + " " + name
	if i, ok := seen[key]; ok {
		if !reflect.DeepEqual((*defs)[i], def) {
			return fmt.Errorf("%s %q is declared twice, differently (%+v and %+v)", what, name, (*defs)[i], def)
		}
		return nil
	}
	seen[key] = len(*defs)
	*defs = append(*defs, def)
	return nil
}
