package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/runtime"
)

// senders is how many sends are in flight at once: a Send waits for its
// confirm.
const senders = 32

// publish sends every message to the main queue through a runtime.Publisher
// given the consumers' URLs (one node, or each of the cluster's), confirmed,
// spread over PublishOver. A send that fails is made again until confirmed,
// as a producer that must not lose a message does; one that failed after
// its publish was written (no confirm, or a nack) may have left a copy,
// which the accounting explains.
func (r *run) publish(ctx context.Context) error {
	p, err := runtime.NewPublisher(runtime.Config{
		URLs: r.urls(), StepTimeout: 2 * time.Second, ReconnectMax: 500 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	}, senders)
	if err != nil {
		return err
	}
	defer p.Close()
	return r.spread(ctx, len(r.ids), senders, func(i int) int { return i }, func(i int) error { return r.send(ctx, p, i) })
}

// spread hands items 0..n-1 to workers goroutines that do them, item j not
// before the share of PublishOver that its first message, first(j), is of
// the run's messages, and the last holdBack not before every kind of fault
// struck or the hold's end (held, holdEnd), but for a burst (r.burst) of
// items handed out at once ahead of their time; it returns the first error,
// or ctx's when it ended before every item was handed out. A burst takes
// half the items left at most (capBurst). So PublishOver is the least the
// publishing lasts. The items after a burst are spread over
// what is left of PublishOver: a burst of 300 of 1,500 messages over 75 s
// would otherwise leave 15 s without a message behind it, and a node fault
// struck then would seem to stop consumption for as long.
func (r *run) spread(ctx context.Context, n, workers int, first func(j int) int, do func(j int) error) error {
	start := time.Now()
	end := start.Add(r.cfg.PublishOver)
	holdUntil := start.Add(holdEnd(r.cfg.Deadline))
	plan := schedule{from: start, end: end, total: len(r.ids)}
	next := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for j := range next {
				if err := do(j); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	func() {
		defer close(next)
		burst := 0 // items still to hand out at once, as a burst asked
		for j := range n {
			if burst == 0 {
				select {
				case <-time.After(time.Until(plan.due(first(j)))):
				case asked := <-r.burst:
					burst = capBurst(asked, n-j)
				case <-ctx.Done():
					return
				}
			}
			if burst == 0 {
				asked, ok := r.held(ctx, n-j, holdUntil)
				if !ok {
					return
				}
				burst = capBurst(asked, n-j)
			}
			if burst == 1 && j+1 < n {
				plan.from, plan.fromFirst = time.Now(), first(j+1)
			}
			burst = max(burst-1, 0)
			select {
			case next <- j:
			case err := <-errs:
				errs <- err
				return
			}
		}
	}()
	r.handedOut.Store(true)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return ctx.Err()
	}
}

// capBurst is how many of the remaining items a burst that asked for asked
// hands out at once: half of them at most, so that the rest still go over
// what is left of PublishOver, the least the publishing lasts, and the
// trickle of the held items has some left for the kinds of fault still to
// strike. A run of 300 messages sent them all in its first burst, and
// ended in 6 s of its 20.
func capBurst(asked, remaining int) int {
	return min(asked, remaining/2)
}

// schedule spreads the run's messages, from message fromFirst at the moment
// from, evenly up to end.
type schedule struct {
	from, end        time.Time
	fromFirst, total int
}

// due is when message i goes.
func (s schedule) due(i int) time.Time {
	return s.from.Add(s.end.Sub(s.from) * time.Duration(i-s.fromFirst) / time.Duration(s.total-s.fromFirst))
}

// On a loaded machine the faults lag behind the schedule (a cluster's node
// takes tens of seconds to start again; a rabbitmqctl, seconds), and it
// could hand out its last message before the faults at the end of a round
// had their turn: those that strike only at work in flight (a handoff to
// refuse, a COMMIT to kill) then found none, and a run ended with kinds
// that never struck. So the last holdBack items wait, once their time has
// come, until every kind has struck once: they are handed out one at a
// time, spread over what is left of the wait (one every trickle at the
// most), so that the consumer has work to be struck at, and until the
// forced stop under a burst struck, a burst's worth stays in hand for it.
// The wait ends at holdEnd, whatever struck.
const (
	holdBack = burstSize + 150
	trickle  = 200 * time.Millisecond
)

// holdEnd is how long after the publishing starts the wait for every kind
// of fault ends, in a run of deadline: at two thirds of it, the last third
// left for the journeys of the items it held to end, and for a fault still
// under way to heal, before the consumers are stopped whatever is left.
func holdEnd(deadline time.Duration) time.Duration {
	return deadline - deadline/3
}

// held is the wait of an item whose time has come, with remaining items
// left to hand out (itself included); it returns a burst asked for
// meanwhile, and false when ctx ended.
func (r *run) held(ctx context.Context, remaining int, until time.Time) (burst int, ok bool) {
	if remaining > holdBack {
		return 0, true
	}
	every, goes := pace(remaining, r.inHand(), time.Until(until))
	released := time.Now().Add(every)
	tick := time.NewTicker(trickle / 4)
	defer tick.Stop()
	for !r.everyKindStruck() && time.Now().Before(until) && (!goes || time.Now().Before(released)) {
		select {
		case <-tick.C:
		case burst = <-r.burst:
			return burst, true
		case <-ctx.Done():
			return 0, false
		}
	}
	return 0, true
}

// pace is how long a held item waits, with remaining items left (itself
// included), reserve of them kept in hand, and left of the hold: the items
// beyond the reserve go spread over what is left, one every trickle at the
// most. goes is false for an item kept in hand.
func pace(remaining, reserve int, left time.Duration) (every time.Duration, goes bool) {
	if remaining <= reserve {
		return 0, false
	}
	return max(trickle, left/time.Duration(remaining-reserve)), true
}

// inHand is how many items the hold keeps for the burst of the forced stop
// under a burst: a burst's worth until that kind struck, none after it (nor
// in a run without it), so that the last items keep flowing for the kinds
// still to strike.
func (r *run) inHand() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n, ok := r.faults[faultForcedUnderBurst]; ok && n == 0 {
		return burstSize
	}
	return 0
}

// everyKindStruck reports whether every kind of fault the run counts has
// struck at least once.
func (r *run) everyKindStruck() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.faults {
		if n == 0 {
			return false
		}
	}
	return true
}

// send publishes message i until the broker confirms it, or ctx ends.
func (r *run) send(ctx context.Context, p *runtime.Publisher, i int) error {
	id := r.ids[i]
	for {
		msg := runtime.Message{RoutingKey: r.spec.Name, Publishing: runtime.NewPublishing(envelope.Message{Type: messageTyp}, 1, id, bodyOf(i))}
		stepCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := p.Send(stepCtx, msg)
		cancel()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("ledger: publishing %s: %w", id, ctx.Err())
		case errors.Is(err, runtime.ErrUnconfirmed), errors.Is(err, runtime.ErrNacked):
			r.mu.Lock()
			r.resent[id]++
			r.mu.Unlock()
		}
		time.Sleep(100 * time.Millisecond)
	}
}
