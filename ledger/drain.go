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
	// redelivered: the broker had delivered this copy before, so it came
	// back from a consumer (see settleLost).
	redelivered bool
}

// clusterQuiet is how long the queues of a run on a cluster must stay empty
// before the drain ends: more than twice the time the nodes' dead-letter
// worker waits before it publishes an expired copy of a quorum bucket again
// (.ci/cluster sets it to 5 s), whose first publish a killed node may have
// lost. Until then the copy is in no queue a Get can reach.
const clusterQuiet = 12 * time.Second

// drain takes every message out of the run's queues, until a whole pass
// finds none (a pass waits out the retry bucket's delay, whose messages move
// to the main queue), and on a cluster until none came for clusterQuiet.
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
	quiet := time.Duration(0)
	if r.cfg.Cluster != nil {
		quiet = clusterQuiet
	}
	out := map[string][]found{}
	last := time.Now()
	for empty := 0; empty < 2 || time.Since(last) < quiet; {
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
				out[d.MessageId] = append(out[d.MessageId], found{fate, attempt, d.Redelivered})
			}
		}
		if got == 0 {
			empty++
		} else {
			empty, last = 0, time.Now()
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
