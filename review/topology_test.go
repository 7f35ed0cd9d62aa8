package review

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/services"
	"github.com/lily-mq/lily/runtime"
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
	defs, err := Topology("/", 3, f)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(defs)
	want := `{"queues":[` +
		`{"name":"PREFIX.orders.dlq","vhost":"/","durable":true,"auto_delete":false,"arguments":{}},` +
		`{"name":"PREFIX.orders.retry.1.5s","vhost":"/","durable":true,"auto_delete":false,"arguments":{"x-dead-letter-exchange":"","x-dead-letter-routing-key":"PREFIX.orders","x-message-ttl":1500}},` +
		`{"name":"PREFIX.orders.retry.1m0s","vhost":"/","durable":true,"auto_delete":false,"arguments":{"x-dead-letter-exchange":"","x-dead-letter-routing-key":"PREFIX.orders","x-message-ttl":60000}},` +
		`{"name":"PREFIX.orders","vhost":"/","durable":true,"auto_delete":false,"arguments":{"x-dead-letter-exchange":"","x-dead-letter-routing-key":"PREFIX.orders.dlq"}},` +
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
		defs, err := Topology("/", major, f)
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
	if _, err := Topology("/", 3, a, a); err != nil {
		t.Errorf("one schema twice declares the same queues: %v", err)
	}
	c := parse(t, "c.lily.yaml", strings.Replace(topologySchema, "dlq: PREFIX.billing.dead", "dlq: PREFIX.orders.dlq", 1))
	if _, err := Topology("/", 3, b, c); err == nil || !strings.Contains(err.Error(), `"PREFIX.orders.dlq" is declared twice`) {
		t.Errorf("a DLQ declared classic and quorum: err = %v", err)
	}
}

// TestTopologyImports imports the definitions into the local broker with
// rabbitmqctl, then redeclares every queue as the runtime does: RabbitMQ
// refuses a redeclare whose arguments differ (406), so passing proves the
// definitions are the runtime's own.
func TestTopologyImports(t *testing.T) {
	url := services.RabbitMQ(t)
	ctl, err := exec.LookPath("rabbitmqctl")
	if err != nil {
		t.Skip("rabbitmqctl is not installed here")
	}
	var r [4]byte
	_, _ = rand.Read(r[:])
	prefix := "lilytest.topology." + hex.EncodeToString(r[:])
	f := parse(t, "topo.lily.yaml", strings.ReplaceAll(topologySchema, "PREFIX", prefix))
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("RabbitMQ is not reachable at %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close() })
	version, _ := conn.Properties["version"].(string)
	major, err := strconv.Atoi(strings.Split(version, ".")[0])
	if err != nil {
		t.Fatalf("the broker's version %q", version)
	}
	defs, err := Topology("/", major, f)
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
		spec := runtime.QueueSpec{Name: q.Name, Topology: QueueTopology(f, q, major).Queue, RetryDelays: q.Retry.Delays}
		if err := runtime.DeclareTopology(conn, spec); err != nil {
			t.Errorf("the runtime's declare after the import: %v", err)
		}
	}

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

func waitForQueue(t *testing.T, conn *amqp.Connection, name string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
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
