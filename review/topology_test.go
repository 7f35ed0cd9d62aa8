package review

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/internal/services"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/schema"
)

const topologySchema = `version: 1
package: topo
messages:
  Ping: {versions: {1: {}}}
queues:
  PREFIX.orders:
    consumes: [{message: Ping}]
    retry: {delays: [1500ms, 1m]}
  PREFIX.billing:
    type: quorum
    dlq: PREFIX.billing.dead
    consumes: [{message: Ping}]
`

func TestTopology(t *testing.T) {
	f := parse(t, "topo.lily.yaml", topologySchema)
	defs, err := Topology("/", 3, queue.DefaultPolicyPriority, f)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(defs)
	want := `{"queues":[` +
		`{"name":"PREFIX.orders.dlq","vhost":"/","durable":true,"auto_delete":false,"arguments":{"x-queue-type":"classic"}},` +
		`{"name":"PREFIX.orders.retry.1.5s","vhost":"/","durable":true,"auto_delete":false,"arguments":{"x-dead-letter-exchange":"","x-dead-letter-routing-key":"PREFIX.orders","x-message-ttl":1500,"x-queue-type":"classic"}},` +
		`{"name":"PREFIX.orders.retry.1m0s","vhost":"/","durable":true,"auto_delete":false,"arguments":{"x-dead-letter-exchange":"","x-dead-letter-routing-key":"PREFIX.orders","x-message-ttl":60000,"x-queue-type":"classic"}},` +
		`{"name":"PREFIX.orders","vhost":"/","durable":true,"auto_delete":false,"arguments":{"x-dead-letter-exchange":"","x-dead-letter-routing-key":"PREFIX.orders.dlq","x-queue-type":"classic"}},` +
		`{"name":"PREFIX.billing.dead","vhost":"/","durable":true,"auto_delete":false,"arguments":{"x-queue-type":"quorum"}},` +
		`{"name":"PREFIX.billing","vhost":"/","durable":true,"auto_delete":false,"arguments":{"x-dead-letter-exchange":"","x-dead-letter-routing-key":"PREFIX.billing.dead","x-dead-letter-strategy":"at-least-once","x-delivery-limit":20,"x-overflow":"reject-publish","x-queue-type":"quorum"}}],"exchanges":[],"bindings":[],"policies":[]}`
	if string(got) != want {
		t.Errorf("definitions:\n%s\nwant:\n%s", got, want)
	}
}

// A quorum queue's "no delivery limit" is -1 from RabbitMQ 4 on and nothing
// before, where -1 dead-letters at the first return: the DLQ's always, a
// main queue's when its schema says -1.
func TestTopologyNoDeliveryLimit(t *testing.T) {
	f := parse(t, "topo.lily.yaml", strings.Replace(topologySchema, "dlq: PREFIX.billing.dead", "dlq: PREFIX.billing.dead\n    delivery_limit: -1", 1))
	for major, want := range map[int]any{3: nil, 4: int64(-1)} {
		defs, err := Topology("/", major, queue.DefaultPolicyPriority, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range defs.Queues {
			if strings.HasPrefix(q.Name, "PREFIX.billing") && q.Arguments["x-delivery-limit"] != want {
				t.Errorf("RabbitMQ %d: %s has x-delivery-limit %v, want %v", major, q.Name, q.Arguments["x-delivery-limit"], want)
			}
		}
	}
}

func TestTopologyConflict(t *testing.T) {
	a := parse(t, "a.lily.yaml", topologySchema)
	b := parse(t, "b.lily.yaml", strings.Replace(topologySchema, "[1500ms, 1m]", "[1500ms]", 1))
	if _, err := Topology("/", 3, queue.DefaultPolicyPriority, a, a); err != nil {
		t.Errorf("one schema twice declares the same queues: %v", err)
	}
	// A DLQ shared by a classic and a quorum queue is of the first's type, as
	// the runtime's declare yields to it; a queue that dead-letters to two
	// DLQs is refused.
	c := parse(t, "c.lily.yaml", strings.Replace(topologySchema, "dlq: PREFIX.billing.dead", "dlq: PREFIX.orders.dlq", 1))
	defs, err := Topology("/", 4, queue.DefaultPolicyPriority, c)
	if err != nil || defs.Queues[0].Name != "PREFIX.orders.dlq" || defs.Queues[0].Arguments["x-queue-type"] != queue.Classic {
		t.Errorf("a DLQ shared by a classic and a quorum queue: %v, %+v", err, defs.Queues)
	}
	if _, err := Topology("/", 3, queue.DefaultPolicyPriority, b, c); err == nil || !strings.Contains(err.Error(), `"PREFIX.billing" is declared twice`) {
		t.Errorf("a queue with two DLQs: err = %v", err)
	}
}

// TestTopologyImports imports the definitions into the local broker with
// rabbitmqctl, then redeclares every queue as the runtime does: RabbitMQ
// refuses a redeclare whose arguments differ (406), so passing proves the
// definitions are the runtime's own.
func TestTopologyImports(t *testing.T) {
	ctl, prefix, f, conn := onTheBroker(t, "topology", topologySchema)
	version, _ := conn.Properties["version"].(string)
	major, err := strconv.Atoi(strings.Split(version, ".")[0])
	if err != nil {
		t.Fatalf("the broker's version %q", version)
	}
	defs, err := Topology("/", major, queue.DefaultPolicyPriority, f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ch, err := conn.Channel()
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		for _, q := range defs.Queues {
			if _, err := ch.QueueDelete(q.Name, false, false, false); err != nil {
				t.Errorf("cleanup: delete %s: %v", q.Name, err)
			}
		}
	})

	importAndRedeclare(t, ctl, conn, f, defs, major)

	// A control: the broker does refuse a declare with other arguments.
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	_, err = ch.QueueDeclare(prefix+".orders", true, false, false, false, amqp.Table{"x-dead-letter-routing-key": "elsewhere"})
	var amqpErr *amqp.Error
	if !errors.As(err, &amqpErr) || amqpErr.Code != amqp.PreconditionFailed {
		t.Errorf("a declare with other arguments: %v, want 406", err)
	}
}

// onTheBroker readies a definitions test: rabbitmqctl (or a skip), a
// prefix of the test's own, src parsed with its PREFIX replaced, and a
// connection to the broker.
func onTheBroker(t *testing.T, name, src string) (ctl, prefix string, f *schema.File, conn *amqp.Connection) {
	t.Helper()
	url := services.RabbitMQ(t)
	ctl, err := exec.LookPath("rabbitmqctl")
	if err != nil {
		t.Skip("rabbitmqctl is not installed here")
	}
	var r [4]byte
	_, _ = rand.Read(r[:])
	prefix = "lilytest." + name + "." + hex.EncodeToString(r[:])
	f = parse(t, name+".lily.yaml", strings.ReplaceAll(src, "PREFIX", prefix))
	conn, err = amqp.Dial(url)
	if err != nil {
		t.Fatalf("RabbitMQ is not reachable at %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close() })
	return ctl, prefix, f, conn
}

// importAndRedeclare imports defs with rabbitmqctl, waits for their queues,
// then declares each queue of f as the runtime does: RabbitMQ refuses a
// redeclare whose arguments differ (406).
func importAndRedeclare(t *testing.T, ctl string, conn *amqp.Connection, f *schema.File, defs Definitions, major int) {
	t.Helper()
	// rabbitmqctl may read the file as another user, so it is readable by all.
	data, _ := json.Marshal(defs)
	file, err := os.CreateTemp("", "lily-definitions-*.json")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(file.Name()) })
	_, err = file.Write(data)
	if err := errors.Join(err, file.Chmod(0o644), file.Close()); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(ctl, "import_definitions", file.Name()).CombinedOutput(); err != nil {
		t.Fatalf("rabbitmqctl import_definitions: %v\n%s", err, out)
	}
	// The import is asynchronous: wait until every queue exists, so that the
	// runtime's declare below redeclares them rather than creating them.
	for _, q := range defs.Queues {
		waitForQueue(t, conn, q.Name)
	}
	for _, q := range f.Queues {
		spec := runtime.QueueSpec{Name: q.Name, Topology: QueueTopology(f, q, major).Queue}
		if err := runtime.DeclareTopology(conn, spec); err != nil {
			t.Errorf("the runtime's declare after the import: %v", err)
		}
	}
}

func waitForQueue(t *testing.T, conn *amqp.Connection, name string) {
	t.Helper()
	// The broker applies an import in its own time, slower on a loaded machine.
	deadline := time.Now().Add(time.Minute)
	for {
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		// A passive declare of a missing queue closes the channel with 404.
		_, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
		if err == nil {
			ch.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %s did not appear after the import: %v", name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

const estateSchema = `version: 1
package: estate
messages:
  Ping: {versions: {1: {}}}
exchanges:
  PREFIX.shop: {type: topic}
  PREFIX.in:
    type: headers
    ownership: owned
    internal: true
    alternate_exchange: PREFIX.unrouted
    bindings: [{exchange: PREFIX.shop, routing_keys: [ping.*, pong.#]}]
  PREFIX.unrouted: {type: fanout, ownership: owned}
queues:
  PREFIX.billing:
    type: quorum
    arguments: {single_active_consumer: true, message_ttl: 1h}
    consumes: [{message: Ping}]
    retry: {delays: [1s]}
    bindings: [{exchange: PREFIX.in, match: any, headers: {region: eu}}]
  PREFIX.audit:
    lily_arguments: policy
    arguments: {max_length: 100, overflow: reject-publish-dlx}
    consumes: [{message: Ping}]
    retry: {delays: [1s]}
    bindings: [{exchange: PREFIX.shop, routing_key: "#"}]
  PREFIX.legacy:
    ownership: external
    consumes: [{message: Ping}]
`

// TestTopologyImportsEstate imports the definitions of a schema with
// exchanges, bindings, policies and external parts, which another team's
// exchange and queue stand beside, and an estate policy of priority 20 that
// matches every queue: the runtime's declare then passes (its redeclares
// match, and what is external exists), every owned binding is on the
// broker, and each of Lily's policies, at priority 21, applies to its queue.
func TestTopologyImportsEstate(t *testing.T) {
	ctl, prefix, f, conn := onTheBroker(t, "estate", estateSchema)
	defs, err := Topology("/", 3, 21, f)
	if err != nil {
		t.Fatal(err)
	}
	estate := prefix + " estate"
	if out, err := exec.Command(ctl, "set_policy", "--apply-to", "queues", "--priority", "20", estate, "^"+regexp.QuoteMeta(prefix)+`\.`, `{"max-length": 100000}`).CombinedOutput(); err != nil {
		t.Fatalf("set_policy: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command(ctl, "clear_policy", estate).Run() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	// The other team's exchange and queue.
	if err := ch.ExchangeDeclare(prefix+".shop", "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(prefix+".legacy", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ch, err := conn.Channel()
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		for _, q := range append(defs.Queues, QueueDefinition{Name: prefix + ".legacy"}) {
			_, _ = ch.QueueDelete(q.Name, false, false, false)
		}
		for _, x := range append(defs.Exchanges, ExchangeDefinition{Name: prefix + ".shop"}) {
			_ = ch.ExchangeDelete(x.Name, false, false)
		}
		for _, p := range defs.Policies {
			_ = exec.Command(ctl, "clear_policy", p.Name).Run()
		}
	})
	if len(defs.Exchanges) != 2 || len(defs.Bindings) != 4 || len(defs.Policies) != 3 {
		t.Fatalf("%d exchanges, %d bindings, %d policies; want 2 owned, 4 (two exchange-to-exchange, two to queues), 3 (audit, its bucket, legacy)",
			len(defs.Exchanges), len(defs.Bindings), len(defs.Policies))
	}
	importAndRedeclare(t, ctl, conn, f, defs, 3)
	out, err := exec.Command(ctl, "list_bindings", "-q", "--no-table-headers", "source_name", "destination_name", "routing_key").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range defs.Bindings {
		if want := b.Source + "\t" + b.Destination + "\t" + b.RoutingKey; !strings.Contains(string(out), want) {
			t.Errorf("binding %q is not on the broker", want)
		}
	}
	// Each look starts a rabbitmqctl, which takes seconds on a loaded machine.
	deadline := time.Now().Add(time.Minute)
	for _, p := range defs.Policies {
		queue := strings.TrimPrefix(p.Name, "lily ")
		for {
			out, err := exec.Command(ctl, "list_queues", "-q", "--no-table-headers", "name", "policy").Output()
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(out), queue+"\t"+p.Name+"\n") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("policy %q does not apply to %s:\n%s", p.Name, queue, out)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}
