package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/runtime"
)

// publishWindow is how many publishes each publisher keeps unconfirmed: as
// many senders share it, each waiting for its own confirm.
const publishWindow = 64

// publisher is one publisher under test: send publishes msg to queue and
// waits for the broker's confirm.
type publisher struct {
	send  func(ctx context.Context, queue string, msg amqp.Publishing) error
	close func()
}

// publishers open each publisher under test on url.
var publishers = map[string]func(url string) (publisher, error){
	// plain: amqp091-go alone, one confirm-mode channel shared by the
	// senders, each publish mandatory and waited for.
	"plain": func(url string) (publisher, error) {
		conn, err := amqp.Dial(url)
		if err != nil {
			return publisher{}, err
		}
		ch, err := conn.Channel()
		if err == nil {
			err = ch.Confirm(false)
		}
		if err != nil {
			conn.Close()
			return publisher{}, err
		}
		return publisher{
			send: func(ctx context.Context, queue string, msg amqp.Publishing) error {
				dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, msg)
				if err != nil {
					return err
				}
				if !dc.Wait() {
					return errors.New("nacked")
				}
				return nil
			},
			close: func() { conn.Close() },
		}, nil
	},
	"lily": func(url string) (publisher, error) {
		p, err := runtime.NewPublisher(runtime.Config{URLs: []string{url}, Logger: slog.New(slog.DiscardHandler)}, publishWindow)
		if err != nil {
			return publisher{}, err
		}
		return publisher{
			send: func(ctx context.Context, queue string, msg amqp.Publishing) error {
				return p.Send(ctx, runtime.Message{RoutingKey: queue, Publishing: msg})
			},
			close: p.Close,
		}, nil
	},
	// watermill: its AMQP publisher with confirms and a pool of channels
	// (without one it opens a channel per publish), mandatory, as the retry
	// path's PoisonQueue publisher of the broker runs.
	"watermill": func(url string) (publisher, error) {
		cfg := wamqp.NewDurableQueueConfig(url)
		cfg.Marshaler = lilyMarshaler{}
		cfg.Publish.ConfirmDelivery = true
		cfg.Publish.Mandatory = true
		cfg.Publish.ChannelPoolSize = publishWindow
		pub, err := wamqp.NewPublisher(cfg, watermill.NopLogger{})
		if err != nil {
			return publisher{}, err
		}
		return publisher{
			send: func(_ context.Context, queue string, msg amqp.Publishing) error {
				m := message.NewMessage(msg.MessageId, msg.Body)
				for k, v := range msg.Headers {
					if s, ok := v.(string); ok {
						m.Metadata[k] = s
					}
				}
				return pub.Publish(queue, m)
			},
			close: func() { _ = pub.Close() },
		}, nil
	},
}

// BenchmarkPublish is each publisher's cost per message: publishWindow
// senders share one publisher and publish the 1 KiB message b.N times in
// all, each waiting for its confirm. to=replay publishes to the replay
// (replay_test.go), which confirms each publish as soon as its body has
// arrived: the publisher's own cost, without a broker. to=broker publishes to
// a durable queue of the run's own on the RabbitMQ of LILY_AMQP_URL (the
// machine's by default): the cross-check, bounded by the broker. cpu-ns/op is
// the publishing process's CPU time per message.
func BenchmarkPublish(b *testing.B) {
	tpl, err := newTemplate()
	if err != nil {
		b.Fatal(err)
	}
	for _, to := range []string{"replay", "broker"} {
		for _, name := range []string{"plain", "lily", "watermill"} {
			b.Run("to="+to+"/publisher="+name, func(b *testing.B) {
				url, queue, check := publishTarget(b, to)
				pub, err := publishers[name](url)
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
				defer cancel()
				var next atomic.Int64
				failed := make(chan error, publishWindow)
				b.ReportAllocs()
				b.ResetTimer()
				cpu := selfCPU()
				var senders sync.WaitGroup
				for range publishWindow {
					senders.Go(func() {
						for seq := next.Add(1); seq <= int64(b.N); seq = next.Add(1) {
							msg := tpl.msg
							msg.MessageId = "p-" + strconv.FormatInt(seq, 10)
							if err := pub.send(ctx, queue, msg); err != nil {
								failed <- err
								return
							}
						}
					})
				}
				senders.Wait()
				cpu = selfCPU() - cpu
				b.StopTimer()
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
				pub.close()
				select {
				case err := <-failed:
					b.Fatal(err)
				default:
				}
				check(b.N)
			})
		}
	}
}

// publishTarget is where a publish run sends, "replay" or "broker": the URL,
// the queue, and a check that the n publishes arrived.
func publishTarget(b *testing.B, to string) (url, queue string, check func(n int)) {
	if to == "replay" {
		url, end := startReplay(b, 0)
		return url, "replay", func(n int) {
			if err := end().want(0, int64(n)); err != nil {
				b.Fatal(err)
			}
		}
	}
	url = envOr("LILY_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
	queue = fmt.Sprintf("lily.bench.publish.%d", time.Now().UnixNano())
	err := faults.OnChannel(url, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(queue, true, false, false, false, nil)
		return err
	})
	if err != nil {
		b.Fatalf("RabbitMQ at %s (set LILY_AMQP_URL to another): %v", url, err)
	}
	b.Cleanup(func() {
		if err := faults.OnChannel(url, func(ch *amqp.Channel) error {
			_, err := ch.QueueDelete(queue, false, false, false)
			return err
		}); err != nil {
			b.Error(err)
		}
	})
	return url, queue, func(n int) {
		if got, err := depth(url, queue); err != nil || got != n {
			b.Fatalf("%s holds %d messages (%v), want %d", queue, got, err, n)
		}
	}
}
