package runtime_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/npmtest"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
)

// foreignSpec is the generated spec of the queue that reads other teams'
// envelopes, renamed to a queue of the test's own.
func foreignSpec(t *testing.T) runtime.QueueSpec {
	var b [3]byte
	_, _ = rand.Read(b[:])
	q := fixture.LilytestForeignQueueSpec()
	q.Name += "." + strings.ReplaceAll(t.Name(), "/", ".") + "." + hex.EncodeToString(b[:])
	q.Topology.DeadLetterQueue = q.Name + ".dlq"
	t.Cleanup(func() { deleteQueues(t, q) })
	return q
}

// seen is what a foreign handler saw of one delivery.
type seen struct {
	typ, id, body, subject string
	version, attempt       int
}

// foreignHandler implements the generated handler of the foreign queue: it
// fails the first attempt of payments whose id starts with "retry", and
// every attempt of those whose id starts with "dead".
type foreignHandler struct {
	mu   sync.Mutex
	seen map[string][]seen // by payment or order id
	// mended: the fault the DLQ's messages met is fixed, and a re-drive
	// succeeds.
	mended bool
}

func (h *foreignHandler) record(key string, d runtime.RawDelivery) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := seen{typ: d.Type(), id: d.MessageID(), body: string(d.Body()), version: d.Version(), attempt: d.Attempt()}
	if v, ok := d.Header("cloudEvents_subject"); ok {
		s.subject, _ = v.(string)
	}
	h.seen[key] = append(h.seen[key], s)
}

func (h *foreignHandler) payment(id string, d runtime.RawDelivery) error {
	h.record(id, d)
	h.mu.Lock()
	mended := h.mended
	h.mu.Unlock()
	switch {
	case strings.HasPrefix(id, "dead") && !mended:
		return runtime.Permanent(errors.New("payment refused"))
	case strings.HasPrefix(id, "retry") && d.Attempt() == 1:
		return runtime.Retryable(errors.New("ledger busy"))
	}
	return nil
}

func (h *foreignHandler) HandlePaymentAuthorizedV1(_ context.Context, msg *fixture.PaymentAuthorizedV1, d runtime.RawDelivery) error {
	return h.payment(msg.PaymentID, d)
}

func (h *foreignHandler) HandlePaymentAuthorizedV2(_ context.Context, msg *fixture.PaymentAuthorizedV2, d runtime.RawDelivery) error {
	return h.payment(msg.PaymentID, d)
}

func (h *foreignHandler) HandleOrderShippedV1(_ context.Context, msg *fixture.OrderShippedV1, d runtime.RawDelivery) error {
	h.record(msg.OrderID, d)
	return nil
}

const paymentsSource = "https://payments.acme.example/api"

// binaryEvent is a payment as a CloudEvents emitter publishes it in binary
// content mode: the attributes in cloudEvents_ headers, the data the body.
func binaryEvent(id, data string, version int) amqp.Publishing {
	return amqp.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		Headers: amqp.Table{
			"cloudEvents_specversion": "1.0",
			"cloudEvents_id":          id,
			"cloudEvents_source":      paymentsSource,
			"cloudEvents_type":        "com.acme.payment.authorized.v" + strconv.Itoa(version),
			"cloudEvents_time":        time.Now().UTC().Format(time.RFC3339),
			"cloudEvents_subject":     "order-" + id,
		},
		Body: []byte(data),
	}
}

// structuredEvent is one in structured content mode: the whole event in the
// body as JSON.
func structuredEvent(id, data string, version int) amqp.Publishing {
	return amqp.Publishing{
		ContentType:  "application/cloudevents+json; charset=utf-8",
		DeliveryMode: amqp.Persistent,
		Body: []byte(`{"specversion":"1.0","id":"` + id + `","source":"` + paymentsSource + `",` +
			`"type":"com.acme.payment.authorized.v` + strconv.Itoa(version) + `","subject":"order-` + id + `",` +
			`"datacontenttype":"application/json","data":` + data + `}`),
	}
}

// springMessage is an order as Spring AMQP's Jackson2JsonMessageConverter
// publishes it, with message ids switched on.
func springMessage(id, data string) amqp.Publishing {
	return amqp.Publishing{
		ContentType:     "application/json",
		ContentEncoding: "UTF-8",
		DeliveryMode:    amqp.Persistent,
		MessageId:       id,
		Headers:         amqp.Table{"__TypeId__": "com.acme.shipping.OrderShipped"},
		Body:            []byte(data),
	}
}

// One queue reads a CloudEvents emitter's events, in both content modes, and
// a Spring service's messages, each published exactly as those producers do,
// with no Lily code on the producing side. A retry and a DLQ copy keep the
// producer's envelope intact, so a re-driven copy is still readable; what
// breaks the envelope, or comes in an envelope the queue does not read, is
// poison, dead-lettered with its reason, and halts nothing.
func TestBrokerForeignEnvelopes(t *testing.T) {
	t.Parallel()
	q := foreignSpec(t)
	declareTopology(t, q)
	withoutID := binaryEvent("x", `{"payment_id":"no-id"}`, 1)
	delete(withoutID.Headers, "cloudEvents_id")
	// The binding's two prefixes with two ids: which event is it?
	twinID := binaryEvent("evt-6", `{"payment_id":"twin-id"}`, 1)
	twinID.Headers["cloudEvents:id"] = "evt-7"
	published := map[string]amqp.Publishing{
		"binary":     binaryEvent("evt-1", `{"payment_id":"ok-binary","amount_cents":500}`, 2),
		"structured": structuredEvent("evt-2", `{"payment_id":"ok-structured"}`, 1),
		"retry":      structuredEvent("evt-3", `{"payment_id":"retry-structured","amount_cents":7}`, 2),
		"dead-bin":   binaryEvent("evt-4", `{"payment_id":"dead-binary"}`, 1),
		"dead-str":   structuredEvent("evt-5", `{"payment_id":"dead-structured"}`, 1),
		"spring":     springMessage("6f1c2a7e-0b2d-4f1e-9a3c-1d2e3f4a5b6c", `{"orderId":"ship-1"}`),
		"batch":      {ContentType: "application/cloudevents-batch+json", Body: []byte(`[]`)},
		"no-id":      withoutID,
		"twin-id":    twinID,
		"lily":       order(t, "lily-1"),
	}
	for _, name := range []string{"binary", "structured", "retry", "dead-bin", "dead-str", "spring", "batch", "no-id", "twin-id", "lily"} {
		publish(t, q.Name, published[name])
	}
	h := &foreignHandler{seen: map[string][]seen{}}
	r, c := prepareRoutes(t, q, fixture.LilytestForeignRoutes(h))
	r.launch(c)
	// Ten deliveries and the retry's second attempt.
	recs := r.await(11)
	r.stop()

	wantPaths(t, recs, map[runtime.Path]int{runtime.PathAcked: 4, runtime.PathRetried: 1, runtime.PathDeadLettered: 6})
	h.mu.Lock()
	want := map[string][]seen{
		"ok-binary":        {{typ: "com.acme.payment.authorized", id: "evt-1", body: `{"payment_id":"ok-binary","amount_cents":500}`, subject: "order-evt-1", version: 2, attempt: 1}},
		"ok-structured":    {{typ: "com.acme.payment.authorized", id: "evt-2", body: `{"payment_id":"ok-structured"}`, subject: "order-evt-2", version: 1, attempt: 1}},
		"retry-structured": {{typ: "com.acme.payment.authorized", id: "evt-3", body: `{"payment_id":"retry-structured","amount_cents":7}`, subject: "order-evt-3", version: 2, attempt: 1}},
		"dead-binary":      {{typ: "com.acme.payment.authorized", id: "evt-4", body: `{"payment_id":"dead-binary"}`, subject: "order-evt-4", version: 1, attempt: 1}},
		"dead-structured":  {{typ: "com.acme.payment.authorized", id: "evt-5", body: `{"payment_id":"dead-structured"}`, subject: "order-evt-5", version: 1, attempt: 1}},
		"ship-1":           {{typ: "com.acme.shipping.OrderShipped", id: "6f1c2a7e-0b2d-4f1e-9a3c-1d2e3f4a5b6c", body: `{"orderId":"ship-1"}`, version: 1, attempt: 1}},
	}
	second := want["retry-structured"][0]
	second.attempt = 2
	want["retry-structured"] = append(want["retry-structured"], second)
	for key, w := range want {
		if got := h.seen[key]; !slices.Equal(got, w) {
			t.Errorf("%s: handler saw %+v, want %+v", key, got, w)
		}
	}
	if len(h.seen) != len(want) {
		t.Errorf("handler saw %d messages, want %d: %+v", len(h.seen), len(want), h.seen)
	}

	assertCounts(t, map[string][2]int{q.Name: {0, 0}, bucket(q, 300*time.Millisecond): {0, 0}, q.Topology.DeadLetterQueue: {6, 0}})
	dead := map[string]amqp.Delivery{}
	for _, d := range drain(t, q.Topology.DeadLetterQueue) {
		reason, _ := d.Headers["x-lily-failure-reason"].(string)
		switch {
		case d.Headers["cloudEvents_id"] == "evt-4":
			dead["dead-bin"] = d
		case strings.Contains(string(d.Body), `"evt-5"`):
			dead["dead-str"] = d
		case strings.Contains(reason, "batch mode"):
			dead["batch"] = d
		case strings.Contains(reason, "cloudEvents_id missing"):
			dead["no-id"] = d
		case strings.Contains(reason, `CloudEvents attribute "id" differs between its cloudEvents_ and cloudEvents: headers`):
			dead["twin-id"] = d
		case strings.Contains(reason, "no envelope profile of the queue fits"):
			dead["lily"] = d
		default:
			t.Errorf("unexpected DLQ copy: headers %v, body %q", d.Headers, d.Body)
		}
	}
	if len(dead) != 6 {
		t.Fatalf("DLQ copies %v, want dead-bin, dead-str, batch, no-id, twin-id and lily", slices.Sorted(maps.Keys(dead)))
	}
	// The handler's failures keep the producer's envelope: every header it
	// sent, its content type and its body, byte for byte.
	for _, name := range []string{"dead-bin", "dead-str"} {
		d, p := dead[name], published[name]
		if string(d.Body) != string(p.Body) || d.ContentType != p.ContentType {
			t.Errorf("%s: DLQ copy %q as %s, published %q as %s", name, d.Body, d.ContentType, p.Body, p.ContentType)
		}
		for k, v := range p.Headers {
			if d.Headers[k] != v {
				t.Errorf("%s: header %s = %v in the DLQ copy, published %v", name, k, d.Headers[k], v)
			}
		}
		if d.Headers["x-lily-failure-kind"] != "permanent" {
			t.Errorf("%s: failure kind %v", name, d.Headers["x-lily-failure-kind"])
		}
		// And say what the guard read of it, which its AMQP type and
		// x-lily-version do not: lilydlq lists and chooses it by them.
		if d.Type != "" || d.Headers[envelope.HeaderFailureType] != "com.acme.payment.authorized" || d.Headers[envelope.HeaderFailureVersion] != int64(1) {
			t.Errorf("%s: type %q, %s %#v, %s %#v; want the type and version the guard read", name, d.Type,
				envelope.HeaderFailureType, d.Headers[envelope.HeaderFailureType], envelope.HeaderFailureVersion, d.Headers[envelope.HeaderFailureVersion])
		}
	}
	// A poison copy's envelope was not read: it says nothing of one.
	for _, name := range []string{"batch", "no-id", "twin-id", "lily"} {
		for _, k := range []string{envelope.HeaderFailureType, envelope.HeaderFailureVersion} {
			if v, ok := dead[name].Headers[k]; ok {
				t.Errorf("%s: the poison copy carries %s %#v", name, k, v)
			}
		}
	}
	// A poison copy keeps, sanitized, what says whose it is.
	if d := dead["no-id"]; d.Headers["cloudEvents_source"] != paymentsSource || d.Headers["cloudEvents_type"] != "com.acme.payment.authorized.v1" {
		t.Errorf("poison copy headers %v: want the event's source and type", d.Headers)
	}
	if d := dead["twin-id"]; d.Headers["cloudEvents_id"] != "evt-6" || d.Headers["cloudEvents:id"] != "evt-7" {
		t.Errorf("poison copy headers %v: want both ids", d.Headers)
	}

	// Re-driven as they are, the copies read as the originals did.
	h.mended = true
	h.seen = map[string][]seen{}
	h.mu.Unlock()
	var again []amqp.Publishing
	for _, name := range []string{"dead-bin", "dead-str"} {
		d := dead[name]
		again = append(again, amqp.Publishing{Headers: d.Headers, ContentType: d.ContentType, DeliveryMode: amqp.Persistent, Body: d.Body})
	}
	publish(t, q.Name, again...)
	r2, c2 := prepareRoutes(t, q, fixture.LilytestForeignRoutes(h))
	r2.launch(c2)
	for _, rec := range r2.await(2) {
		if rec.Path != runtime.PathAcked {
			t.Errorf("re-driven copy %+v not acked", rec)
		}
	}
	r2.stop()
	h.mu.Lock()
	for key, w := range map[string]seen{
		"dead-binary":     {typ: "com.acme.payment.authorized", id: "evt-4", body: `{"payment_id":"dead-binary"}`, subject: "order-evt-4", version: 1, attempt: 1},
		"dead-structured": {typ: "com.acme.payment.authorized", id: "evt-5", body: `{"payment_id":"dead-structured"}`, subject: "order-evt-5", version: 1, attempt: 1},
	} {
		if got := h.seen[key]; len(got) != 1 || got[0] != w {
			t.Errorf("re-driven %s: handler saw %+v, want %+v", key, got, w)
		}
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// Lily's own producers of those messages write them in their envelopes: a
// CloudEvent in binary content mode and a Spring AMQP message, read as the
// other teams' producers' are, keyed by the event's source and id.
func TestBrokerForeignEnvelopesFromLilysProducers(t *testing.T) {
	t.Parallel()
	q := foreignSpec(t)
	declareTopology(t, q)
	event, err := fixture.NewPaymentAuthorizedV2("evt-lily", &fixture.PaymentAuthorizedV2{PaymentID: "lily-event", AmountCents: 300})
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := fixture.NewOrderShippedV1("ship-lily", &fixture.OrderShippedV1{OrderID: "lily-shipped"})
	if err != nil {
		t.Fatal(err)
	}
	publish(t, q.Name, event, shipped)
	h := &foreignHandler{seen: map[string][]seen{}}
	r, c := prepareRoutes(t, q, fixture.LilytestForeignRoutes(h))
	r.launch(c)
	keys := map[string]bool{}
	for _, rec := range r.await(2) {
		keys[rec.MessageID] = true
		if rec.Path != runtime.PathAcked {
			t.Errorf("record %+v: want acked", rec)
		}
	}
	r.stop()
	if !keys[paymentsSource+" evt-lily"] || !keys["headers com.acme.shipping.OrderShipped ship-lily"] {
		t.Errorf("keys %v: want the event's source and id, and the Spring message's type and id", keys)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for key, w := range map[string]seen{
		"lily-event":   {typ: "com.acme.payment.authorized", id: "evt-lily", body: `{"payment_id":"lily-event","amount_cents":300}`, version: 2, attempt: 1},
		"lily-shipped": {typ: "com.acme.shipping.OrderShipped", id: "ship-lily", body: `{"orderId":"lily-shipped"}`, version: 1, attempt: 1},
	} {
		if got := h.seen[key]; len(got) != 1 || got[0] != w {
			t.Errorf("%s: handler saw %+v, want %+v", key, got, w)
		}
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// Messages of a producer that sends no ids cannot be told apart: the
// consumer keeps no memory of them, so copies handled at once neither wait
// for each other nor go back to the queue.
func TestBrokerMessagesWithoutIDsRunSideBySide(t *testing.T) {
	t.Parallel()
	q := brokerSpec(t, heldHandler, func(q *runtime.QueueSpec) {
		q.Concurrency = 8
		q.Messages = []envelope.Message{{Type: "audit.noted", Inbox: envelope.InboxNone,
			Profile: envelope.Profile{Kind: envelope.Headers, TypeHeader: "event", NoID: true, Version: envelope.Version{Fixed: 1}}}}
	})
	declareTopology(t, q)
	const n = 6
	var msgs []amqp.Publishing
	for range n {
		msgs = append(msgs, amqp.Publishing{ContentType: "application/json", Headers: amqp.Table{"event": "audit.noted"}, Body: []byte(`{}`)})
	}
	publish(t, q.Name, msgs...)
	var mu sync.Mutex
	running, most := 0, 0
	// Each handler waits until two run at once: copies kept apart would
	// leave the first waiting alone, and most at 1.
	two := make(chan struct{})
	bothRun := sync.OnceFunc(func() { close(two) })
	routes := runtime.Routes{{Type: "audit.noted", Version: 1, ContentType: "application/json"}: func(ctx context.Context, d runtime.RawDelivery) error {
		mu.Lock()
		running++
		most = max(most, running)
		if running == 2 {
			bothRun()
		}
		mu.Unlock()
		select {
		case <-two:
		case <-time.After(30 * time.Second):
		}
		mu.Lock()
		running--
		mu.Unlock()
		if d.MessageID() != "" {
			return runtime.Permanent(errors.New("an id where the producer sends none"))
		}
		return nil
	}}
	r, c := prepareRoutes(t, q, routes)
	r.launch(c)
	recs := r.await(n)
	r.stop()
	for _, rec := range recs {
		if rec.Path != runtime.PathAcked || rec.MessageID != "" {
			t.Errorf("record %+v: want acked, without an id", rec)
		}
	}
	if len(recs) != n {
		t.Errorf("%d records, want %d (none requeued)", len(recs), n)
	}
	if most < 2 {
		t.Errorf("at most %d handled at once: copies waited for each other", most)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// A CloudEvents producer in another language, as its team wrote it: the
// CloudEvents SDK for Node.js builds the events and amqplib publishes them,
// one in structured and one in binary content mode (testdata/
// cloudevents-producer). The consumer reads both, typed, each once.
func TestBrokerCloudEventsFromNode(t *testing.T) {
	brokerURL(t) // under -short, skipped here, before npm is looked for
	t.Parallel()
	producer := filepath.Join("testdata", "cloudevents-producer")
	modules := npmtest.Install(t, producer, "amqplib")
	q := foreignSpec(t)
	declareTopology(t, q)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join(producer, "publish.cjs"), brokerURL(t), q.Name)
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the Node.js producer: %v\n%s", err, out)
	}
	h := &foreignHandler{seen: map[string][]seen{}}
	r, c := prepareRoutes(t, q, fixture.LilytestForeignRoutes(h))
	r.launch(c)
	for _, rec := range r.await(2) {
		if rec.Path != runtime.PathAcked || !strings.HasPrefix(rec.MessageID, "https://payments.acme.example/node node-") {
			t.Errorf("record %+v: want acked, keyed by the event's source and id", rec)
		}
	}
	r.stop()
	h.mu.Lock()
	defer h.mu.Unlock()
	want := map[string]seen{
		"node-structured": {typ: "com.acme.payment.authorized", id: "node-1", body: `{"payment_id":"node-structured","amount_cents":250}`, subject: "order-node-1", version: 2, attempt: 1},
		"node-binary":     {typ: "com.acme.payment.authorized", id: "node-2", body: `{"payment_id":"node-binary"}`, subject: "order-node-2", version: 1, attempt: 1},
	}
	for key, w := range want {
		if got := h.seen[key]; len(got) != 1 || got[0] != w {
			t.Errorf("%s: handler saw %+v, want %+v", key, got, w)
		}
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}

// A generated producer refuses a message id no consumer would read, in
// every envelope that carries ids, rather than send a message its consumer
// takes for poison.
func TestGeneratedProducersRefuseAnIDNoConsumerReads(t *testing.T) {
	producers := map[string]func(id string) error{
		"Lily's": func(id string) error {
			_, err := fixture.NewOrderPlacedV1(id, &fixture.OrderPlacedV1{OrderID: "o-1"})
			return err
		},
		"a CloudEvent": func(id string) error {
			_, err := fixture.NewPaymentAuthorizedV2(id, &fixture.PaymentAuthorizedV2{PaymentID: "p-1", AmountCents: 1})
			return err
		},
		"a header-mapped one": func(id string) error {
			_, err := fixture.NewOrderShippedV1(id, &fixture.OrderShippedV1{OrderID: "o-1"})
			return err
		},
	}
	for name, produce := range producers {
		for _, id := range []string{"", "order 42", "sipariş-7", "a\x1b[2J", strings.Repeat("x", envelope.MaxIDBytes+1)} {
			if err := produce(id); err == nil || err.Error() != envelope.CheckID(id).Error() {
				t.Errorf("%s producer, id %q: %v, want envelope.CheckID's error", name, id, err)
			}
		}
		if err := produce(strings.Repeat("x", envelope.MaxIDBytes)); err != nil {
			t.Errorf("%s producer, an id at the bound: %v", name, err)
		}
	}
}
