package ledger

import (
	"context"
	"errors"
	"maps"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/queue"
)

// found is one copy of a message found in a queue at the end.
type found struct {
	fate    Fate
	attempt int
}

// drain takes every message out of the run's queues, until a whole pass
// finds none (a pass waits out the retry bucket's delay, whose messages move
// to the main queue).
func (r *run) drain() (map[string][]found, error) {
	conn, err := amqp.Dial(r.cfg.BrokerURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	fates := map[string]Fate{r.spec.Name: InMain, r.spec.Topology.DeadLetterQueue: InDLQ}
	for _, d := range r.spec.Topology.RetryDelays {
		fates[queue.RetryBucket(r.spec.Name, d)] = InBucket
	}
	for q, f := range maps.Clone(fates) {
		fates[q+".faults-aside"] = f // left over only if a heal failed
	}
	out := map[string][]found{}
	for empty := 0; empty < 2; {
		time.Sleep(300 * time.Millisecond)
		got := 0
		for q, fate := range fates {
			for {
				d, ok, err := ch.Get(q, true)
				var ae *amqp.Error
				if errors.As(err, &ae) && ae.Code == amqp.NotFound {
					if ch, err = conn.Channel(); err != nil {
						return nil, err
					}
					break
				}
				if err != nil {
					return nil, err
				}
				if !ok {
					break
				}
				got++
				attempt := 1
				if a, ok := d.Headers["x-lily-attempt"].(int64); ok {
					attempt = int(a)
				}
				out[d.MessageId] = append(out[d.MessageId], found{fate, attempt})
			}
		}
		if got == 0 {
			empty++
		} else {
			empty = 0
		}
	}
	return out, nil
}

// inboxRows counts the business rows each message committed.
func (r *run) inboxRows(ctx context.Context) (map[string]int, error) {
	rows := map[string]int{}
	if r.pool == nil {
		return rows, nil
	}
	res, err := r.pool.Query(ctx, "SELECT message_id, count(*) FROM "+r.table+" GROUP BY message_id")
	if err != nil {
		return nil, err
	}
	defer res.Close()
	for res.Next() {
		var id string
		var n int
		if err := res.Scan(&id, &n); err != nil {
			return nil, err
		}
		rows[id] = n
	}
	return rows, res.Err()
}
