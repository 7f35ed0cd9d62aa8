package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lily-mq/lily/internal/backoff"
	amqp "github.com/rabbitmq/amqp091-go"
)

// errNeverConnected marks a Run that ended because its first connection
// failed: a fault struck while it connected. A 406 is not one: the broker
// refusing the topology is a broken promise, not bad luck.
var errNeverConnected = errors.New("the consumer's first connection failed")

// failedStart counts a consumer that never connected and pauses before the
// next, as a supervisor restarting a process would. Like a supervisor it
// gives up on a consumer that never connects: a fault lasts at most three
// seconds and each failed start at least 100 ms, so fifty in a row are a
// setup error (credentials, vhost).
func (r *run) failedStart(ctx context.Context, err error) error {
	r.failedInARow++
	if r.failedInARow == 50 {
		return fmt.Errorf("ledger: %d consumers in a row never connected: %w", r.failedInARow, err)
	}
	r.mu.Lock()
	r.failedStarts++
	r.mu.Unlock()
	backoff.Sleep(ctx, 100*time.Millisecond)
	return nil
}

func refused(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed
}

// waitingFor names up to n ids whose journey is not over, with their records.
func (r *run) waitingFor(n int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ids)-len(r.done) > n {
		return ""
	}
	var b strings.Builder
	for _, id := range r.ids {
		if !r.done[id] {
			fmt.Fprintf(&b, "; waiting for %s (%s): %s", id, r.beh[id], paths(r.byID[id]))
		}
	}
	return b.String()
}

// await returns when every id's journey is over or at the deadline, or
// with restart when a fault asks for a new consumer (forced: the old one
// stopped with Force); it returns an error when the consumer stopped by
// itself or the publisher failed.
func (r *run) await(ctx context.Context, ran, published <-chan error) (restart, forced bool, err error) {
	deadline := time.After(time.Until(r.deadline))
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	lastProgress := time.Now()
	for {
		r.mu.Lock()
		done, records := len(r.done), len(r.records)
		r.mu.Unlock()
		if done == len(r.ids) {
			return false, false, nil
		}
		if r.cfg.Progress != nil && time.Since(lastProgress) > 5*time.Second {
			lastProgress = time.Now()
			fmt.Fprintf(r.cfg.Progress, "ledger: %d of %d messages through, %d records, faults %v%s\n", done, len(r.ids), records, r.faultCounts(), r.waitingFor(3))
		}
		select {
		case err := <-ran:
			if err == nil {
				err = errors.New("the consumer stopped by itself")
			}
			return false, false, err
		case err := <-published:
			if err != nil {
				return false, false, err
			}
		case forced := <-r.restart:
			return true, forced, nil
		case <-deadline:
			r.pastDeadline.Store(true)
			return false, false, nil
		case <-ctx.Done():
			r.interrupted.Store(true)
			return false, false, nil
		case <-tick.C:
		}
	}
}
