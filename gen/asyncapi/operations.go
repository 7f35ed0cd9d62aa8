package asyncapi

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/schema"
)

// The service receives from each queue it consumes: one receive operation
// per queue, with every version the queue accepts. It sends what Lily
// generates producers for: the messages in Lily's envelope (schema.File.Produced),
// each a persistent publishing stamped with a timestamp. Lily does not know
// where a producer publishes, so the send operation names no routing key:
// its queue channel is the address, which the default exchange reaches by
// the queue's name.

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
		if !f.Produced(c.Message) {
			continue
		}
		for _, v := range c.Versions {
			msgs = append(msgs, ids[variantKey{v, c.Envelope.Name}]...)
			producers = append(producers, "New"+v.GoName)
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return newObject().
		set("action", str("send")).
		set("channel", ref(channelPointer(ch))).
		set("summary", str(fmt.Sprintf("Messages that may be published to queue %s, such as through the default exchange with the queue's name as the routing key. Lily's generated producers (%s) build them, in its envelope; where they are published is the publisher's choice.", q.Name, strings.Join(producers, ", ")))).
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
