package asyncapi

import (
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/schema"
)

// Each queue and each exchange of the schema is a channel whose address is
// its name (see address), with its AMQP channel binding: is: queue for a queue, is:
// routingKey with the exchange for an exchange. What Lily knows and AMQP's
// binding cannot say (retry, DLQ, delivery limit, inbox, ordering,
// ownership, the bindings that route to it) is in x-lily-* extensions, in
// the schema's own keys and spellings.

// bindingVersion is the version of AsyncAPI's AMQP bindings the document
// uses.
const bindingVersion = "0.3.0"

// channelIDs gives channels their keys: queue.<name> and exchange.<name>,
// a queue and an exchange may share a name. A key holds letters, digits,
// '.', '-' and '_' alone, so that it needs no escaping in a $ref; any other
// character becomes '_', and a key already taken gets a number.
type channelIDs map[string]bool

func (ids channelIDs) add(kind, name string) string {
	base := kind + "." + strings.Map(func(r rune) rune {
		if r < 0x80 && (r == '.' || r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z') {
			return r
		}
		return '_'
	}, name)
	id := base
	for n := 2; ids[id]; n++ {
		id = base + "_" + strconv.Itoa(n)
	}
	ids[id] = true
	return id
}

// address is a channel's address for a queue or exchange of that name. In
// AsyncAPI 3.0 a { or } in an address opens or closes a parameter (a
// Channel Address Expression), so a name holding one cannot be written
// there: its address is null, unknown to the document, and its name is in
// the channel's AMQP binding, which every channel has.
func address(name string) *yaml.Node {
	if strings.ContainsAny(name, "{}") {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
	}
	return str(name)
}

func channelPointer(id string) string { return "#/channels/" + id }

func messagePointer(id string) string { return "#/components/messages/" + id }

// queueMessages are the ids of the messages q consumes, in its order.
func queueMessages(q *schema.Queue, ids map[variantKey][]string) []string {
	var out []string
	for _, c := range q.Consumes {
		for _, v := range c.Versions {
			out = append(out, ids[variantKey{v, c.Envelope.Name}]...)
		}
	}
	return out
}

func ownership(external bool) *yaml.Node {
	if external {
		return str(schema.External)
	}
	return str(schema.Owned)
}

// queueChannel is q's channel.
func queueChannel(q *schema.Queue, ids map[variantKey][]string) *yaml.Node {
	msgs := newObject()
	for _, id := range queueMessages(q, ids) {
		msgs.set(id, ref(messagePointer(id)))
	}
	amqp := newObject().set("name", str(q.Name))
	// Lily declares its queues durable, not exclusive, not auto-deleted;
	// another team's queue is as that team declared it.
	if !q.External {
		amqp.set("durable", boolean(true)).set("exclusive", boolean(false)).set("autoDelete", boolean(false))
	}
	argumentsFrom := schema.ArgumentsDeclared
	if q.ByPolicy {
		argumentsFrom = schema.ArgumentsByPolicy
	}
	o := newObject().
		set("address", address(q.Name)).
		set("title", str("queue "+q.Name)).
		set("messages", msgs.node()).
		set("bindings", amqpBinding(newObject().set("is", str("queue")).set("queue", amqp.mapping()))).
		set("x-lily-queue-type", str(string(q.Type))).
		set("x-lily-ownership", ownership(q.External)).
		set("x-lily-arguments-from", str(argumentsFrom))
	if args := q.Arguments.Table(); len(args) > 0 {
		o.set("x-lily-arguments", value(args))
	}
	o.set("x-lily-dlq", str(q.DLQ)).set("x-lily-retry", retry(q))
	if q.Type == schema.Quorum {
		o.set("x-lily-delivery-limit", integer(q.DeliveryLimit))
	}
	// By message version: a queue may take one message's versions under
	// two entries, each with its own policy.
	inbox := newObject()
	for _, c := range q.Consumes {
		for _, v := range c.Versions {
			for _, id := range ids[variantKey{v, c.Envelope.Name}] {
				inbox.set(id, str(string(c.Inbox)))
			}
		}
	}
	o.set("x-lily-inbox", inbox.node())
	if ord := q.Ordering; ord != nil {
		switch {
		case ord.Sequential:
			o.set("x-lily-ordering", str("sequential"))
		case ord.Header != "":
			o.set("x-lily-ordering", newObject().set("header", str(ord.Header)).mapping())
		default:
			o.set("x-lily-ordering", newObject().set("field", str(ord.Field)).mapping())
		}
	}
	return o.set("x-lily-bindings", bindings(q.Bindings)).mapping()
}

// retry is q's retry policy: attempts, delays, and the buckets that hold a
// retry for its delay.
func retry(q *schema.Queue) *yaml.Node {
	o := newObject().set("max_attempts", integer(q.Retry.MaxAttempts))
	if len(q.Retry.Delays) == 0 {
		return o.mapping()
	}
	delays, buckets := list(), list()
	for _, d := range q.Retry.Delays {
		delays.Content = append(delays.Content, str(d.String()))
		buckets.Content = append(buckets.Content, str(queue.RetryBucket(q.Name, d)))
	}
	return o.set("delays", delays).set("buckets", buckets).mapping()
}

// bindings are bindings into a queue or an exchange, in the schema's keys.
func bindings(bs []*schema.Binding) *yaml.Node {
	if len(bs) == 0 {
		return nil
	}
	out := list()
	for _, b := range bs {
		o := newObject().set("exchange", str(b.Source))
		if b.RoutingKey != "" {
			o.set("routing_key", str(b.RoutingKey))
		}
		if b.Match != "" {
			o.set("match", str(b.Match)).set("headers", value(b.Headers))
		}
		out.Content = append(out.Content, o.set("ownership", ownership(b.External)).mapping())
	}
	return out
}

// exchangeChannel is x's channel, with the messages the schema publishes to
// it (schema.Message.Publish). Lily knows which routing keys reach its
// queues, not what other producers publish to the exchange.
func exchangeChannel(f *schema.File, x *schema.Exchange, ids map[variantKey][]string) *yaml.Node {
	amqp := newObject().set("name", str(x.Name)).set("type", str(x.Type))
	// An external exchange is as its owner declared it.
	if !x.External {
		amqp.set("durable", boolean(x.Durable)).set("autoDelete", boolean(false))
	}
	msgs := newObject()
	var functions, operations []string
	for _, m := range f.Messages {
		if m.Publish == nil || m.Publish.Exchange != x.Name {
			continue
		}
		operations = append(operations, "publish"+m.Name)
		functions = append(functions, publishFunctions(m)...)
		for _, id := range publishedMessages(f, m, ids) {
			msgs.set(id, ref(messagePointer(id)))
		}
	}
	description := "An exchange of the schema; its queues' x-lily-bindings say which routing keys reach them. Lily does not know who publishes here or with which key, so no operation sends here."
	if len(operations) > 0 {
		says := "operation " + operations[0] + " says"
		if len(operations) > 1 {
			says = "operations " + strings.Join(operations, ", ") + " say"
		}
		description = fmt.Sprintf("An exchange of the schema; its queues' x-lily-bindings say which routing keys reach them. Lily's generated Publish functions (%s) send here, as %s; Lily does not know what other producers publish here.", strings.Join(functions, ", "), says)
	}
	o := newObject().
		set("address", address(x.Name)).
		set("title", str("exchange "+x.Name)).
		set("messages", msgs.node()).
		set("description", str(description)).
		set("bindings", amqpBinding(newObject().set("is", str("routingKey")).set("exchange", amqp.mapping()))).
		set("x-lily-ownership", ownership(x.External))
	if x.Internal {
		o.set("x-lily-internal", boolean(true))
	}
	if x.AlternateExchange != "" {
		o.set("x-lily-alternate-exchange", str(x.AlternateExchange))
	}
	return o.set("x-lily-bindings", bindings(x.Bindings)).mapping()
}

// amqpBinding is a bindings object holding the AMQP binding o.
func amqpBinding(o object) *yaml.Node {
	return newObject().set("amqp", o.set("bindingVersion", str(bindingVersion)).mapping()).mapping()
}
