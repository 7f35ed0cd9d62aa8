package runtime

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/runtime/internal/guard"
)

// Config is how one consumer reaches the broker, reports what it does and
// plugs in per-delivery resources. Zero fields take the defaults named beside
// them.
type Config struct {
	// URLs of the broker: one, or a cluster's nodes, tried in turn from the
	// one that last answered; empty ones are skipped, and with none,
	// amqp://guest:guest@127.0.0.1:5672/ is used.
	// amqps:// URLs connect with TLS.
	URLs []string
	// TLS configures amqps:// connections: the CAs to trust and the client
	// certificates to present. Its ServerName, when empty, is each URL's
	// host. When nil, an amqps:// URL's own cacertfile, certfile and keyfile
	// apply.
	TLS *tls.Config
	// Credentials, when set, is asked for a user name and password at each
	// connection attempt; they replace the URLs' own. Rotated credentials
	// then take effect at the next reconnect, without a restart. An attempt
	// waits for it a step at most; its error or panic fails the attempt.
	// Its ctx ends then, or sooner when a consumer's stop leaves no one
	// waiting for the attempt.
	Credentials func(ctx context.Context) (username, password string, err error)
	// Logger receives the diagnostics events, one record per stage of each
	// delivery's journey and of the consumer's life, with stable keys
	// (docs/runtime.md lists them); slog.Default() when nil. A handler of
	// its own turns them into metrics or keeps the recent ones. A panic in
	// its handler is recovered and the record dropped.
	Logger *slog.Logger
	// Observe, when set, receives each delivery's record as its journey ends,
	// on the delivery's goroutine: keep it quick. A panic in it is logged.
	Observe func(Record)
	// Telemetry, when set, is told of each delivery's journey, with its
	// context, and of each publish: traces and metrics hang on it.
	Telemetry Telemetry
	// Publisher, when set, is the consumer's way to the broker: it hands its
	// retry and DLQ copies to the Publisher, on the Publisher's connection,
	// and consumes on one other connection that every consumer naming the
	// same Publisher shares, each on a channel of its own. Both are reached
	// as the Publisher's Config says: the consumer's URLs, TLS and
	// Credentials are not used. The consumers of one process and its own
	// sends then hold two connections in all. The consumer does not close
	// the Publisher; the last consumer to stop closes the consuming
	// connection.
	Publisher *Publisher
	// Inbox, when set, claims each message id in the transaction that carries
	// the handler's writes.
	Inbox Inbox
	// Scope, when set, opens per-delivery resources after dispatch (never for
	// a rejected or unsupported delivery). It returns the context the handler
	// runs in (derived from ctx) and a cleanup that runs after the handler and
	// the commit. A scope that fails to open (an error, or no context) is a
	// retryable failure, and the handler does not run; a cleanup that fails keeps the delivery from being
	// ACKed.
	Scope func(ctx context.Context, d RawDelivery) (context.Context, func(context.Context) error, error)
	// AfterDelivery, when set, runs last in the pipeline, after the commit
	// and the cleanup, and sees the evidence so far: the record of the
	// delivery, whose Path is still empty and whose Reason holds what a
	// failing step said. Its failure keeps the delivery from being ACKed, as a
	// cleanup failure does; its success is no evidence of the ACK, which comes
	// later and may fail.
	AfterDelivery func(ctx context.Context, d RawDelivery, soFar Record) error
	// ShutdownGrace is the cooperative window, counted from the moment
	// intake begins to stop, in which in-flight work runs and settles
	// normally (15 s). A shutdown ends within ShutdownGrace + ForceWindow +
	// StepTimeout, 25 s by default, inside Kubernetes' default 30 s
	// termination grace period, unless a broker that answers nothing
	// stretches it (docs/operating.md says how far).
	ShutdownGrace time.Duration
	// ForceWindow follows the grace: handlers' contexts are cancelled, and work
	// that still completes settles; then the final abort (5 s).
	ForceWindow time.Duration
	// StepTimeout bounds each broker step: publish, confirm wait, ACK, NACK,
	// channel open, cancel, proof (5 s).
	StepTimeout time.Duration
	// ReconnectMax bounds the backoff between connection attempts after a
	// loss, which doubles from 100 ms; each wait is drawn between half of it
	// and all of it (30 s). It is at least 100 ms.
	//
	// Each of these durations is zero, for its default, or positive and at
	// most 2³²−1 ms: NewConsumer and NewPublisher refuse any other.
	ReconnectMax time.Duration
}

const defaultURL = "amqp://guest:guest@127.0.0.1:5672/"

// withDefaults fills the zero fields of c.
func (c Config) withDefaults() Config {
	c.URLs = slices.DeleteFunc(slices.Clone(c.URLs), func(u string) bool { return u == "" })
	if len(c.URLs) == 0 {
		c.URLs = []string{defaultURL}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Logger = guardLogger(c.Logger)
	orDefault(&c.ShutdownGrace, 15*time.Second)
	orDefault(&c.ForceWindow, 5*time.Second)
	orDefault(&c.StepTimeout, queue.DefaultStepTimeout)
	orDefault(&c.ReconnectMax, 30*time.Second)
	return c
}

// validate reports every problem with c at once. urls says whether c's
// URLs and TLS are used, and so checked: not a consumer's that names a
// Publisher.
func (c Config) validate(urls bool) error {
	var errs []error
	for _, d := range []struct {
		name  string
		value time.Duration
	}{{"ShutdownGrace", c.ShutdownGrace}, {"ForceWindow", c.ForceWindow}, {"StepTimeout", c.StepTimeout}, {"ReconnectMax", c.ReconnectMax}} {
		if d.value < 0 || d.value > queue.MaxDuration {
			errs = append(errs, fmt.Errorf("duration Config.%s %s is negative or longer than %s (zero takes the default)", d.name, d.value, queue.MaxDuration))
		}
	}
	if c.ReconnectMax > 0 && c.ReconnectMax < firstReconnect {
		errs = append(errs, fmt.Errorf("duration Config.ReconnectMax %s is under the first wait of %s", c.ReconnectMax, firstReconnect))
	}
	if urls {
		errs = append(errs, c.validateURLs())
	}
	return errors.Join(errs...)
}

func orDefault(v *time.Duration, d time.Duration) {
	if *v <= 0 {
		*v = d
	}
}

// tuning holds what a Config does not offer: fixed for users, and set
// shorter by the runtime's own tests.
type tuning struct {
	// limits bound the envelope's metadata.
	limits guard.Limits
	// proofInterval is how often ACKs waiting for their proof are proven.
	proofInterval time.Duration
	// reconnectMin is the first wait before a connection attempt after a loss.
	reconnectMin time.Duration
	// stallMargin is what Health allows past a delivery's budget and two
	// steps before it calls the consumer wedged.
	stallMargin time.Duration
	// starveAfter is how long a quorum queue's channel may deliver nothing
	// while it has room before the queue is asked whether it holds ready
	// messages (starvation.go).
	starveAfter time.Duration
	// topologyEvery is how often a consuming session declares the topology
	// again (drift.go).
	topologyEvery time.Duration
}

// firstReconnect is the first wait before a connection attempt after a loss.
const firstReconnect = 100 * time.Millisecond

var defaultTuning = tuning{
	limits: guard.DefaultLimits, proofInterval: 250 * time.Millisecond, reconnectMin: firstReconnect,
	stallMargin: time.Minute, starveAfter: 30 * time.Second, topologyEvery: 30 * time.Second,
}
