package runtime

import (
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/runtime/internal/settle"
)

// The few internals the broker tests of package runtime_test reach. Those tests
// live outside the package so that they can use generated code (package
// runtime cannot import it without a cycle); this file exists only in tests.

// TestHooks run at exact moments of a delivery's journey, so that a test can
// break the transport there. A nil hook is left as it was.
type TestHooks struct {
	BeforeAck, AfterAck, BeforePublish, AfterPublish, BeforeCancel, BeforeClose func()
	// EnteredLane runs once an ordered queue's delivery has taken its place
	// in its key's lane: the consumer knows it.
	EnteredLane func()
	// LaneTurn runs on an ordered delivery's worker before it waits for its
	// turn, with the delivery's message_id: holding it holds the worker.
	LaneTurn func(messageID string)
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
	set(&c.hooks.beforeCancel, h.BeforeCancel)
	set(&c.hooks.beforeClose, h.BeforeClose)
	set(&c.hooks.enteredLane, h.EnteredLane)
	if h.LaneTurn != nil {
		c.hooks.laneTurn = h.LaneTurn
	}
}

// SetProofInterval sets how often ACKs waiting for their proof are proven;
// call it before Run. An hour keeps every proof to the channel's close.
func (c *Consumer) SetProofInterval(d time.Duration) { c.tuning.proofInterval = d }

// SetStallMargin sets what Health allows past a delivery's budget and two
// steps before it calls the consumer wedged; call it before Run.
func (c *Consumer) SetStallMargin(d time.Duration) { c.tuning.stallMargin = d }

// SetStarveAfter sets how long a quorum queue's channel may deliver nothing
// while it has room before the queue is asked for its ready messages; call
// it before Run.
func (c *Consumer) SetStarveAfter(d time.Duration) { c.tuning.starveAfter = d }

// WrapAcker wraps the acker of each consumer channel opened after it, so
// that a test can lose an ACK the broker never gets; call it before Run.
func (c *Consumer) WrapAcker(wrap func(settle.Acker) settle.Acker) { c.hooks.acker = wrap }

// Budget is the settlement budget each delivery gets.
func (c *Consumer) Budget() time.Duration { return c.spec.budget() }

// Generations counts the generations of the running consumer that still
// hold their authority.
func (c *Consumer) Generations() int {
	r := c.running.Load()
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, g := range r.generations {
		if !g.Revoked() {
			n++
		}
	}
	return n
}

// ShareConsuming makes conn the consuming connection the consumers naming p
// lease next, as if another consumer had opened it. The test holds it: no
// consumer closes it.
func (p *Publisher) ShareConsuming(conn *amqp.Connection) {
	p.consuming.mu.Lock()
	defer p.consuming.mu.Unlock()
	p.consuming.cur = &link{conn: conn, users: 1, killed: make(chan struct{})}
}

// SetReconnectWait makes every wait of p's Sends between attempts to
// connect d, so that a test finds a Send in a long one at once.
func (p *Publisher) SetReconnectWait(d time.Duration) {
	p.confirm.Backoff = func(int) time.Duration { return d }
}

// SetTopologyEvery sets how often a consuming session declares the topology
// again; call it before Run.
func (c *Consumer) SetTopologyEvery(d time.Duration) { c.tuning.topologyEvery = d }

// SetReconnectMin sets the first wait before a session is opened again.
func (c *Consumer) SetReconnectMin(d time.Duration) { c.tuning.reconnectMin = d }

// DialFrom makes the consumer's next dial, of a consuming connection or of
// its handoff connection (both go through one dialer), try URL n of its
// Config first, as if that node had answered last; the connections open
// stay where they are. A test calls it while Run has its consuming
// connection, to open the handoff connection on another node.
func (c *Consumer) DialFrom(n int) { c.dialer.node.Store(int32(n)) }

// DeclareTopologyAgain declares q's topology on conn as a consuming session
// declares it again, past every refusal: it returns the refusals, how many
// channels it opened, and the failure that stopped it, if one did.
func DeclareTopologyAgain(conn *amqp.Connection, q QueueSpec) (refusals []error, channels int, err error) {
	d := declarer{conn: conn, goOn: pastRefusals}
	err = d.topology(q)
	return d.refusals, d.opened, err
}

// DeclareTopologyAtReconnect declares q's topology on conn as a session
// opening after the consumer has consumed declares it, past an external
// exchange found missing alone: it returns those refusals, or the failure
// that stopped it.
func DeclareTopologyAtReconnect(conn *amqp.Connection, q QueueSpec) (refusals []error, err error) {
	return declareAtOpen(conn, q, true)
}
