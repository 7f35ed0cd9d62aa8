package runtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// DefaultURL is the broker a Config without URL connects to.
const DefaultURL = "amqp://guest:guest@127.0.0.1:5672/"

// Config is how one consumer reaches the broker and reports what it does.
type Config struct {
	// URL of the broker; DefaultURL when empty.
	URL string
	// Logger receives one structured event per delivery stage; slog.Default() when nil.
	Logger *slog.Logger
	// Limits bound the envelope's metadata; zero fields take DefaultLimits.
	Limits Limits
	// Observe, when set, receives each delivery's record as its journey ends,
	// on the delivery's goroutine: keep it quick.
	Observe func(Record)
	// ShutdownGrace is the cooperative window after intake stops, in which
	// in-flight work runs and settles normally; DefaultShutdownGrace when zero.
	ShutdownGrace time.Duration
	// ForceWindow follows the grace: handlers' contexts are cancelled, and work
	// that still completes settles; then the consumer closes. DefaultForceWindow when zero.
	ForceWindow time.Duration
}

// Shutdown windows used when a Config leaves them zero.
const (
	DefaultShutdownGrace = 30 * time.Second
	DefaultForceWindow   = 5 * time.Second
)

// Consumer consumes one queue and settles every delivery by the decision table.
type Consumer struct {
	spec   QueueSpec
	routes Routes
	cfg    Config
}

// NewConsumer checks the queue's spec and dispatch table and returns a consumer
// ready to Run. Generated constructors call it.
func NewConsumer(spec QueueSpec, routes Routes, cfg Config) (*Consumer, error) {
	var errs []error
	if err := spec.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(routes) == 0 {
		errs = append(errs, fmt.Errorf("queue %s: the dispatch table is empty", spec.Name))
	}
	for key, route := range routes {
		if route == nil {
			errs = append(errs, fmt.Errorf("queue %s: route %+v has no handler", spec.Name, key))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.URL == "" {
		cfg.URL = DefaultURL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Limits = cfg.Limits.withDefaults()
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = DefaultShutdownGrace
	}
	if cfg.ForceWindow <= 0 {
		cfg.ForceWindow = DefaultForceWindow
	}
	return &Consumer{spec: spec, routes: routes, cfg: cfg}, nil
}

// run is the state of one Run: one connection, one consumer channel generation.
type run struct {
	gen      *generation
	handoff  *handoffPublisher
	requeues *requeueMemory
	report   *reportBuilder
	// work is the handlers' parent context, cancelled at the force notification.
	work  context.Context
	force context.CancelFunc
	// closeErr receives the consumer channel's close reason (nil when we closed it).
	closeErr chan *amqp.Error
	// stopping is closed when intake stops; requeue pauses end early then.
	stopping   chan struct{}
	handlers   atomic.Int64   // handler goroutines still running
	deliveries sync.WaitGroup // delivery goroutines
}

// pause waits d, or less once the consumer is stopping: no redelivery will
// reach this consumer then, so there is no loop to pace.
func (r *run) pause(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.stopping:
	}
}

// Run connects, declares the queue's topology and consumes until ctx is done,
// then shuts down gracefully and returns the report. It returns an error when
// the broker cannot be reached or the consumer channel closes under it; the
// report is returned in that case too once consuming had begun.
func (c *Consumer) Run(ctx context.Context) (*Report, error) {
	conn, err := c.dial("consume")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	// Handoffs publish on a connection of their own: when the broker blocks
	// publishers (a resource alarm), ACKs on the consuming connection still flow.
	pubConn, err := c.dial("handoff")
	if err != nil {
		return nil, err
	}
	defer pubConn.Close()
	if err := c.declare(conn); err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("lily: open consumer channel: %w", err)
	}
	if err := ch.Qos(c.spec.Prefetch, 0, false); err != nil {
		return nil, fmt.Errorf("lily: set prefetch: %w", err)
	}
	tag := consumerTag(c.spec.Name)
	deliveries, err := ch.Consume(c.spec.Name, tag, false, false, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("lily: consume %s: %w", c.spec.Name, err)
	}
	r := c.newRun(pubConn)
	connClosed := conn.NotifyClose(make(chan *amqp.Error, 1))
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		err := <-closed
		r.gen.revoke()
		if err != nil {
			c.cfg.Logger.Error("lily consumer channel closed", slog.String("queue", c.spec.Name), slog.String("error", sanitize(err.Error(), maxCause)))
		}
		r.closeErr <- err
	}()

	slots := make(chan struct{}, c.spec.Concurrency)
	var runErr error
	var held *amqp.Delivery // received, waiting for a slot when intake stopped
intake:
	for {
		select {
		case <-ctx.Done():
			break intake
		case d, ok := <-deliveries:
			if !ok {
				runErr = c.lostIntake(r, connClosed)
				break intake
			}
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				held = &d
				break intake
			}
			r.deliveries.Add(1)
			go func() {
				defer r.deliveries.Done()
				defer func() { <-slots }()
				c.process(r, &d)
			}()
		}
	}
	return c.shutdown(r, ch, tag, deliveries, held), runErr
}

func (c *Consumer) declare(conn *amqp.Connection) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("lily: open topology channel: %w", err)
	}
	defer ch.Close()
	if err := DeclareTopology(ch, c.spec); err != nil {
		return fmt.Errorf("lily: %w", err)
	}
	return nil
}

func (c *Consumer) dial(role string) (*amqp.Connection, error) {
	conn, err := amqp.DialConfig(c.cfg.URL, amqp.Config{
		Properties: amqp.Table{"connection_name": "lily " + c.spec.Name + " " + role},
	})
	if err != nil {
		return nil, fmt.Errorf("lily: connect (%s): %w", role, err)
	}
	return conn, nil
}

func (c *Consumer) newRun(pubConn *amqp.Connection) *run {
	work, force := context.WithCancel(context.Background())
	return &run{
		gen:      &generation{},
		handoff:  newHandoffPublisher(pubConn, c.spec.Concurrency),
		requeues: newRequeueMemory(4096),
		report:   &reportBuilder{r: Report{Queue: c.spec.Name, Started: time.Now(), Counts: map[Path]int{}}},
		work:     work,
		force:    force,
		closeErr: make(chan *amqp.Error, 1),
		stopping: make(chan struct{}),
	}
}

func consumerTag(queue string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "lily-" + queue + "-" + hex.EncodeToString(b[:])
}

// lostIntake explains why the broker stopped delivering: the channel or the
// connection closed under us, or (queue deleted) the broker cancelled the consumer.
func (c *Consumer) lostIntake(r *run, connClosed <-chan *amqp.Error) error {
	wait := time.After(time.Second)
	chClosed := r.closeErr
	for {
		var err *amqp.Error
		select {
		case err = <-chClosed:
			chClosed = nil
		case err = <-connClosed:
			connClosed = nil
		case <-wait:
			return fmt.Errorf("lily: the broker stopped delivering from %s (consumer cancelled or channel closed)", c.spec.Name)
		}
		if err != nil {
			return fmt.Errorf("lily: the consumer channel of %s closed: %w", c.spec.Name, err)
		}
	}
}
