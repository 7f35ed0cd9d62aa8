package main

import (
	"context"
	"errors"
	"log/slog"
	goruntime "runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/examples/orders/ordersmsg"
	"github.com/lily-mq/lily/runtime"
)

// Many queues in one process: manyQueues queues, each with a prefetch of
// manyPrefetch and manyConcurrency deliveries handled at once.
const (
	manyQueues      = 100
	manyPrefetch    = 16
	manyConcurrency = 4
	manyRate        = 5000 // messages per second, over all the queues
)

// manyConsumers start consuming queues on url, settling into t, and return
// a function that stops them all.
var manyConsumers = map[string]func(ctx context.Context, url string, queues []string, t *tracker) (func() error, error){
	// plain: amqp091-go, one connection, a channel per queue, each with
	// manyConcurrency goroutines that ACK what they get.
	"plain": func(_ context.Context, url string, queues []string, t *tracker) (func() error, error) {
		conn, err := amqp.Dial(url)
		if err != nil {
			return nil, err
		}
		var workers sync.WaitGroup
		for _, q := range queues {
			ch, err := conn.Channel()
			if err == nil {
				err = ch.Qos(manyPrefetch, 0, false)
			}
			var deliveries <-chan amqp.Delivery
			if err == nil {
				deliveries, err = ch.Consume(q, "", false, false, false, false, nil)
			}
			if err != nil {
				conn.Close()
				return nil, err
			}
			for range manyConcurrency {
				workers.Go(func() {
					for d := range deliveries {
						if _, err := ordersmsg.ExtractOrderPlacedV2(d.Body); err == nil && d.Ack(false) == nil {
							t.settle(d.MessageId)
						}
					}
				})
			}
		}
		return func() error {
			err := conn.Close()
			workers.Wait()
			return err
		}, nil
	},
	// lily: a runtime.Consumer per queue, run together by runtime.Serve,
	// each on connections of its own.
	"lily": func(ctx context.Context, url string, queues []string, t *tracker) (func() error, error) {
		return serveMany(ctx, url, queues, t, nil)
	},
	// lily-shared: the same, each consumer naming one runtime.Publisher, so
	// that they consume on one connection.
	"lily-shared": func(ctx context.Context, url string, queues []string, t *tracker) (func() error, error) {
		pub, err := runtime.NewPublisher(runtime.Config{URLs: []string{url}}, 0)
		if err != nil {
			return nil, err
		}
		stop, err := serveMany(ctx, url, queues, t, pub)
		if err != nil {
			pub.Close()
			return nil, err
		}
		return func() error {
			defer pub.Close()
			return stop()
		}, nil
	},
	// watermill: one subscriber (one connection), a router handler per
	// queue, each handling one message at a time as Watermill's handlers do.
	"watermill": func(ctx context.Context, url string, queues []string, t *tracker) (func() error, error) {
		cfg := wamqp.NewDurableQueueConfig(url)
		cfg.Marshaler = lilyMarshaler{}
		cfg.Consume.Qos.PrefetchCount = manyPrefetch
		sub, err := wamqp.NewSubscriber(cfg, watermill.NopLogger{})
		if err != nil {
			return nil, err
		}
		router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
		if err != nil {
			return nil, err
		}
		for _, q := range queues {
			router.AddConsumerHandler("many-"+q, q, sub, func(msg *message.Message) error {
				if _, err := ordersmsg.ExtractOrderPlacedV2(msg.Payload); err != nil {
					return err
				}
				t.settle(msg.UUID)
				return nil
			})
		}
		ctx, stop := context.WithCancel(ctx)
		ran := make(chan error, 1)
		go func() { ran <- router.Run(ctx) }()
		return func() error {
			stop()
			err := <-ran
			return errors.Join(err, router.Close(), sub.Close())
		}, nil
	},
}

// BenchmarkManyQueues is one process consuming manyQueues queues of the
// replay: idle first, then b.N deliveries at manyRate per second spread over
// them (run with -benchtime 20000x). It reports, idle, the goroutines and
// the resident memory the consumers added per queue, and the connections and
// channels they opened; under the load, the process's CPU time per message.
func BenchmarkManyQueues(b *testing.B) {
	queues := make([]string, manyQueues)
	for i := range queues {
		queues[i] = "many-" + strconv.Itoa(i)
	}
	for _, name := range []string{"plain", "lily", "lily-shared", "watermill"} {
		b.Run("consumer="+name, func(b *testing.B) {
			replay := startPacedReplay(b, b.N, manyRate)
			goruntime.GC()
			goroutines0, rss0 := goruntime.NumGoroutine(), procStatus("VmRSS")
			t := newTracker(b.N)
			ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
			defer cancel()
			stop, err := manyConsumers[name](ctx, replay.url, queues, t)
			if err != nil {
				b.Fatal(err)
			}
			conns, chans := replay.waitOpen(manyQueues)
			// Idle: what the consumers hold once every queue is consumed.
			time.Sleep(time.Second)
			goruntime.GC()
			goroutines, rss := goruntime.NumGoroutine()-goroutines0, procStatus("VmRSS")-rss0
			b.ResetTimer() // which drops metrics reported before it
			cpu := selfCPU()
			replay.start()
			select {
			case <-t.done:
			case <-ctx.Done():
				b.Fatalf("%d of %d settled", t.settled.Load(), b.N)
			}
			cpu = selfCPU() - cpu
			b.StopTimer()
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(goroutines)/manyQueues, "idle-goroutines/queue")
			b.ReportMetric(rss*1024/manyQueues, "idle-KiB/queue")
			b.ReportMetric(float64(conns), "connections")
			b.ReportMetric(float64(chans), "channels")
			if err := stop(); err != nil {
				b.Fatal(err)
			}
			if err := replay.end().want(int64(b.N), 0); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// serveMany runs a runtime.Consumer per queue under runtime.Serve, each
// naming pub when it is not nil.
func serveMany(ctx context.Context, url string, queues []string, t *tracker, pub *runtime.Publisher) (func() error, error) {
	services := make([]runtime.Service, 0, len(queues))
	for _, q := range queues {
		c, err := runtime.NewConsumer(benchSpec(q, manyPrefetch, manyConcurrency), ordersmsg.OrdersRoutes(benchHandler{t: t}), runtime.Config{
			URLs:      []string{url},
			Publisher: pub,
			Logger:    slog.New(slog.DiscardHandler),
			Observe: func(rec runtime.Record) {
				if rec.Path == runtime.PathAcked {
					t.settle(rec.MessageID)
				}
			},
		})
		if err != nil {
			return nil, err
		}
		services = append(services, c)
	}
	ctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() {
		_, err := runtime.Serve(ctx, services...)
		served <- err
	}()
	return func() error {
		stop()
		return <-served
	}, nil
}
