package schema

import "github.com/lily-mq/lily/topology"

// QueueTopology is q's place on the broker, as the generated QueueSpec
// carries it to the runtime and `lilygen topology` writes it: one mapping for
// both, so that what is declared and what is imported cannot part.
func (f *File) QueueTopology(q *Queue) topology.Queue {
	t := q.Topology()
	for _, x := range f.Upstream(q) {
		ex := topology.Exchange{Name: x.Name, Type: x.Type, External: x.External}
		if !x.External {
			ex.Durable, ex.Internal, ex.AlternateExchange = x.Durable, x.Internal, x.AlternateExchange
		}
		t.Exchanges = append(t.Exchanges, ex)
		for _, b := range x.Bindings {
			t.Bindings = append(t.Bindings, topology.Binding{Source: b.Source, Exchange: x.Name, RoutingKey: b.RoutingKey, Arguments: b.Arguments(), External: b.External})
		}
	}
	for _, b := range q.Bindings {
		t.Bindings = append(t.Bindings, topology.Binding{Source: b.Source, RoutingKey: b.RoutingKey, Arguments: b.Arguments(), External: b.External})
	}
	return t
}

// Topology is the part of q's topology that its queues' declarations follow
// from, without the exchanges and bindings that route to it.
func (q *Queue) Topology() topology.Queue {
	t := topology.Queue{
		Type: string(q.Type), DeadLetterQueue: q.DLQ, RetryDelays: q.Retry.Delays, DeliveryLimit: q.DeliveryLimit,
		External: q.External, ByPolicy: q.ByPolicy,
	}
	if args := q.Arguments.Table(); len(args) > 0 {
		t.Arguments = args
	}
	return t
}
