// Command orders is Lily's example service: a consumer of the "orders" queue,
// typed from orders.lily.yaml, which is bound to the shop team's topic
// exchange shop.events (it must exist: the demo declares it, as the shop team
// would). Run it with -demo to publish one message for each of its scenarios
// (acked, retried, dead-lettered by Lily or by the broker) to that exchange
// and print where each one went, in orders and in the
// quorum queue orders.audit bound beside it, and why; then to consume two
// partners' messages as their producers publish them (CloudEvents, in binary
// and structured mode, and Spring AMQP) from orders.partners; and with -clean
// to delete the queues and the exchange the demo declared, and the PostgreSQL
// schema of its checkout.
package main

// Inside Lily's own module. A service makes lilygen a tool of its module and
// runs go tool lilygen (README.md, "Use Lily in your service"): go run
// would need lilygen's own dependencies in the service's go.sum.
//
//go:generate go run github.com/lily-mq/lily/cmd/lilygen generate orders.lily.yaml

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/lily-mq/lily/examples/orders/ordersmsg"
	"github.com/lily-mq/lily/runtime"
)

// orders is the service's handler: the one piece of code a Lily user writes.
type orders struct {
	log *slog.Logger
}

// Version 1 orders predate tenants: they belong to the default one.
func (o orders) HandleOrderPlacedV1(_ context.Context, msg *ordersmsg.OrderPlacedV1, d runtime.RawDelivery) error {
	return o.place("default", msg.OrderID, msg.AmountCents, d)
}

// The tenant of a version 2 order comes from its typed x-tenant header.
func (o orders) HandleOrderPlacedV2(_ context.Context, msg *ordersmsg.OrderPlacedV2, d runtime.RawDelivery) error {
	return o.place(msg.Headers.XTenant, msg.OrderID, msg.AmountCents, d)
}

// place stands in for real work. Two order ids misbehave on purpose, so the
// demo can show the retry and the DLQ.
func (o orders) place(tenant, id string, cents int64, d runtime.RawDelivery) error {
	switch {
	case id == "order-flaky" && d.Attempt() == 1:
		return runtime.Retryable(errors.New("payment service unavailable"))
	case id == "order-refused":
		return runtime.Permanent(errors.New("customer account closed"))
	}
	o.log.Info("order placed", "tenant", tenant, "order_id", id, "amount_cents", cents, "attempt", d.Attempt())
	return nil
}

// options are the command's flags.
type options struct {
	demo, clean      *bool
	url, probes, dsn *string
}

// defineFlags defines the command's flags on fs.
func defineFlags(fs *flag.FlagSet) options {
	return options{
		demo:   fs.Bool("demo", false, "publish one message per scenario (acked, retried, dead-lettered, broker-dead-lettered), show where each went, then stop"),
		clean:  fs.Bool("clean", false, "delete the demo's queues (with their retry buckets and DLQs, and what they hold), the shop team's exchange and the PostgreSQL schema "+demoSchema+" (the checkout's orders and outbox), then stop"),
		url:    fs.String("url", envOr("LILY_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), "RabbitMQ URL"),
		probes: fs.String("probes", envOr("LILY_PROBES_ADDR", ":8081"), "address serving /livez and /readyz for Kubernetes' probes (empty: none)"),
		dsn:    fs.String("pg", envOr("LILY_PG_DSN", "host=127.0.0.1 port=5432 user=postgres dbname=test sslmode=disable"), "PostgreSQL connection string of the demo's checkout (its orders and outbox, in schema "+demoSchema+")"),
	}
}

func main() {
	opts := defineFlags(flag.CommandLine)
	flag.Parse()

	switch {
	case *opts.demo && *opts.clean:
		fmt.Fprintln(os.Stderr, "orders: -demo and -clean do not go together")
		os.Exit(2)
	case *opts.demo:
		if err := runDemo(*opts.url, *opts.dsn); err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
			os.Exit(1)
		}
		return
	case *opts.clean:
		if err := cleanUp(*opts.url, *opts.dsn, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "clean:", err)
			os.Exit(1)
		}
		return
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	consumer, err := ordersmsg.NewOrdersConsumer(orders{log: log}, runtime.Config{URLs: []string{*opts.url}, Logger: log})
	if err != nil {
		log.Error("configure", "error", err)
		os.Exit(1)
	}
	if *opts.probes != "" {
		health := runtime.HealthHandler(consumer)
		mux := http.NewServeMux()
		mux.Handle("GET /livez", health)
		mux.Handle("GET /readyz", health)
		server := &http.Server{Addr: *opts.probes, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := server.ListenAndServe(); err != nil {
				log.Error("probes", "error", err)
			}
		}()
	}
	// SIGINT or SIGTERM stops intake and lets in-flight deliveries settle; a
	// second signal forces. The report goes to stdout as JSON, its summary to
	// the log.
	report, err := runtime.Serve(context.Background(), consumer)
	if report != nil {
		log.Info("shutdown report", "summary", report.String())
		_ = json.NewEncoder(os.Stdout).Encode(report)
	}
	if err != nil {
		log.Error("run", "error", err)
		os.Exit(1)
	}
}

func envOr(key, fallback string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return fallback
}
