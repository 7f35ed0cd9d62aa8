package lilytest

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"sync"

	"github.com/lily-mq/lily/runtime"
)

// Recorder is a runtime.Sender that keeps each message sent, for a test to
// read with Sent: give it to a handler in the Sender's place (a
// *runtime.Publisher, or an outbox such as pgoutbox.Outbox). A message sent
// from a handler whose context carries an Inbox claim is kept as an outbox
// keeps it: it appears once the claim commits, and never if it rolls back.
// Any other is kept at once. The zero value is ready to use; a Recorder is
// safe for concurrent use.
type Recorder struct {
	mu   sync.Mutex
	sent []runtime.Message
}

// Send keeps a copy of m (its headers and body too). It fails only when ctx
// is done, as a real Sender would.
func (r *Recorder) Send(ctx context.Context, m runtime.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.Headers, m.Body = maps.Clone(m.Headers), bytes.Clone(m.Body)
	keep := func() {
		r.mu.Lock()
		r.sent = append(r.sent, m)
		r.mu.Unlock()
	}
	if !AfterCommit(ctx, keep) {
		keep()
	}
	return nil
}

// Sent returns the messages kept so far, in the order they were sent (for
// those sent in a claim, committed).
func (r *Recorder) Sent() []runtime.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.sent)
}
