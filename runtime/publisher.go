package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/backoff"
	"github.com/lily-mq/lily/internal/connectnote"
	"github.com/lily-mq/lily/internal/frame"
	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/internal/writegate"
	"github.com/lily-mq/lily/runtime/internal/confirm"
	"github.com/lily-mq/lily/runtime/internal/outcome"
)

// The answers a Publisher's Send gives besides nil (confirmed). Any other
// error says the message was not written to the broker: sending it again
// cannot make a copy.
var (
	// ErrReturned: the broker confirmed the message but routed it to no
	// queue, and returned it. It is in no queue.
	ErrReturned = errors.New("lily: returned: the broker routed the message to no queue")
	// ErrNacked: the broker refused the message (a queue with overflow
	// reject-publish is full, or the broker failed to store it). Another
	// queue it was routed to (through an exchange, or a CC header) may hold
	// it, and a queue with reject-publish-dlx dead-letters what it refuses:
	// sending it again may make a copy.
	ErrNacked = errors.New("lily: nacked: the broker refused the message")
	// ErrUnconfirmed: the message was written, but no confirm came (the
	// connection was lost, or the step timed out). It may be in its queue or
	// not; sending it again may make a copy, which the consumer's inbox can
	// tell apart by its message id.
	ErrUnconfirmed = errors.New("lily: unconfirmed: the message was written but not confirmed; it may be in its queue or not")
)

// Publisher sends messages to the broker on a confirm-mode channel of its
// own connection, each publish mandatory (but a direct reply: see Send), and
// answers each Send only with the broker's word: nil when confirmed, never
// before. Each Return is matched to its own publish. Sends from many
// goroutines share the channel, at most the window of them in flight; a
// lost connection is opened again, with the consumer's backoff and through
// its list of URLs, and while the broker blocks publishers (a resource
// alarm) Sends wait, within their contexts.
//
// A Publisher is safe for concurrent use. Config.Publisher lets consumers
// hand off their retry and DLQ copies through it too, on the same connection,
// and consume on one connection they share beside it.
type Publisher struct {
	conn    *confirm.Conn
	confirm *confirm.Publisher
	dialer  *dialer
	// consuming is the consuming connection of the consumers naming the
	// Publisher, beside its own.
	consuming *links
	// telemetry is told of each Send (Config.Telemetry).
	telemetry hook
	// ending holds a place for each Send from before its publish until its
	// telemetry end returns, which it may outlive: the window's size, so
	// that ends steadily slower than the broker's answers slow the Sends to
	// their pace rather than pile up. nil without a hook.
	ending chan struct{}
	// step is how long a Send waits for its telemetry end (StepTimeout).
	step time.Duration
	// lastWarned is when a failed connection attempt was last logged: once a
	// second at most, however many Sends wait for the connection.
	lastWarned atomic.Int64
}

// maxWindow is the largest window NewPublisher takes; its comment says why.
const maxWindow = 4096

// NewPublisher returns a publisher that reaches the broker as cfg says (its
// URLs, TLS, Credentials, StepTimeout, ReconnectMax and Telemetry) with at most window
// publishes in flight (64 when not positive). It connects at its first Send.
//
// A window over 4096 is refused. Its publishes share one channel, which the
// broker serves on one process, at tens of thousands of publishes a second
// at best: 4096 in flight keep it busy even when each confirm takes 50 ms (a
// quorum queue's disk under load). A larger window buys no throughput, only
// waits in the broker's buffers, and memory here: each channel the Publisher
// opens buffers four Returns for every slot, 264 bytes each.
func NewPublisher(cfg Config, window int) (*Publisher, error) {
	err := cfg.validate(true)
	if window > maxWindow {
		err = errors.Join(err, fmt.Errorf("publisher window %d is over %d publishes in flight, which one channel cannot use", window, maxWindow))
	}
	if err != nil {
		return nil, err
	}
	if window <= 0 {
		window = 64
	}
	cfg = cfg.withDefaults()
	p := &Publisher{dialer: &dialer{cfg: cfg, name: "publisher"}, telemetry: hook{t: cfg.Telemetry, log: cfg.Logger}, step: cfg.StepTimeout}
	if cfg.Telemetry != nil {
		p.ending = make(chan struct{}, window)
	}
	// A dialer of its own: a node passed over for consuming need not be
	// for publishing.
	p.consuming = &links{dialer: &dialer{cfg: cfg, name: "publisher"}, shared: true}
	p.conn = confirm.NewConn(func() (*amqp.Connection, net.Conn, func(), error) { return p.dialer.publishing("publish") }, cfg.StepTimeout)
	// One backoff for the connection, whatever the number of Sends
	// waiting: each failed dial holds the next off for its wait, and the
	// Sends meanwhile get its failure.
	p.conn.Backoff = func(n int) time.Duration {
		wait := backoff.Wait(n, defaultTuning.reconnectMin, cfg.ReconnectMax)
		if now, last := time.Now().UnixNano(), p.lastWarned.Load(); now-last > int64(time.Second) && p.lastWarned.CompareAndSwap(last, now) {
			// A stage of its own: a consumer's reconnect records carry its
			// queue, and an alert keyed on them must not take these for one.
			cfg.Logger.Warn("lily: publisher reconnect", "stage", "publisher-reconnect", "attempt", n, "wait", wait)
		}
		return wait
	}
	p.confirm = confirm.New(p.conn, window)
	p.confirm.Backoff = func(n int) time.Duration { return backoff.Wait(n, defaultTuning.reconnectMin, cfg.ReconnectMax) }
	return p, nil
}

// Send publishes m and waits for the broker's answer, within ctx: each
// broker step within the step timeout too, and the wait for a connection, for
// a slot in the window and while the broker blocks publishers within ctx
// alone. A write already waiting when ctx ends is not cut short, which would
// fail every Send sharing the connection; it ends within a step. nil means confirmed and routed; ErrReturned, ErrNacked and
// ErrUnconfirmed (wrapped, with the detail) are the broker's other answers;
// any other error means the message was not written. One for a ctx that
// ended first wraps its error; one for a deadline too near to write and
// wait for the answer (under 20 ms, or a quarter of the step when that is
// less) says "no time left" and, ctx not having ended, wraps nothing.
//
// A reply to a direct reply-to address (the default exchange, a routing key
// amq.rabbitmq.reply-to.<token> from a request's ReplyTo) goes to the
// requester's channel, no queue, so it is published without mandatory: nil
// means only that the broker took it. The broker hands it to the requester
// if its channel still consumes the reply-to pseudo-queue, and drops it
// otherwise; nothing tells the two apart, and it is never ErrReturned.
//
// With Config.Telemetry set, Send tells the hook's done of the answer and
// waits for it for one step at most, or until ctx ends, then returns the
// answer and leaves done running: a slow end (a span exported to a
// collector that is away) cannot hold an answer its caller acts on. As many
// ends as the window may run so; past that, a Send waits within ctx for one
// to return before it publishes, and publishes nothing if ctx ends first.
func (p *Publisher) Send(ctx context.Context, m Message) error {
	if err := frame.CheckDestination(m.Exchange, m.RoutingKey); err != nil {
		return fmt.Errorf("lily: send: %w", err)
	}
	if p.ending != nil {
		// The place is taken before anything is published, so that no
		// answer waits behind the ends. A free place is taken even when ctx
		// has ended (a select would pick at random): the publish then says
		// why nothing was written, as without a hook.
		select {
		case p.ending <- struct{}{}:
		default:
			select {
			case p.ending <- struct{}{}:
			case <-ctx.Done():
				return fmt.Errorf("lily: not sent: the telemetry hook's ends still run: %w", context.Cause(ctx))
			case <-p.conn.Closing():
				return errors.New("lily: not sent: waiting for the telemetry hook's ends: the publisher has closed")
			}
		}
	}
	// The publish id goes into the headers: a table of the Publisher's own,
	// so that the caller's message is not changed.
	msg := m.Publishing
	msg.Headers = make(amqp.Table, len(m.Headers)+1)
	maps.Copy(msg.Headers, m.Headers)
	deadline, _ := ctx.Deadline()
	msg, done := p.telemetry.publishing(ctx, m.Exchange, m.RoutingKey, msg, nil, nil)
	// A caller of Lily's own (the outbox relay) may refuse the write at
	// its last moment, after the waits (writegate), and hear why it waits
	// for a connection (connectnote).
	b := confirm.Bounds{Deadline: deadline, Done: ctx.Done(), Failing: connectnote.Note(ctx)}
	ev := p.confirm.Publish(b, m.Exchange, m.RoutingKey, msg, writegate.Check(ctx))
	p.end(ctx, done, ev.Status.String(), p.telemetry.now())
	switch {
	case ev.Status == outcome.HandoffConfirmed:
		return nil
	case ev.Status == outcome.HandoffReturned:
		return fmt.Errorf("%w (%s)", ErrReturned, ev.Detail)
	case ev.Status == outcome.HandoffNacked:
		return fmt.Errorf("%w (to %s)", ErrNacked, sanitize.Text(ev.Destination, 2*maxShortText+1))
	case ev.Published:
		return fmt.Errorf("%w (%s)", ErrUnconfirmed, ev.Detail)
	case ctx.Err() != nil || !deadline.IsZero() && !time.Now().Before(deadline):
		// Lily's timer may fire just before the context's own.
		cause := context.Cause(ctx)
		if cause == nil {
			cause = context.DeadlineExceeded
		}
		return fmt.Errorf("lily: not sent: %s: %w", ev.Detail, cause)
	default:
		return fmt.Errorf("lily: not sent: %s", ev.Detail)
	}
}

// end hands the broker's answer to the hook's done. Without a hook done is
// ignore, called in place: no goroutine, channel or timer per Send. With one,
// done runs on a goroutine of its own, which gives the Send's place among the
// ends back when done returns; Send waits for it for a step at most, or
// until ctx ends (a relay's stop, the caller's deadline), so that a quick
// done still ends its span before Send returns.
func (p *Publisher) end(ctx context.Context, done func(string, time.Time), evidence string, at time.Time) {
	if p.ending == nil {
		done(evidence, at)
		return
	}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		// Runs first: a caller that sends again at once finds the place free.
		defer func() { <-p.ending }()
		done(evidence, at)
	}()
	timer := time.NewTimer(p.step)
	defer timer.Stop()
	select {
	case <-finished:
	case <-ctx.Done():
		// The caller has stopped waiting; it may have stopped before the
		// answer, so a done quick enough is not reported slow.
	case <-timer.C:
		p.telemetry.logError(slog.String("method", "Publish"),
			slog.String("detail", fmt.Sprintf("done did not return within %s: the Send returned the broker's answer and left it running", p.step)))
	}
}

// Close closes the publisher's connection, under the handoffs of the
// consumers that share it too: close it after they stopped. Sends still
// waiting for their confirm answer ErrUnconfirmed; Sends still waiting to
// publish (for a slot, a connection or the backoff between dials, for a
// place among the telemetry hook's ends, or while the broker blocks
// publishers) fail at once, as Sends after it do. The
// consuming connection those consumers share is theirs: the last to stop
// closes it.
func (p *Publisher) Close() { p.conn.Close() }
