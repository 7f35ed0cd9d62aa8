package confirm

import (
	"errors"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime/internal/outcome"
	"github.com/lily-mq/lily/runtime/internal/step"
)

// exchanges records the exchanges found to exist on one connection, for the
// channels a publisher opens on it one after another: a channel a nack
// retired hands it to the next, which so does not look again at an
// exchange already found (a queue that nacks every publish would otherwise
// cost a look per exchange at each retirement). The broker closes a
// channel that publishes to an exchange deleted since it was found: a
// channel closed under a publish empties the record, and the channel that
// replaces a closed one starts a record of its own, so the next publish to
// each exchange looks again. So does each on a new connection, which gets
// a record of its own.
type exchanges struct {
	link *link
	// checking admits one look at a time.
	checking chan struct{}
	mu       sync.Mutex
	found    map[string]bool
}

func newExchanges(l *link) *exchanges {
	return &exchanges{link: l, checking: make(chan struct{}, 1), found: map[string]bool{}}
}

func (e *exchanges) has(exchange string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.found[exchange]
}

func (e *exchanges) add(exchange string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.found[exchange] = true
}

// forget empties the record.
func (e *exchanges) forget() {
	e.mu.Lock()
	defer e.mu.Unlock()
	clear(e.found)
}

// exchangeExists makes sure, once per record of exchanges (above), that
// exchange exists before the first publish to it: the broker answers a
// publish to an exchange that does not exist by closing the channel, under
// every publish in flight on it, which could then only say "unconfirmed".
// A passive declare on a channel of its own asks instead, on any of conn's
// connections; it needs no permission to configure. The look is a step of
// its own, ending by writeBy when that comes first, or when done is closed. It returns HandoffNone
// when the exchange exists (or is the default one), else why nothing was
// written.
func (c *channel) exchangeExists(conn *Conn, exchange string, stepTimeout time.Duration, writeBy time.Time, done <-chan struct{}) (outcome.HandoffStatus, string) {
	if exchange == "" || c.exchanges.has(exchange) {
		return outcome.HandoffNone, ""
	}
	name := sanitize.Text(exchange, 120)
	lookBy := step.Deadline(stepTimeout, writeBy)
	t := step.Timer(lookBy)
	defer step.Release(t)
	select {
	case c.exchanges.checking <- struct{}{}:
	case <-t.C:
		return outcome.HandoffTimedOut, "no time left to look for exchange " + name
	case <-done:
		if passed(lookBy) {
			return outcome.HandoffTimedOut, "no time left to look for exchange " + name
		}
		return outcome.HandoffFailed, "stopped waiting to look for exchange " + name
	}
	defer func() { <-c.exchanges.checking }()
	if c.exchanges.has(exchange) {
		return outcome.HandoffNone, "" // found by the look this one waited for
	}
	by := step.Deadline(stepTimeout, writeBy)
	if time.Until(by) < min(stepTimeout/4, 20*time.Millisecond) {
		return outcome.HandoffTimedOut, "no time left to look for exchange " + name
	}
	// On whichever connection has a channel id free: the exchange is the
	// broker's, not the connection's.
	ch, _, err := conn.channel(by, done, func(ch *amqp.Channel) error {
		return ch.ExchangeDeclarePassive(exchange, amqp.ExchangeDirect, false, false, false, false, nil)
	})
	if err == nil {
		// Nothing waits for the close-ok, which a dead peer would never
		// send. (After a 404 the broker has closed it.)
		go ch.Close()
	}
	var amqpErr *amqp.Error
	var blocked *blockedError
	var unanswered *unansweredError
	switch {
	case err == nil:
		c.exchanges.add(exchange)
		return outcome.HandoffNone, ""
	case errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotFound:
		return outcome.HandoffFailed, "no exchange " + name
	case errors.As(err, &blocked) && errors.Is(err, step.ErrTimeout):
		// A blocked connection is not read (a resource alarm, the broker's
		// connection.blocked, may have come while this one waited its turn).
		return outcome.HandoffTimedOut, blocked.why
	case errors.As(err, &blocked):
		return outcome.HandoffFailed, blocked.why
	case errors.As(err, &unanswered):
		// A broker that answers no request in a whole step, unblocked, will
		// not read a publish either: the next one gets a new connection.
		return outcome.HandoffTimedOut, "the broker did not answer the look for exchange " + name + " in time"
	case errors.Is(err, step.ErrTimeout):
		// A look cut short by the publish's own bound proves nothing.
		return outcome.HandoffTimedOut, "no answer to the look for exchange " + name + " within the publish's bounds"
	default:
		return outcome.HandoffFailed, "look for exchange " + name + ": " + sanitize.Text(err.Error(), 120)
	}
}

// closed reports whether ch is closed, without waiting.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
