package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/runtime/internal/step"
)

// A quorum queue's channel passes an ACK on to the queue's leader untracked
// (docs/runtime.md, "Proof"): a leader lost before the ACK commits leaves the
// message checked out to the consumer, holding one of its prefetch places at
// the queue until the channel closes, though the consumer has settled it.
// Enough of them starve the consumer while the queue holds messages, and
// nothing on the channel says so. The prover watches for it: when the channel
// has delivered nothing for starveAfter while it had room by the consumer's
// own count, the queue is asked how many messages are ready, and the channel
// is recycled when some are, which hands the orphans back to the queue.

// errStarved ends a session whose channel the queue no longer feeds.
var errStarved = errors.New("lily: starved: the quorum queue holds messages for a channel with room (ACKs lost with a leader?); recycled")

// idleWatch is what the prover last saw of a channel's deliveries: the last
// tag received, and since when nothing came while the channel had room.
type idleWatch struct {
	last  uint64
	since time.Time
}

// idle says how long s's channel has delivered nothing while it had room,
// and how many prefetch places were free by the consumer's count, when that
// is starveAfter or more and the queue is to be asked; 0 otherwise, and
// always on a retired session, whose intake ended.
// The prover calls it, on each proof, under its lock. While every
// concurrency slot is taken, intake may be waiting for one, with deliveries
// in the client's buffer the consumer has not counted: that is no idle
// channel.
func (c *Consumer) idle(r *run, s *session) (time.Duration, int) {
	if !c.watchesStarvation() || s.retired.Load() {
		return 0, 0
	}
	last, unsettled := s.gen.Settler.Holding()
	now := time.Now()
	if s.idle.since.IsZero() || last != s.idle.last || unsettled >= c.spec.Prefetch || len(r.slots) == cap(r.slots) {
		s.idle = idleWatch{last: last, since: now}
		return 0, 0
	}
	idle := now.Sub(s.idle.since)
	if idle < c.tuning.starveAfter {
		return 0, 0
	}
	s.idle.since = now // asked again only after another starveAfter
	return idle, c.spec.Prefetch - unsettled
}

// starved asks the queue whether it holds ready messages for s's channel,
// idle so long with free places, and reports errStarved, with the figures,
// when it does; nil otherwise.
func (c *Consumer) starved(ctx context.Context, s *session, idle time.Duration, free int) error {
	ready, err := c.readyMessages(ctx, s)
	if err != nil || ready == 0 {
		return nil
	}
	return fmt.Errorf("%w: %d ready, none delivered in %s, %d of %d prefetch places free", errStarved, ready, idle.Round(time.Second), free, c.spec.Prefetch)
}

// watchesStarvation: only a quorum queue loses ACKs so, and only one whose
// consumers all take turns. Another team's queue may be a single active
// consumer's, which Lily cannot see; so may one that says so, where a
// consumer waiting its turn is fed nothing by design.
func (c *Consumer) watchesStarvation() bool {
	t := c.spec.Topology
	return t.Type == queue.Quorum && !t.External && t.Arguments["x-single-active-consumer"] != true
}

// readyMessages asks the queue how many messages it holds ready, on a
// channel of its own on s's connection, within a step and until ctx ends:
// a queue deleted meanwhile closes that channel, not the consumer's.
func (c *Consumer) readyMessages(ctx context.Context, s *session) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StepTimeout)
	defer cancel()
	return step.Do(ctx, func() (int, error) {
		ch, err := s.link.conn.Channel()
		if err != nil {
			return 0, err
		}
		defer ch.Close()
		q, err := ch.QueueDeclarePassive(c.spec.Name, true, false, false, false, nil)
		return q.Messages, err
	})
}
