package runtime_test

import (
	"context"
	"crypto/tls"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/examples/orders/ordersmsg"
	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/topology"
)

// A queue whose schema requires an inbox refuses to run without one, also
// when its consumer is built from the generated spec and routes directly.
func TestNewConsumerRefusesARequiredInboxLeftOut(t *testing.T) {
	spec := ordersmsg.OrdersQueueSpec()
	spec.Messages = []envelope.Message{{Type: ordersmsg.OrderPlacedType, Inbox: envelope.InboxRequired}}
	_, err := runtime.NewConsumer(spec, ordersmsg.OrdersRoutes(ordersmsg.UnimplementedOrdersHandler{}), runtime.Config{})
	if err == nil || !strings.Contains(err.Error(), "requires an inbox") {
		t.Fatalf("NewConsumer without the required inbox: %v", err)
	}
}

// A spec's messages must cover its routes and be readable: every problem is
// reported, before the consumer connects.
func TestNewConsumerChecksItsMessages(t *testing.T) {
	ce := envelope.Profile{Kind: envelope.CloudEvents, Version: envelope.Version{Fixed: 1}}
	tests := []struct {
		name string
		msgs []envelope.Message
		want string
	}{
		{"a route's type missing", []envelope.Message{{Type: "other"}}, "its type is not among the queue's messages"},
		{"a type named twice", []envelope.Message{{Type: ordersmsg.OrderPlacedType}, {Type: ordersmsg.OrderPlacedType}}, "named twice"},
		{"an unprintable type", []envelope.Message{{Type: ordersmsg.OrderPlacedType}, {Type: "a\tb"}}, "not 1..128 bytes of printable ASCII"},
		{"an unknown inbox policy", []envelope.Message{{Type: ordersmsg.OrderPlacedType, Inbox: "sometimes"}}, `unknown inbox policy "sometimes"`},
		{"an inbox for a message without ids", []envelope.Message{{Type: ordersmsg.OrderPlacedType, Inbox: envelope.InboxOptional,
			Profile: envelope.Profile{Kind: envelope.Headers, NoID: true, Version: envelope.Version{Fixed: 1}}}}, "no id to claim in the inbox"},
		{"two CloudEvents profiles", []envelope.Message{{Type: ordersmsg.OrderPlacedType, Profile: ce},
			{Type: "b", Profile: envelope.Profile{Kind: envelope.CloudEvents, Version: envelope.Version{Fixed: 2}}}}, "could not be told apart"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := ordersmsg.OrdersQueueSpec()
			spec.Messages = tt.msgs
			_, err := runtime.NewConsumer(spec, ordersmsg.OrdersRoutes(ordersmsg.UnimplementedOrdersHandler{}), runtime.Config{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewConsumer: %v; want %q", err, tt.want)
			}
		})
	}
}

// The budget must carry the handler, four steps (five with a Scope, whose
// opening is one) and a handoff: one set in the spec too short is refused;
// the default (handler timeout + 30s) grows to it beside a long step.
func TestNewConsumerBudgetCarriesItsSteps(t *testing.T) {
	spec := ordersmsg.OrdersQueueSpec()
	scope := func(ctx context.Context, _ runtime.RawDelivery) (context.Context, func(context.Context) error, error) {
		return ctx, nil, nil
	}
	for _, c := range []struct {
		budget, step time.Duration
		scoped       bool
		want         time.Duration // 0: refused
	}{
		{10 * time.Second, 5 * time.Second, false, 0},
		// lilygen's lint (LINT-BUDGET-SHORT) knows the least, at the default step.
		{queue.MinBudget(spec.HandlerTimeout) - time.Millisecond, 5 * time.Second, false, 0},
		{queue.MinBudget(spec.HandlerTimeout), 5 * time.Second, false, spec.HandlerTimeout + 22*time.Second},
		{0, 7 * time.Second, false, spec.HandlerTimeout + 30*time.Second},
		{0, 10 * time.Second, false, spec.HandlerTimeout + 42*time.Second},
		{queue.MinBudget(spec.HandlerTimeout), 5 * time.Second, true, 0},
		{queue.MinBudget(spec.HandlerTimeout) + 5*time.Second, 5 * time.Second, true, spec.HandlerTimeout + 27*time.Second},
		{0, 6 * time.Second, true, spec.HandlerTimeout + 32*time.Second},
	} {
		spec.SettlementBudget = c.budget
		cfg := runtime.Config{StepTimeout: c.step}
		if c.scoped {
			cfg.Scope = scope
		}
		consumer, err := runtime.NewConsumer(spec, ordersmsg.OrdersRoutes(ordersmsg.UnimplementedOrdersHandler{}), cfg)
		switch {
		case c.want == 0 && (err == nil || !strings.Contains(err.Error(), "settlement budget "+c.budget.String()+" is under")):
			t.Errorf("budget %s, step %s, scope %v: %v; want refused", c.budget, c.step, c.scoped, err)
		case c.want != 0 && err != nil:
			t.Errorf("budget %s, step %s: %v", c.budget, c.step, err)
		case c.want != 0 && consumer.Budget() != c.want:
			t.Errorf("budget %s, step %s: each delivery gets %s; want %s", c.budget, c.step, consumer.Budget(), c.want)
		}
	}
}

// Durations a Config or a spec could hold but no timer should: a negative
// one (once silently the default), one whose sums with the others wrap
// (math.MaxInt64 as "no timeout" left every delivery unsettled), and a
// ReconnectMax under the first wait, which made reconnecting a busy loop.
// Each is refused, by NewConsumer and NewPublisher alike; every problem at
// once.
func TestConfigDurationsAreBounded(t *testing.T) {
	long := time.Duration(math.MaxInt64)
	routes := ordersmsg.OrdersRoutes(ordersmsg.UnimplementedOrdersHandler{})
	for _, c := range []struct {
		name string
		cfg  runtime.Config
		spec func(*runtime.QueueSpec)
		want []string
	}{
		{"negative window", runtime.Config{ForceWindow: -1}, nil, []string{"Config.ForceWindow -1ns is negative or longer than 1193h2m47.295s (zero takes the default)"}},
		{"endless steps and grace", runtime.Config{StepTimeout: long, ShutdownGrace: long}, nil, []string{"Config.ShutdownGrace", "Config.StepTimeout"}},
		{"reconnect in a loop", runtime.Config{ReconnectMax: time.Nanosecond}, nil, []string{"Config.ReconnectMax 1ns is under the first wait of 100ms"}},
		{"endless handler", runtime.Config{}, func(s *runtime.QueueSpec) { s.HandlerTimeout = long }, []string{"is longer than 1193h2m47.295s"}},
		{"endless retry delay", runtime.Config{}, func(s *runtime.QueueSpec) { s.Topology.RetryDelays = []time.Duration{time.Second, long} }, []string{"is longer than 1193h2m47.295s"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec := ordersmsg.OrdersQueueSpec()
			if c.spec != nil {
				c.spec(&spec)
			}
			_, err := runtime.NewConsumer(spec, routes, c.cfg)
			for _, want := range c.want {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("NewConsumer: %v; want %q", err, want)
				}
			}
			if c.spec != nil {
				return
			}
			if _, err := runtime.NewPublisher(c.cfg, 0); err == nil || !strings.Contains(err.Error(), c.want[0]) {
				t.Errorf("NewPublisher: %v; want %q", err, c.want[0])
			}
		})
	}
	// The first wait itself, and the longest of each, are taken.
	if _, err := runtime.NewPublisher(runtime.Config{ReconnectMax: 100 * time.Millisecond, StepTimeout: queue.MaxDuration}, 0); err != nil {
		t.Errorf("bounds themselves: %v", err)
	}
}

// A classic queue that refuses publishes when full drops a retry copy its
// bucket dead-letters back (at most once, and nothing nacks it): NewConsumer
// refuses the spec, as lilygen refuses the schema. A quorum queue, whose
// buckets dead-letter at least once, takes it.
func TestNewConsumerRefusesRejectPublishWithRetries(t *testing.T) {
	routes := ordersmsg.OrdersRoutes(ordersmsg.UnimplementedOrdersHandler{})
	spec := ordersmsg.OrdersQueueSpec()
	if spec.Topology.Type == topology.Quorum || len(spec.Topology.RetryDelays) == 0 {
		t.Fatalf("the orders queue is %s with retry delays %v: want a classic queue with retries", spec.Topology.Type, spec.Topology.RetryDelays)
	}
	spec.Topology.Arguments = map[string]any{"x-max-length": int64(10), "x-overflow": "reject-publish"}
	if _, err := runtime.NewConsumer(spec, routes, runtime.Config{}); err == nil || !strings.Contains(err.Error(), "x-overflow reject-publish on a classic queue with retries") {
		t.Errorf("classic: %v", err)
	}
	spec.Topology.Arguments["x-overflow"] = "reject-publish-dlx"
	if _, err := runtime.NewConsumer(spec, routes, runtime.Config{}); err != nil {
		t.Errorf("reject-publish-dlx: %v", err)
	}
}

// A consumer that names a Publisher uses the Publisher's connections: its
// own URLs and TLS are not checked, as Config.Publisher says.
func TestConsumerOfAPublisherTakesNoURLs(t *testing.T) {
	pub, err := runtime.NewPublisher(runtime.Config{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	cfg := runtime.Config{Publisher: pub, TLS: &tls.Config{MinVersion: tls.VersionTLS12}}
	if _, err := runtime.NewConsumer(ordersmsg.OrdersQueueSpec(), ordersmsg.OrdersRoutes(ordersmsg.UnimplementedOrdersHandler{}), cfg); err != nil {
		t.Errorf("NewConsumer with a Publisher and a TLS of its own: %v", err)
	}
}

// An external exchange is only checked, never declared into: a hand-built
// spec whose binding into one is Lily's own (not External) is refused, as
// lilygen refuses the schema, and DeclareTopology declares none of it; the
// same binding marked External, its owner's, and one of Lily's into an
// owned exchange, are taken.
func TestNewConsumerRefusesAnOwnedBindingIntoAnExternalExchange(t *testing.T) {
	routes := ordersmsg.OrdersRoutes(ordersmsg.UnimplementedOrdersHandler{})
	for _, c := range []struct {
		name     string
		theirs   bool // the destination exchange is external
		external bool // the binding is
		refused  bool
	}{
		{"Lily's binding into an external exchange", true, false, true},
		{"the owner's binding into it", true, true, false},
		{"Lily's binding into an owned exchange", false, false, false},
	} {
		spec := ordersmsg.OrdersQueueSpec()
		spec.Topology.Exchanges = []topology.Exchange{
			{Name: "src", Type: topology.Fanout, External: true},
			{Name: "dest", Type: topology.Fanout, External: c.theirs},
		}
		spec.Topology.Bindings = []topology.Binding{{Source: "src", Exchange: "dest", External: c.external}, {Source: "dest"}}
		_, err := runtime.NewConsumer(spec, routes, runtime.Config{})
		if refused := err != nil && strings.Contains(err.Error(), "into external exchange dest is Lily's own"); refused != c.refused || !c.refused && err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if c.refused {
			// Refused before a channel is asked of the connection.
			if err := runtime.DeclareTopology(nil, spec); err == nil || !strings.Contains(err.Error(), "into external exchange dest is Lily's own") {
				t.Errorf("%s: DeclareTopology: %v", c.name, err)
			}
		}
	}
}

// Every name, routing key and argument key the topology sends is an AMQP
// short string: amqp091-go refuses one over 255 bytes only as it writes the
// frame, and closes the whole connection for it, a Publisher's shared with
// other consumers too. NewConsumer refuses such a spec, and DeclareTopology
// sends nothing of it; so too a name with control characters, and a DLQ
// named as one of the queue's own retry buckets. An empty routing key (a
// fanout's, or a direct exchange's own) and one of 255 bytes are taken.
func TestNewConsumerRefusesNamesRabbitMQCannotTake(t *testing.T) {
	routes := ordersmsg.OrdersRoutes(ordersmsg.UnimplementedOrdersHandler{})
	long := strings.Repeat("n", 256)
	withRoutes := func(q *runtime.QueueSpec, x topology.Exchange, b topology.Binding) {
		q.Topology.Exchanges = []topology.Exchange{x}
		q.Topology.Bindings = []topology.Binding{b}
	}
	for _, c := range []struct {
		name  string
		tweak func(*runtime.QueueSpec)
		want  string // "" when taken
	}{
		{"a DLQ of 256 bytes", func(q *runtime.QueueSpec) { q.Topology.DeadLetterQueue = long }, "DLQ name"},
		{"a DLQ with a newline", func(q *runtime.QueueSpec) { q.Topology.DeadLetterQueue = "orders\n.dlq" }, "DLQ name"},
		{"a DLQ named as a retry bucket", func(q *runtime.QueueSpec) {
			q.Topology.DeadLetterQueue = queue.RetryBucket(q.Name, q.Topology.RetryDelays[0])
		}, "named as one of the queue's retry buckets"},
		{"an exchange of 256 bytes", func(q *runtime.QueueSpec) {
			withRoutes(q, topology.Exchange{Name: long, Type: topology.Fanout, External: true}, topology.Binding{Source: long})
		}, "exchange name"},
		{"an exchange with a tab", func(q *runtime.QueueSpec) {
			withRoutes(q, topology.Exchange{Name: "a\tb", Type: topology.Fanout, External: true}, topology.Binding{Source: "a\tb"})
		}, "exchange name"},
		{"an alternate exchange of 256 bytes", func(q *runtime.QueueSpec) {
			withRoutes(q, topology.Exchange{Name: "x", Type: topology.Fanout, AlternateExchange: long}, topology.Binding{Source: "x"})
		}, "alternate exchange"},
		{"a routing key of 256 bytes", func(q *runtime.QueueSpec) {
			withRoutes(q, topology.Exchange{Name: "x", Type: topology.Direct, External: true}, topology.Binding{Source: "x", RoutingKey: long})
		}, "routing key"},
		{"a routing key with an escape", func(q *runtime.QueueSpec) {
			withRoutes(q, topology.Exchange{Name: "x", Type: topology.Direct, External: true}, topology.Binding{Source: "x", RoutingKey: "a\x1bb"})
		}, "routing key"},
		{"a binding argument of 256 bytes", func(q *runtime.QueueSpec) {
			withRoutes(q, topology.Exchange{Name: "x", Type: topology.Headers, External: true},
				topology.Binding{Source: "x", Arguments: map[string]any{"x-match": "all", long: "eu"}})
		}, "has an argument"},
		{"a queue argument within a table of 256 bytes", func(q *runtime.QueueSpec) {
			q.Topology.Arguments = map[string]any{"x-max-length": int64(5), "nested": map[string]any{long: 1}}
		}, "argument"},
		{"an empty routing key", func(q *runtime.QueueSpec) {
			withRoutes(q, topology.Exchange{Name: "x", Type: topology.Direct, External: true}, topology.Binding{Source: "x"})
		}, ""},
		{"a routing key of 255 bytes", func(q *runtime.QueueSpec) {
			withRoutes(q, topology.Exchange{Name: "x", Type: topology.Direct, External: true}, topology.Binding{Source: "x", RoutingKey: long[1:]})
		}, ""},
	} {
		spec := ordersmsg.OrdersQueueSpec()
		if len(spec.Topology.RetryDelays) == 0 {
			t.Fatal("the orders queue has no retry delays")
		}
		c.tweak(&spec)
		_, err := runtime.NewConsumer(spec, routes, runtime.Config{})
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: NewConsumer: %v; want %q", c.name, err, c.want)
			continue
		}
		// Refused before a channel is asked of the connection.
		if err := runtime.DeclareTopology(nil, spec); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: DeclareTopology: %v; want %q", c.name, err, c.want)
		}
	}
}

// The arguments a queue's team sets must leave Lily's own alone: a
// hand-built spec naming one is refused, naming the key, whether Lily's
// arguments are declared (where they silently overwrote the team's) or go by
// policy (where the team's, declared, silently beat the policy, and the
// queue dead-lettered elsewhere). A quorum queue's x-overflow is Lily's but
// for reject-publish, which Lily sets too; a classic queue's is its team's.
func TestNewConsumerRefusesLilysOwnArguments(t *testing.T) {
	routes := ordersmsg.OrdersRoutes(ordersmsg.UnimplementedOrdersHandler{})
	for _, c := range []struct {
		typ  string
		args map[string]any
		want []string // nil: taken
	}{
		{topology.Classic, map[string]any{"x-dead-letter-exchange": "elsewhere", "x-dead-letter-routing-key": "zzz", "x-queue-type": "stream"},
			[]string{`argument "x-dead-letter-exchange" is Lily's own`, `argument "x-dead-letter-routing-key" is Lily's own`, `argument "x-queue-type" is Lily's own`}},
		{topology.Classic, map[string]any{"x-delivery-limit": int64(3)}, []string{`argument "x-delivery-limit" is Lily's own`}},
		{topology.Quorum, map[string]any{"x-dead-letter-strategy": "at-most-once"}, []string{`argument "x-dead-letter-strategy" is Lily's own`}},
		{topology.Quorum, map[string]any{"x-max-length": int64(10), "x-overflow": "drop-head"}, []string{`argument "x-overflow" is Lily's own`}},
		{topology.Quorum, map[string]any{"x-max-length": int64(10), "x-overflow": "reject-publish"}, nil},
		{topology.Classic, map[string]any{"x-max-length": int64(10), "x-overflow": "drop-head", "x-max-priority": int64(5)}, nil},
	} {
		for _, byPolicy := range []bool{false, true} {
			spec := ordersmsg.OrdersQueueSpec()
			spec.Topology.Type = c.typ
			spec.Topology.ByPolicy = byPolicy
			spec.Topology.Arguments = c.args
			_, err := runtime.NewConsumer(spec, routes, runtime.Config{})
			if c.want == nil && err != nil {
				t.Errorf("%s, by policy %v, %v: %v", c.typ, byPolicy, c.args, err)
			}
			for _, want := range c.want {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("%s, by policy %v, %v: %v; want %q", c.typ, byPolicy, c.args, err, want)
				}
			}
		}
	}
}

// Prefetch and concurrency are held to what a schema may say (1..65535): a
// hand-built spec's concurrency sizes its handoffs' window, and one beyond
// the schema's bound made each handoff channel's Return buffer panic.
func TestNewConsumerBoundsPrefetchAndConcurrency(t *testing.T) {
	routes := ordersmsg.OrdersRoutes(ordersmsg.UnimplementedOrdersHandler{})
	for _, tc := range []struct{ prefetch, concurrency int }{{0, 1}, {65536, 1}, {1, 0}, {1, 65536}, {1, math.MaxInt}} {
		spec := ordersmsg.OrdersQueueSpec()
		spec.Prefetch, spec.Concurrency = tc.prefetch, tc.concurrency
		if _, err := runtime.NewConsumer(spec, routes, runtime.Config{}); err == nil || !strings.Contains(err.Error(), "prefetch and concurrency must be 1..65535") {
			t.Errorf("prefetch %d, concurrency %d: %v", tc.prefetch, tc.concurrency, err)
		}
	}
	spec := ordersmsg.OrdersQueueSpec()
	spec.Prefetch, spec.Concurrency = 65535, 65535
	if _, err := runtime.NewConsumer(spec, routes, runtime.Config{}); err != nil {
		t.Errorf("prefetch and concurrency 65535: %v", err)
	}
}
