package review

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lily-mq/lily/schema"
	"github.com/lily-mq/lily/schema/rules"
)

func read(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestRulesDocumented keeps the rule tables of docs/lilygen.md, the breaking
// rules (rule, category, change) and the lint rules (rule, finding), the same
// as rules.All.
func TestRulesDocumented(t *testing.T) {
	row := regexp.MustCompile("(?m)^\\| `([A-Z]+(?:-[A-Z]+)+)` \\| (?:([A-Z]+) \\| )?(.+) \\|$")
	var documented []rules.Rule
	for _, m := range row.FindAllStringSubmatch(read(t, filepath.Join("..", "docs", "lilygen.md")), -1) {
		c := rules.Category(m[2])
		if c == "" {
			c = rules.Lint
		}
		documented = append(documented, rules.Rule{ID: m[1], Category: c, Meaning: m[3]})
	}
	byID := func(a, b rules.Rule) int { return strings.Compare(a.ID, b.ID) }
	if diff := cmp.Diff(slices.SortedFunc(slices.Values(rules.All), byID), slices.SortedFunc(slices.Values(documented), byID)); diff != "" {
		t.Errorf("rules (-rules.All +docs/lilygen.md):\n%s", diff)
	}
}

// ruleCase produces a finding of its rule from the smallest change to base
// that shows it: the edits old and new, pairs of text in base and its
// replacement, give the two revisions (a lint rule reads only the new).
type ruleCase struct {
	rule     rules.Rule
	old, new []string
	// model changes the old revision in what no schema can say yet.
	model func(old *schema.File)
	// other, when set, are the edits of another schema of the run,
	// other.lily.yaml, the same in both revisions.
	other            []string
	subject, message string
}

// alternate is a fanout exchange whose alternate exchange feeds a queue.
const alternate = `exchanges:
  unrouted: {type: fanout, ownership: owned}
  fan: {type: fanout, ownership: owned, alternate_exchange: unrouted}
queues:
  orders.unrouted:
    consumes: [{message: OrderPlaced, versions: [1]}]
    bindings: [{exchange: unrouted}]
`

// ruleCases hold a case for every rule, in the order of rules.All.
var ruleCases = []ruleCase{
	{rule: rules.PackageChanged,
		new:     []string{"package: shopmsg", "package: shop"},
		subject: "shop", message: "the generated package is renamed from shopmsg to shop"},
	{rule: rules.OutputChanged,
		new:     []string{"package: shopmsg\n", "package: shopmsg\noutput: gen\n"},
		subject: "gen", message: "the generated file moves from . to gen, which changes its import path"},
	{rule: rules.MessageRemoved,
		old:     []string{"queues:\n", "  Refunded:\n    versions:\n      1: {}\nqueues:\n"},
		subject: "Refunded", message: "message Refunded is removed with its generated types and extractors"},
	{rule: rules.VersionRemoved,
		new:     []string{"      2:\n        fields:\n          order_id: {type: string, required: true, max_length: 64}\n", "", "[1, 2]", "[1]"},
		subject: "OrderPlaced.v2", message: "OrderPlaced version 2 (never deprecated) is removed with OrderPlacedV2 and ExtractOrderPlacedV2"},
	{rule: rules.FieldRemoved,
		new:     []string{"          note: {type: string, max_length: 200}\n", ""},
		subject: "OrderPlaced.v1.note", message: "OrderPlaced.v1.note is removed with its Go field Note"},
	{rule: rules.FieldGoTypeChanged,
		new:     []string{"amount: {type: integer,", "amount: {type: int16,"},
		subject: "OrderPlaced.v1.amount", message: "Go field Amount changes type from int64 to int16"},
	{rule: rules.EnumConstantRemoved,
		new:     []string{"values: [web, app]", "values: [web]"},
		subject: "OrderPlaced.v1.channel", message: "the generated constants OrderPlacedV1ChannelApp of OrderPlacedV1Channel are removed with their values"},
	{rule: rules.HandlerMethodAdded,
		old:     []string{"[1, 2]", "[1]"},
		subject: "orders/OrderPlaced.v2", message: "OrdersHandler gains HandleOrderPlacedV2: types implementing it stop compiling unless they embed UnimplementedOrdersHandler"},
	{rule: rules.InboxRequirementChanged,
		new:     []string{"    max_body_bytes", "    inbox: required\n    max_body_bytes"},
		subject: "orders", message: `queue "orders" now requires the inbox: NewOrdersConsumer gains an inbox parameter`},
	{rule: rules.ProducerRemoved,
		new: []string{"messages:\n", "envelopes:\n  events: {kind: cloudevents, version: {type_suffix: .v}}\nmessages:\n",
			"  OrderPlaced:\n", "  OrderPlaced:\n    envelope: events\n"},
		subject: "OrderPlaced",
		message: "the producers NewOrderPlacedV… of message OrderPlaced are no longer generated: its envelope events names no source, which every CloudEvent carries"},
	{rule: rules.PublishRemoved,
		old:     []string{"queues:", "exchanges:\n  shop: {type: topic}\nqueues:", "  OrderPlaced:\n", "  OrderPlaced:\n    publish: {exchange: shop, routing_key: order.placed}\n"},
		new:     []string{"queues:", "exchanges:\n  shop: {type: topic}\nqueues:"},
		subject: "OrderPlaced", message: "message OrderPlaced no longer says where it is published: PublishOrderPlacedV… are no longer generated"},
	{rule: rules.MessageGoRenamed,
		old:     []string{"  OrderPlaced:\n", "  OrderPlaced:\n    type: order.placed\n"},
		new:     []string{"  OrderPlaced:\n", "  OrderCreated:\n    type: order.placed\n", "message: OrderPlaced", "message: OrderCreated"},
		subject: "OrderPlaced", message: `message OrderPlaced is renamed OrderCreated in Go; it still travels as "order.placed", but its generated names change`},
	{rule: rules.MessageRenamed,
		new:     []string{"  OrderPlaced:", "  OrderCreated:", "message: OrderPlaced", "message: OrderCreated"},
		subject: "OrderPlaced", message: `message OrderPlaced is renamed OrderCreated: the type producers set changes from "OrderPlaced" to "OrderCreated", and so do its generated names`},
	{rule: rules.WireTypeChanged,
		new:     []string{"  OrderPlaced:\n", "  OrderPlaced:\n    type: order.placed\n"},
		subject: "OrderPlaced", message: `message OrderPlaced travels as "order.placed" instead of "OrderPlaced": its queues no longer dispatch what producers send today`},
	{rule: rules.EnvelopeChanged,
		new: []string{"messages:\n", "envelopes:\n  events: {kind: cloudevents, version: {attribute: dataversion}}\nmessages:\n",
			"  OrderPlaced:\n", "  OrderPlaced:\n    envelope: events\n"},
		subject: "orders/OrderPlaced",
		message: `queue "orders" reads OrderPlaced by envelope events (cloudevents, version from attribute dataversion) instead of lily (lily): what producers send today and what the queue holds is read where it is not`},
	{rule: rules.FieldWireRenamed,
		new:     []string{"          note: {type: string, max_length: 200}", "          Note: {type: string, max_length: 200}"},
		subject: "OrderPlaced.v1.note", message: "OrderPlaced.v1.note travels as Note now, its Go field Note kept: messages already queued, and producers on the old schema, send note, which the new extractor ignores, and consumers on the old schema ignore Note"},
	{rule: rules.FieldTypeChanged,
		new:     []string{"amount: {type: integer, required: true, min: 1, max: 1000}", "amount: {type: string, required: true}"},
		subject: "OrderPlaced.v1.amount", message: "OrderPlaced.v1.amount changes type from integer to string"},
	// Lily reads only application/json for now, so an old revision
	// accepting another content type is one a later schema may state.
	{rule: rules.ContentTypeRemoved,
		model: func(old *schema.File) {
			v := old.Messages[0].Versions[0]
			v.ContentTypes = append(v.ContentTypes, "application/x-protobuf")
		},
		subject: "OrderPlaced.v1", message: "OrderPlaced version 1 is no longer accepted as application/x-protobuf"},
	{rule: rules.FieldRequiredAdded,
		new:     []string{"          note:", "          currency: {type: string, required: true, max_length: 3}\n          note:"},
		subject: "OrderPlaced.v1.currency",
		message: "new required OrderPlaced.v1.currency: messages already queued, and producers on the old schema, lack it"},
	{rule: rules.FieldMadeRequired,
		new:     []string{"note: {type: string, max_length: 200}", "note: {type: string, required: true, max_length: 200}"},
		subject: "OrderPlaced.v1.note",
		message: "OrderPlaced.v1.note becomes required: messages already queued, and producers on the old schema, may lack it"},
	{rule: rules.FieldNullRefused,
		old:     []string{"order_id: {type: string, required: true, max_length: 64}\n          amount", "order_id: {type: string, required: true, nullable: true, max_length: 64}\n          amount"},
		subject: "OrderPlaced.v1.order_id",
		message: "OrderPlaced.v1.order_id no longer accepts null: messages already queued, and producers on the old schema, may send it"},
	{rule: rules.DefaultChanged,
		new:     []string{"default: web", "default: app"},
		subject: "OrderPlaced.v1.channel",
		message: "OrderPlaced.v1.channel changes its default from \"web\" to \"app\": messages already queued without it read differently"},
	{rule: rules.DefaultChanged,
		new:     []string{", default: web", ""},
		subject: "OrderPlaced.v1.channel",
		message: "OrderPlaced.v1.channel changes its default from \"web\" to none: messages already queued without it read differently"},
	{rule: rules.BoundNarrowed,
		new:     []string{"min: 1, max: 1000", "min: 2, max: 1000"},
		subject: "OrderPlaced.v1.amount",
		message: "OrderPlaced.v1.amount narrows its bounds from 1..1000 to 2..1000: messages already queued, and producers on the old schema, may break it"},
	{rule: rules.ExampleRejected,
		old:     []string{"max_length: 64}\nqueues:", "max_length: 64}\n        examples:\n          - body: {order_id: abcdefgh}\nqueues:"},
		new:     []string{"max_length: 64}\nqueues:", "max_length: 5}\nqueues:"},
		subject: "OrderPlaced.v2.examples.1",
		message: "example 1 of the old OrderPlaced.v2 (line 24 there) fails the new schema: field order_id: longer than 5 characters"},
	{rule: rules.VersionUnconsumed,
		new:     []string{"[1, 2]", "[2]"},
		subject: "orders/OrderPlaced.v1",
		message: `queue "orders" no longer accepts OrderPlaced version 1: those in it and its retry buckets fail at dispatch and go to the DLQ`},
	{rule: rules.QueueRemoved,
		new:     []string{"queues:\n  orders:", "queues:\n  orders2:"},
		subject: "orders", message: `queue "orders" is no longer consumed: what it, its retry buckets and its DLQ "orders.dlq" hold stays there`},
	{rule: rules.BodyLimitNarrowed,
		new:     []string{"max_body_bytes: 65536", "max_body_bytes: 1024"},
		subject: "orders", message: `queue "orders" lowers max_body_bytes from 65536 to 1024: queued messages between the two go to the DLQ unread`},
	{rule: rules.QueueShared,
		new:     []string{"queues:\n", "queues:\n  audit:\n    consumes: [{message: OrderPlaced, versions: [1]}]\n"},
		other:   []string{"queues:\n", "queues:\n  audit:\n    consumes: [{message: OrderPlaced, versions: [2]}]\n"},
		subject: "audit", message: `queue "audit" is new here, and other.lily.yaml consumes it too, differently (OrderPlaced version 1 only here, OrderPlaced version 2 only there): each consumer takes deliveries meant for the other's, fails them at dispatch and sends them to the DLQ`},
	{rule: rules.FieldMadeOptional,
		new:     []string{"amount: {type: integer, required: true,", "amount: {type: integer,"},
		subject: "OrderPlaced.v1.amount",
		message: "OrderPlaced.v1.amount becomes optional: consumers on the old schema reject messages without it"},
	{rule: rules.FieldRequiredRemoved,
		new:     []string{"          amount: {type: integer, required: true, min: 1, max: 1000}\n", ""},
		subject: "OrderPlaced.v1.amount",
		message: "required OrderPlaced.v1.amount is removed: consumers on the old schema reject messages without it"},
	{rule: rules.FieldNullAllowed,
		new:     []string{"order_id: {type: string, required: true, max_length: 64}\n          amount", "order_id: {type: string, required: true, nullable: true, max_length: 64}\n          amount"},
		subject: "OrderPlaced.v1.order_id", message: "OrderPlaced.v1.order_id accepts null: consumers on the old schema reject it"},
	{rule: rules.BoundWidened,
		new:     []string{"max: 1000", "max: 5000"},
		subject: "OrderPlaced.v1.amount",
		message: "OrderPlaced.v1.amount widens its bounds from 1..1000 to 1..5000: consumers on the old schema reject the values it newly allows"},
	{rule: rules.ExampleRejectedByOld,
		old:     []string{"max_length: 64}\nqueues:", "max_length: 5}\nqueues:"},
		new:     []string{"max_length: 64}\nqueues:", "max_length: 64}\n        examples:\n          - body: {order_id: abcdefgh}\nqueues:"},
		subject: "OrderPlaced.v2.examples.1",
		message: "example 1 of OrderPlaced.v2 fails the old schema: field order_id: longer than 5 characters"},
	{rule: rules.VersionAdded,
		old:     []string{"[1, 2]", "[1]"},
		subject: "orders/OrderPlaced.v2", message: `queue "orders" accepts OrderPlaced version 2, which consumers on the old schema fail at dispatch and send to the DLQ: a producer deployed before them loses what it sends`},
	{rule: rules.QueueTypeChanged,
		new:     []string{"    consumes:\n      - message", "    type: quorum\n    consumes:\n      - message"},
		subject: "orders",
		message: `queue "orders" changes type from classic to quorum: RabbitMQ cannot change the type of it, its retry buckets or its DLQ "orders.dlq"`},
	{rule: rules.DeliveryLimitChanged,
		old:     []string{"    consumes:\n      - message", "    type: quorum\n    consumes:\n      - message"},
		new:     []string{"    consumes:\n      - message", "    type: quorum\n    delivery_limit: -1\n    consumes:\n      - message"},
		subject: "orders", message: `queue "orders" changes its delivery limit from 20 to none: its x-delivery-limit changes`},
	{rule: rules.DLQChanged,
		new:     []string{"    max_body_bytes", "    dlq: orders.dead\n    max_body_bytes"},
		subject: "orders", message: `queue "orders" dead-letters to "orders.dead" instead of "orders.dlq": its x-dead-letter-routing-key changes`},
	{rule: rules.SingleActiveChanged,
		new:     []string{"    max_body_bytes", "    arguments: {single_active_consumer: true}\n    max_body_bytes"},
		subject: "orders", message: `queue "orders" changes single_active_consumer from unset to true: RabbitMQ refuses the redeclare (406)`},
	{rule: rules.MaxPriorityChanged,
		old:     []string{"    max_body_bytes", "    arguments: {max_priority: 5}\n    max_body_bytes"},
		new:     []string{"    max_body_bytes", "    arguments: {max_priority: 10}\n    max_body_bytes"},
		subject: "orders", message: `queue "orders" changes max_priority from 5 to 10: RabbitMQ refuses the redeclare (406)`},
	{rule: rules.MaxLengthChanged,
		new:     []string{"    max_body_bytes", "    arguments: {max_length_bytes: 1000000}\n    max_body_bytes"},
		subject: "orders", message: `queue "orders" changes max_length_bytes from unset to 1000000: RabbitMQ refuses the redeclare (406)`},
	{rule: rules.OverflowChanged,
		old:     []string{"    max_body_bytes", "    arguments: {max_length: 100}\n    max_body_bytes"},
		new:     []string{"    max_body_bytes", "    arguments: {max_length: 100, overflow: reject-publish-dlx}\n    max_body_bytes"},
		subject: "orders", message: `queue "orders" changes overflow from unset to reject-publish-dlx: RabbitMQ refuses the redeclare (406)`},
	{rule: rules.MessageTTLChanged,
		old:     []string{"    max_body_bytes", "    arguments: {message_ttl: 24h}\n    max_body_bytes"},
		new:     []string{"    max_body_bytes", "    arguments: {message_ttl: 48h}\n    max_body_bytes"},
		subject: "orders", message: `queue "orders" changes message_ttl from 24h0m0s to 48h0m0s: RabbitMQ refuses the redeclare (406)`},
	{rule: rules.InitialGroupSizeChanged,
		old:     []string{"    max_body_bytes", "    type: quorum\n    max_body_bytes"},
		new:     []string{"    max_body_bytes", "    type: quorum\n    arguments: {initial_group_size: 3}\n    max_body_bytes"},
		subject: "orders", message: `queue "orders" changes initial_group_size from unset to 3: RabbitMQ refuses the redeclare (406)`},
	{rule: rules.LilyArgumentsMoved,
		new:     []string{"    max_body_bytes", "    lily_arguments: policy\n    max_body_bytes"},
		subject: "orders", message: `queue "orders" moves Lily's arguments from its declarations to policies: its declarations gain or lose them, which RabbitMQ refuses for the queue and its retry buckets (406)`},
	{rule: rules.RetryBucketAdded,
		old:     []string{"    max_body_bytes", "    lily_arguments: policy\n    max_body_bytes"},
		new:     []string{"    max_body_bytes", "    lily_arguments: policy\n    max_body_bytes", "[1s, 5s]", "[1s, 10s]"},
		subject: "orders", message: `queue "orders" retries through orders.retry.10s, which it did not: declared with its type alone, each takes its TTL and its dead-lettering back to the queue from its policy, and until that is applied keeps what it gets`},
	{rule: rules.OwnershipChanged,
		new:     []string{"    max_body_bytes", "    ownership: external\n    max_body_bytes"},
		subject: "orders", message: `queue "orders" becomes external: Lily stops declaring it and only checks that it exists, and RabbitMQ refuses a declaration that differs from the queue's (406)`},
	{rule: rules.ExchangeTypeChanged,
		old:     []string{"queues:", "exchanges:\n  shop: {type: topic}\nqueues:"},
		new:     []string{"queues:", "exchanges:\n  shop: {type: direct}\nqueues:"},
		subject: "shop", message: `exchange "shop" changes type from topic to direct: RabbitMQ refuses the redeclare (406), and its bindings match differently`},
	{rule: rules.ExchangeChanged,
		old:     []string{"queues:", "exchanges:\n  shop: {type: topic, ownership: owned}\nqueues:"},
		new:     []string{"queues:", "exchanges:\n  shop: {type: topic, ownership: owned, internal: true}\nqueues:"},
		subject: "shop", message: `exchange "shop" changes durable, internal or alternate_exchange: RabbitMQ refuses the redeclare (406)`},
	{rule: rules.DeclaredDifferently,
		new:     []string{"queues:", "exchanges:\n  shop: {type: topic, ownership: owned}\nqueues:"},
		other:   []string{"queues:", "exchanges:\n  shop: {type: direct, ownership: owned}\nqueues:"},
		subject: "exchange:shop", message: `exchange "shop" is new here, and other.lily.yaml declares it too, differently (exchange "shop" is declared twice, differently ({Name:shop VHost:/ Type:direct Durable:true AutoDelete:false Internal:false Arguments:map[]} and {Name:shop VHost:/ Type:topic Durable:true AutoDelete:false Internal:false Arguments:map[]})): RabbitMQ refuses whichever declaration comes second (406)`},
	{rule: rules.BindingRemoved,
		old:     []string{"queues:", "exchanges:\n  shop: {type: topic}\nqueues:", "    max_body_bytes", "    bindings: [{exchange: shop, routing_key: order.#}]\n    max_body_bytes"},
		new:     []string{"queues:", "exchanges:\n  shop: {type: topic}\nqueues:"},
		subject: "orders<-shop/order.#", message: `queue "orders" is no longer bound to exchange "shop": what it routed there stops arriving (bindings declared before stay on the broker until deleted)`},
	{rule: rules.RoutingKeyNarrowed,
		old:     []string{"queues:", "exchanges:\n  shop: {type: topic}\nqueues:", "    max_body_bytes", "    bindings: [{exchange: shop, routing_key: order.#}]\n    max_body_bytes"},
		new:     []string{"queues:", "exchanges:\n  shop: {type: topic}\nqueues:", "    max_body_bytes", "    bindings: [{exchange: shop, routing_key: order.*.eu}]\n    max_body_bytes"},
		subject: "orders<-shop/order.#", message: `the binding of queue "orders" to exchange "shop" no longer accepts routing key "order.#": those messages stop arriving (the old binding stays on the broker until deleted)`},
	{rule: rules.AlternateDiverted,
		old:     []string{"queues:\n", alternate},
		new:     []string{"queues:\n", alternate, "    max_body_bytes", "    bindings: [{exchange: fan}]\n    max_body_bytes"},
		subject: "orders<-fan",
		message: `the binding of queue "orders" to exchange "fan" takes messages that exchange routed nowhere before, which went to its alternate exchange "unrouted": those messages no longer reach queue "orders.unrouted"`},
	{rule: rules.PublishChanged,
		old:     []string{"queues:", "exchanges:\n  shop: {type: topic}\nqueues:", "  OrderPlaced:\n", "  OrderPlaced:\n    publish: {exchange: shop, routing_key: order.placed}\n"},
		new:     []string{"queues:", "exchanges:\n  shop: {type: topic}\nqueues:", "  OrderPlaced:\n", "  OrderPlaced:\n    publish: {exchange: shop, routing_key: {field: order_id}}\n"},
		subject: "OrderPlaced",
		message: `message OrderPlaced is published to exchange "shop" with the routing key from its field order_id instead of exchange "shop" with routing key "order.placed": queues bound to the old one stop receiving it from producers on the new schema`},
	{rule: rules.LintQueueName,
		new:     []string{"queues:\n  orders:", "queues:\n  Orders:"},
		subject: "Orders", message: `queue name "Orders" is not lower case words joined by '.', '-' or '_'`},
	{rule: rules.LintFieldName,
		new:     []string{"          note:", "          giftNote: {type: string, max_length: 9}\n          note:"},
		subject: "OrderPlaced.v1.giftNote", message: `field name "giftNote" is not snake_case`},
	{rule: rules.LintStringUnbounded,
		new:     []string{"note: {type: string, max_length: 200}", "note: {type: string}"},
		subject: "OrderPlaced.v1.note", message: "string OrderPlaced.v1.note has no max_length"},
	{rule: rules.LintListUnbounded,
		new:     []string{"            max_items: 10\n", ""},
		subject: "OrderPlaced.v1.items", message: "list OrderPlaced.v1.items has no max_items"},
	{rule: rules.LintVersionUnconsumed,
		new:     []string{"[1, 2]", "[2]"},
		subject: "OrderPlaced.v1", message: "OrderPlaced version 1 is consumed by no queue"},
	{rule: rules.LintRemoveAfterPassed,
		new:     []string{"      2:\n        fields:", "      2:\n        deprecated_since: 2026-01-01\n        remove_after: 2026-06-01\n        fields:"},
		subject: "OrderPlaced.v2", message: "OrderPlaced version 2 was to be removed after 2026-06-01"},
	{rule: rules.LintSingleActiveConcurrency,
		new:     []string{"    max_body_bytes", "    arguments: {single_active_consumer: true}\n    max_body_bytes"},
		subject: "orders", message: `queue "orders" has a single active consumer, which keeps order across processes, but handles 8 deliveries at once, which does not`},
	{rule: rules.LintBudgetShort,
		new:     []string{"    max_body_bytes", "    settlement_budget: 40s\n    max_body_bytes"},
		subject: "orders", message: `queue "orders" has settlement_budget 40s, under the 52s the runtime wants at the default step timeout (handler_timeout 30s, four steps of 5s, 2s for a handoff; a step more with a Config.Scope): NewConsumer refuses it unless Config.StepTimeout is shorter`},
	{rule: rules.LintUnorderedRetry,
		new:     []string{"    max_body_bytes", "    ordering: sequential\n    settlement_budget: 1m\n    max_body_bytes"},
		subject: "orders", message: `queue "orders" retries in line, but its settlement_budget 1m0s is short of the 3m21s its 3 attempts and delays need: a late retry goes through orders.retry.1s instead, behind the messages that arrived meanwhile`},
	{rule: rules.LintTypeUnused,
		new:     []string{"messages:", "types:\n  Unused: {type: enum, values: [a]}\nmessages:"},
		subject: "Unused", message: "type Unused is used by no message version: it generates no Go code"},
	{rule: rules.LintVersionUnreachable,
		new:     []string{"messages:", "envelopes:\n  legacy: {kind: headers, type: {header: kind}, version: {fixed: 2}}\nmessages:", "  orders:\n", "  orders:\n    envelope: legacy\n"},
		subject: "orders", message: `queue "orders" reads OrderPlaced in envelope legacy, whose messages are all version 2: its handler for version 1 is never called`},
	{rule: rules.LintBodyOverLimit,
		new:     []string{"max_body_bytes: 65536", "max_body_bytes: 1024"},
		subject: "orders/OrderPlaced.v1", message: `queue "orders" reads OrderPlaced version 1, whose body at the schema's bounds is up to 4427 bytes as a generated producer marshals it, over the queue's max_body_bytes 1024: a producer's round trip accepts such a body, and the queue dead-letters it unread`},
}

// TestRuleCasesCoverEveryRule requires a case of ruleCases for every rule,
// so that a rule nothing reports fails here.
func TestRuleCasesCoverEveryRule(t *testing.T) {
	for _, r := range rules.All {
		if !slices.ContainsFunc(ruleCases, func(c ruleCase) bool { return c.rule == r }) {
			t.Errorf("no case of ruleCases produces %s", r.ID)
		}
	}
}

// TestRuleFindings produces each case's finding, by Breaking from the old
// revision to the new or, for a lint rule, by Lint of the new, and checks
// its subject, message and place, and that it is plain text.
func TestRuleFindings(t *testing.T) {
	today := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	for _, tc := range ruleCases {
		t.Run(tc.rule.ID, func(t *testing.T) {
			new := parse(t, "new.lily.yaml", edit(t, tc.new...))
			var found []Finding
			if tc.rule.Category == rules.Lint {
				found = Lint(new, today)
			} else {
				old := parse(t, "old.lily.yaml", edit(t, tc.old...))
				if tc.model != nil {
					tc.model(old)
				}
				found = Breaking(old, new)
				if tc.other != nil {
					other := parse(t, "other.lily.yaml", edit(t, tc.other...))
					found, _ = BreakingAcross([]Revision{{Old: old, New: new}, {Old: other, New: other}})
				}
			}
			i := slices.IndexFunc(found, func(f Finding) bool { return f.Rule == tc.rule.ID && f.Subject == tc.subject })
			if i < 0 {
				t.Fatalf("no %s@%s among the findings %+v", tc.rule.ID, tc.subject, found)
			}
			f := found[i]
			if f.Message != tc.message {
				t.Errorf("message\n%s\nwant\n%s", f.Message, tc.message)
			}
			if f.Category != tc.rule.Category || f.File != "new.lily.yaml" || f.Line < 1 || f.Column < 1 || f.Migration == "" {
				t.Errorf("finding without its category, place or migration: %+v", f)
			}
			// The review page escapes a finding's words whole, as they hold
			// what the schema names: Markdown of Lily's would show there.
			if strings.Contains(f.Message+f.Migration, "`") {
				t.Errorf("finding in Markdown: %+v", f)
			}
		})
	}
}
