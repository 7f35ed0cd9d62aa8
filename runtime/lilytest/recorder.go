package lilytest

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/lily-mq/lily/internal/frame"
	"github.com/lily-mq/lily/internal/outboxcodec"
	"github.com/lily-mq/lily/runtime"
)

// Recorder is a runtime.Sender that keeps each message sent, for a test to
// read with Sent: give it to a handler in the Sender's place.
//
// By default it stands for a *runtime.Publisher: a message is kept as soon
// as it is sent, whatever the handler does after, since a published message
// is on the broker once Send returns, even if the delivery then fails and
// its claim rolls back. With Outbox set it stands for an outbox such as
// pgoutbox.Outbox, which writes into the Inbox claim's transaction: a
// message is kept once the claim commits and never if it rolls back, and a
// send from a context without a claim fails, as pgoutbox.Outbox's fails
// without a transaction, but with an error of the harness's own: it is not
// pgoutbox.ErrNoTx, and errors.Is(err, pgoutbox.ErrNoTx) is false for it.
//
// The zero value is ready to use; a Recorder is safe for concurrent use.
type Recorder struct {
	// Outbox keeps only what an Inbox claim commits, as an outbox does.
	Outbox bool

	mu   sync.Mutex
	sent []runtime.Message
}

// Send keeps a copy of m (its headers and body too). It fails when ctx is
// done, or for a message a Publisher would refuse before writing it without
// asking the broker (no exchange and no routing key, a property or a header
// name over 255 bytes, an expiration that is not plain milliseconds, a
// reply_to of the bare amq.rabbitmq.reply-to, a header AMQP or the broker
// refuses, properties and headers larger than a frame with the publish id
// the Publisher adds, a user_id at all: see below), as a real Sender would;
// with Outbox, also for one pgoutbox.Write refuses (text that is not UTF-8
// or holds a NUL, a time past year 9999, properties and headers over
// 121,848 bytes, a body over 512 MiB) and as AfterCommit fails: without an
// Inbox claim in ctx, or once the claim has ended. What only the broker can
// tell, such as whether m's exchange exists, it does not check.
//
// A Publisher refuses a user_id other than the user its connection logs in
// as, and a Recorder has no connection, so no user: it refuses any user_id
// but the empty one.
func (r *Recorder) Send(ctx context.Context, m runtime.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := cmp.Or(frame.CheckDestination(m.Exchange, m.RoutingKey), frame.CheckPublish(m.Exchange, m.RoutingKey, m.Publishing), noUser(m.UserId))
	if err == nil && r.Outbox {
		_, err = outboxcodec.Encode(m)
	}
	if err == nil {
		err = frame.CheckSent(m.Publishing, frame.Size)
	}
	if err != nil {
		return fmt.Errorf("lilytest: send: %w", err)
	}
	m.Headers, m.Body = cloneTable(m.Headers), bytes.Clone(m.Body)
	keep := func() {
		r.mu.Lock()
		r.sent = append(r.sent, m)
		r.mu.Unlock()
	}
	if r.Outbox {
		return AfterCommit(ctx, keep)
	}
	keep()
	return nil
}

// noUser says why a Recorder refuses user_id: the broker takes only the
// user the publishing connection logged in as, and a Recorder's stands for
// none.
func noUser(userID string) error {
	if userID == "" {
		return nil
	}
	return fmt.Errorf("user_id %q: the broker takes only the user the publishing connection logged in as, and a Recorder logs in as no one: leave user_id empty", userID)
}

// Sent returns the messages kept so far, in the order they were kept: as
// they were sent or, with Outbox, as their claims committed.
func (r *Recorder) Sent() []runtime.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.sent)
}
