package runtime

import (
	"net"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The few internals the broker tests of package runtime_test reach. Those tests
// live outside the package so that they can use generated code (package
// runtime cannot import it without a cycle); this file exists only in tests.

// TestHooks run at exact moments of a delivery's journey, so that a test can
// break the transport there. A nil hook is left as it was.
type TestHooks struct {
	BeforeAck, AfterAck, BeforePublish, AfterPublish, BeforeClose func()
}

// SetTestHooks installs h; call it before Run.
func (c *Consumer) SetTestHooks(h TestHooks) {
	set := func(dst *func(), f func()) {
		if f != nil {
			*dst = f
		}
	}
	set(&c.hooks.beforeAck, h.BeforeAck)
	set(&c.hooks.afterAck, h.AfterAck)
	set(&c.hooks.beforePublish, h.BeforePublish)
	set(&c.hooks.afterPublish, h.AfterPublish)
	set(&c.hooks.beforeClose, h.BeforeClose)
}

// TestHandoffPublisher is the consumer's handoff publisher, driven alone.
type TestHandoffPublisher struct{ h *handoffPublisher }

func NewTestHandoffPublisher(url string, stepTimeout time.Duration, window int) TestHandoffPublisher {
	dial := func() (*amqp.Connection, net.Conn, error) { return dialSocket(url, amqp.Config{}) }
	return TestHandoffPublisher{newHandoffPublisher(dial, stepTimeout, window)}
}

// Publish hands msg off to dest and waits for its evidence until deadline.
func (p TestHandoffPublisher) Publish(deadline time.Time, dest string, msg amqp.Publishing) HandoffEvidence {
	return p.h.publish(deadline, dest, msg, func() bool { return true })
}

// Pending counts the handoff ids still awaiting their confirm or Return.
func (p TestHandoffPublisher) Pending() int {
	p.h.returnsMu.Lock()
	defer p.h.returnsMu.Unlock()
	return len(p.h.pending)
}

func (p TestHandoffPublisher) Close() { p.h.close() }
