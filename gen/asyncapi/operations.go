package asyncapi

import (
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/schema"
)

// The service receives from each queue it consumes: one receive operation
// per queue, with every version the queue accepts. It sends what Lily
// generates producers for (schema.File.ProducedIn), each a persistent
// publishing stamped with a timestamp, in its envelope (a CloudEvent in
// binary content mode). Where a producer publishes is its own choice, so the
// send operation names no routing key: its queue channel is the address,
// which the default exchange reaches by the queue's name. A message whose schema says where it is published to an
// exchange also gets a send operation on the exchange's channel,
// publish<Message>, with its routing key; one published to the default
// exchange gets none: the queue's send operation already says it.

// receive is the operation of consuming q, on channel ch.
func receive(q *schema.Queue, ch string, ids map[variantKey][]string) *yaml.Node {
	consumer := newObject().
		set("prefetch", integer(q.Prefetch)).
		set("concurrency", integer(q.Concurrency)).
		set("max_body_bytes", integer(q.MaxBodyBytes)).
		set("handler_timeout", str(q.HandlerTimeout.String())).
		set("settlement_budget", str(queue.Budget(q.HandlerTimeout, q.SettlementBudget).String()))
	return newObject().
		set("action", str("receive")).
		set("channel", ref(channelPointer(ch))).
		set("summary", str(fmt.Sprintf("Consume queue %s: each delivery is dispatched by type, version and content type to %sHandler, then acknowledged, retried or dead-lettered.", q.Name, q.GoName))).
		set("messages", messageRefs(ch, queueMessages(q, ids))).
		// Lily acknowledges each delivery itself, once settled.
		set("bindings", amqpBinding(newObject().set("ack", boolean(true)))).
		set("x-lily-consumer", consumer.mapping()).
		mapping()
}

// send is the operation of publishing to q, on channel ch, the messages
// Lily generates producers for; nil when there are none.
func send(f *schema.File, q *schema.Queue, ch string, ids map[variantKey][]string) *yaml.Node {
	var msgs, producers []string
	for _, c := range q.Consumes {
		e, _, _ := f.ProducedIn(c.Message)
		if e == nil {
			continue
		}
		for _, v := range c.Versions {
			msgs = append(msgs, produced(ids, v, e))
			producers = append(producers, "New"+v.GoName)
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return newObject().
		set("action", str("send")).
		set("channel", ref(channelPointer(ch))).
		set("summary", str(fmt.Sprintf("Messages that may be published to queue %s, such as through the default exchange with the queue's name as the routing key. Lily's generated producers (%s) build them, each in its message's envelope; where they are published is the publisher's choice.", q.Name, strings.Join(producers, ", ")))).
		set("messages", messageRefs(ch, msgs)).
		set("bindings", amqpBinding(newObject().
			set("deliveryMode", integer(2)).
			set("timestamp", boolean(true)))).
		mapping()
}

// messageRefs refer to messages of channel ch, as an operation must.
func messageRefs(ch string, ids []string) *yaml.Node {
	out := list()
	for _, id := range ids {
		out.Content = append(out.Content, ref(channelPointer(ch)+"/messages/"+id))
	}
	return out
}

// publishFunctions names the generated functions that publish m, one per
// version.
func publishFunctions(m *schema.Message) []string {
	out := make([]string, len(m.Versions))
	for i, v := range m.Versions {
		out[i] = "Publish" + v.GoName
	}
	return out
}

// publish is the operation of publishing m to exchange x, on channel ch, as
// its generated Publish functions do.
func publish(f *schema.File, m *schema.Message, x *schema.Exchange, ch string, ids map[variantKey][]string) *yaml.Node {
	pub := m.Publish
	amqp := newObject()
	summary := fmt.Sprintf("Lily's generated Publish functions (%s) publish %s to exchange %s", strings.Join(publishFunctions(m), ", "), m.Name, x.Name)
	switch k := pub.RoutingKey; {
	case k.Field != "" || k.Header != "":
		summary += " with the value of its " + k.String() + " as the routing key"
	case k.Fixed != "":
		var keys []string
		for _, v := range m.Versions {
			if key := k.For(v); !slices.Contains(keys, key) {
				keys = append(keys, key)
			}
		}
		amqp.set("cc", strs(keys))
		summary += " with routing key " + strings.Join(keys, " or ")
	}
	if k := pub.OrderKey; k != nil {
		summary += "; an outbox keeps in order those with one value of its " + k.String()
	}
	return newObject().
		set("action", str("send")).
		set("channel", ref(channelPointer(ch))).
		set("summary", str(summary+".")).
		set("messages", messageRefs(ch, publishedMessages(f, m, ids))).
		set("bindings", amqpBinding(amqp.
			set("deliveryMode", integer(2)).
			set("timestamp", boolean(true)))).
		set("x-lily-routing-key", keySource(pub.RoutingKey)).
		set("x-lily-order-key", orderKey(pub.OrderKey)).
		mapping()
}

// publishedMessages are the ids of m's messages its Publish functions write.
func publishedMessages(f *schema.File, m *schema.Message, ids map[variantKey][]string) []string {
	e, _, _ := f.ProducedIn(m)
	out := make([]string, len(m.Versions))
	for i, v := range m.Versions {
		out[i] = produced(ids, v, e)
	}
	return out
}

// produced is the id of version v's message as its producer writes it in
// envelope e: a CloudEvent's first, in binary content mode.
func produced(ids map[variantKey][]string, v *schema.Version, e *schema.Envelope) string {
	return ids[variantKey{v, e.Name}][0]
}

// keySource is a routing or order key in the schema's spelling: the fixed
// key as written ({version} and all), {field: name} or {header: name}; nil
// for the empty fixed key.
func keySource(k schema.Key) *yaml.Node {
	switch {
	case k.Field != "":
		return newObject().set("field", str(k.Field)).mapping()
	case k.Header != "":
		return newObject().set("header", str(k.Header)).mapping()
	case k.Fixed != "":
		return str(k.Fixed)
	}
	return nil
}

func orderKey(k *schema.Key) *yaml.Node {
	if k == nil {
		return nil
	}
	return keySource(*k)
}
