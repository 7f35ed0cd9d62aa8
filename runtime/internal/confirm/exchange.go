package confirm

import (
	"context"
	"errors"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/runtime/internal/outcome"
	"github.com/lily-mq/lily/runtime/internal/sanitize"
	"github.com/lily-mq/lily/runtime/internal/step"
)

// exchangeExists makes sure, once per channel, that exchange exists before
// the first publish to it: the broker answers a publish to an exchange that
// does not exist by closing the channel, under every publish in flight on
// it, which could then only say "unconfirmed". A passive declare on a
// channel of its own asks instead; it needs no permission to configure. The
// check ends by the moment by, or when done is closed. It returns
// HandoffNone when the exchange exists (or is the default one), else why
// nothing was written.
func (c *channel) exchangeExists(exchange string, by time.Time, done <-chan struct{}) (outcome.HandoffStatus, string) {
	if exchange == "" || c.isKnown(exchange) {
		return outcome.HandoffNone, ""
	}
	t := step.Timer(by)
	defer step.Release(t)
	select {
	case c.checking <- struct{}{}:
	case <-t.C:
		return outcome.HandoffTimedOut, "no time left to look for exchange " + sanitize.Text(exchange, 120)
	case <-done:
		return outcome.HandoffFailed, "stopped waiting to look for exchange " + sanitize.Text(exchange, 120)
	}
	defer func() { <-c.checking }()
	if c.isKnown(exchange) {
		return outcome.HandoffNone, "" // found by the check this one waited for
	}
	ctx, cancel := context.WithDeadline(context.Background(), by)
	defer cancel()
	closeLater := func(ch *amqp.Channel) { go ch.Close() }
	ch, err := step.Open(ctx, c.link.conn.Channel, closeLater)
	if err == nil {
		err = step.DoErr(ctx, func() error {
			return ch.ExchangeDeclarePassive(exchange, amqp.ExchangeDirect, false, false, false, false, nil)
		})
		// After a 404 the broker has closed it; else nothing waits for the
		// close-ok, which a dead peer would never send.
		closeLater(ch)
	}
	var amqpErr *amqp.Error
	switch {
	case err == nil:
		c.knownMu.Lock()
		c.known[exchange] = true
		c.knownMu.Unlock()
		return outcome.HandoffNone, ""
	case errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotFound:
		return outcome.HandoffFailed, "no exchange " + sanitize.Text(exchange, 120)
	case errors.Is(err, step.ErrTimeout):
		// A broker that answers no request in a step will not read a
		// publish either: the next one gets a new connection.
		c.link.abandon()
		return outcome.HandoffTimedOut, "the broker did not answer the look for exchange " + sanitize.Text(exchange, 120) + " in time"
	default:
		return outcome.HandoffFailed, "look for exchange " + sanitize.Text(exchange, 120) + ": " + sanitize.Text(err.Error(), 120)
	}
}

func (c *channel) isKnown(exchange string) bool {
	c.knownMu.Lock()
	defer c.knownMu.Unlock()
	return c.known[exchange]
}
