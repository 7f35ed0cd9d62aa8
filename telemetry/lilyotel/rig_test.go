package lilyotel_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	amqp "github.com/rabbitmq/amqp091-go"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/telemetry/lilyotel"
	"github.com/lily-mq/lily/topology"

	"github.com/lily-mq/lily/internal/services"
	// Every test package takes -update, so that `go test ./... -update` runs.
	_ "github.com/lily-mq/lily/internal/update"
)

// wireType is the one message the test queues consume.
const wireType = "lilyotel.test"

// order is the test message's body: what its handler is to do.
type order struct {
	Do string `json:"do"` // "ok", "fail-once" (retryable at attempt 1), "refuse" (permanent)
}

// retryDelay is the test queues' one retry bucket.
const retryDelay = 50 * time.Millisecond

// rig is one test's consumer of a queue of its own, traced and measured by
// lilyotel into an in-memory span recorder, a manual metric reader and a
// Prometheus registry served over HTTP.
type rig struct {
	t       *testing.T
	url     string
	q       runtime.QueueSpec
	spans   *tracetest.SpanRecorder
	tp      *sdktrace.TracerProvider
	reader  *metric.ManualReader
	metrics string // the Prometheus scrape's URL
	tel     *lilyotel.Telemetry
	// mended, once set, makes "refuse" messages succeed: a re-drive's.
	mended sync.Map
}

// newRig declares a queue named after the test (with a random suffix), its
// retry bucket and DLQ, deleted when the test ends.
func newRig(t *testing.T) *rig {
	t.Helper()
	url := services.RabbitMQ(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "lilyotel." + strings.ReplaceAll(t.Name(), "/", ".") + "." + hex.EncodeToString(b[:])
	q := runtime.QueueSpec{
		Name: name,
		Topology: topology.Queue{
			Type:            "classic",
			DeadLetterQueue: name + ".dlq",
			RetryDelays:     []time.Duration{retryDelay},
		},
		Prefetch:       8,
		Concurrency:    4,
		MaxAttempts:    2,
		MaxBodyBytes:   1024,
		HandlerTimeout: 10 * time.Second,
		Messages:       []envelope.Message{{Type: wireType, Inbox: envelope.InboxOptional}},
	}
	r := &rig{t: t, url: url, q: q, spans: tracetest.NewSpanRecorder(), reader: metric.NewManualReader()}
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		t.Fatal(err)
	}
	mp := metric.NewMeterProvider(metric.WithReader(r.reader), metric.WithReader(exporter))
	srv := httptest.NewServer(promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	r.metrics = srv.URL + "/metrics"
	t.Cleanup(func() {
		srv.Close()
		_ = mp.Shutdown(context.Background())
		_ = r.tp.Shutdown(context.Background())
	})
	if r.tel, err = lilyotel.New(lilyotel.Options{TracerProvider: r.tp, MeterProvider: mp}); err != nil {
		t.Fatal(err)
	}
	conn := r.dial()
	if err := runtime.DeclareTopology(conn, q); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ch, err := r.dial().Channel()
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		for _, n := range []string{q.Name, r.bucket(), q.Topology.DeadLetterQueue} {
			_, _ = ch.QueueDelete(n, false, false, false)
		}
	})
	return r
}

func (r *rig) bucket() string { return r.q.Name + ".retry." + retryDelay.String() }

func (r *rig) dial() *amqp.Connection {
	r.t.Helper()
	conn, err := amqp.Dial(r.url)
	if err != nil {
		r.t.Fatalf("RabbitMQ is not reachable at %s: %v", r.url, err)
	}
	r.t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// handle is the queue's route: it does what the message's body says.
func (r *rig) handle(_ context.Context, d runtime.RawDelivery) error {
	var o order
	if err := json.Unmarshal(d.Body(), &o); err != nil {
		return runtime.Permanent(err)
	}
	switch {
	case o.Do == "fail-once" && d.Attempt() == 1:
		return errors.New("failing once")
	case o.Do == "refuse":
		if _, ok := r.mended.Load(d.MessageID()); !ok {
			return runtime.Permanent(errors.New("refused"))
		}
	}
	return nil
}

// start runs a consumer of the rig's queue with lilyotel (and inbox, when
// not nil) until the test ends.
func (r *rig) start(inbox runtime.Inbox) {
	r.t.Helper()
	routes := runtime.Routes{{Type: wireType, Version: 1, ContentType: "application/json"}: r.handle}
	cfg := runtime.Config{
		URLs: []string{r.url}, Telemetry: r.tel, Inbox: inbox,
		Logger:        slog.New(slog.DiscardHandler),
		ShutdownGrace: 5 * time.Second, ForceWindow: time.Second,
	}
	c, err := runtime.NewConsumer(r.q, routes, cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := c.Run(ctx); err != nil {
			r.t.Errorf("Run: %v", err)
		}
	}()
	r.t.Cleanup(func() {
		cancel()
		<-done
	})
}

// message is version 1 of the test message, as a generated producer builds it.
func message(id, do string) amqp.Publishing {
	body, _ := json.Marshal(order{Do: do})
	return runtime.NewPublishing(envelope.Message{Type: wireType}, 1, id, body)
}

// publish publishes msgs to the rig's queue through the default exchange,
// each confirmed.
func (r *rig) publish(msgs ...amqp.Publishing) {
	r.t.Helper()
	r.publishTo(r.q.Name, msgs...)
}

func (r *rig) publishTo(queue string, msgs ...amqp.Publishing) {
	r.t.Helper()
	ch, err := r.dial().Channel()
	if err != nil {
		r.t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		r.t.Fatal(err)
	}
	for _, m := range msgs {
		dc, err := ch.PublishWithDeferredConfirm("", queue, true, false, m)
		if err != nil {
			r.t.Fatalf("publish: %v", err)
		}
		if !dc.Wait() {
			r.t.Fatalf("publish to %s not confirmed", queue)
		}
	}
}

// patience bounds every wait for the broker and the consumer.
const patience = 60 * time.Second

// await polls until ok holds of the ended spans, and returns them.
func (r *rig) await(what string, ok func([]sdktrace.ReadOnlySpan) bool) []sdktrace.ReadOnlySpan {
	r.t.Helper()
	for deadline := time.Now().Add(patience); ; time.Sleep(20 * time.Millisecond) {
		spans := r.spans.Ended()
		if ok(spans) {
			return spans
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("no %s within %s; %d spans ended:\n%s", what, patience, len(spans), describe(spans))
		}
	}
}

// awaitProcessed waits until n process spans have ended (every span of a
// journey ends before its process span does).
func (r *rig) awaitProcessed(n int) []sdktrace.ReadOnlySpan {
	r.t.Helper()
	return r.await("process spans", func(spans []sdktrace.ReadOnlySpan) bool { return len(named(spans, "process "+r.q.Name)) >= n })
}

// collect reads the metrics so far.
func (r *rig) collect() metricdata.ResourceMetrics {
	r.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		r.t.Fatal(err)
	}
	return rm
}

// awaitMetric polls until ok holds of the metrics.
func (r *rig) awaitMetric(what string, ok func(metricdata.ResourceMetrics) bool) metricdata.ResourceMetrics {
	r.t.Helper()
	for deadline := time.Now().Add(patience); ; time.Sleep(20 * time.Millisecond) {
		rm := r.collect()
		if ok(rm) {
			return rm
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: not within %s", what, patience)
		}
	}
}

// id is a message id no other run used.
func id(name string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return name + "-" + hex.EncodeToString(b[:])
}
