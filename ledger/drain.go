package ledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/faults"
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

// consumersGone is how long the drain waits for the run's queues to have
// no consumer left: the broker drops one as soon as it sees its connection
// closed.
const consumersGone = 10 * time.Second

// drain takes every message out of the run's queues, until two passes in a
// row find none (a pass waits out the retry bucket's delay, whose messages
// move to the main queue), and on a cluster until none came for
// clusterQuiet.
//
// A basic.get reaches only the messages ready: one delivered and not
// settled on a channel still open is in no queue it reaches, and the queue
// is deleted with it at the end. So drain first closes proxies, those the
// consumers went through (nil ones are skipped), whatever connection is left
// on them, and then has the broker close the run's consume connections by
// name, whichever way they reached it (on a cluster no proxy covers them),
// so that what a consumer still holds goes back to its queue; and each pass
// begins by asking the broker (a passive declare) how many consumers each
// queue has. The drain ends only after a pass that began with none on any
// queue, and found nothing: when a consumer goes, the broker returns what
// it held before it stops counting it. A consumer still there after
// consumersGone (one that reached the broker another way) ends the drain
// all the same, and is a problem naming its queue (r.heldLeft). A delivery
// held on a channel without a consumer (a basic.get without auto-ack, or
// one left after a basic.cancel) is counted by no passive declare: at the
// end the broker is asked how many messages each queue has unacknowledged,
// and a queue with any is a problem too. For the messages they hold, "in
// no queue" is not proven.
func (r *run) drain(proxies ...*faults.Proxy) (map[string][]found, error) {
	for _, p := range proxies {
		if p != nil {
			_ = p.Close()
		}
	}
	// The run's queue is its own, so no other run's connection has this
	// name. What this fails to close, the count of unacknowledged messages
	// at the end still finds.
	consume := faults.ConnectionName(r.spec.Name, "consume")
	_, _ = faults.CloseConnectionsVia(context.Background(), r.ctl, func(name string) bool { return name == consume }, "ledger drain")
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
	index := make(map[string]int, len(r.ids))
	for i, id := range r.ids {
		index[id] = i
	}
	queues := slices.Sorted(maps.Keys(fates))
	var copies []failure
	var bad []string
	var consumers map[string]int
	defer func() {
		var held []string
		for _, q := range slices.Sorted(maps.Keys(consumers)) {
			held = append(held, fmt.Sprintf("%s still had %d consumers at the end of the drain: what they held unacked was in no queue the drain read, so \"in no queue\" proves nothing of its messages", q, consumers[q]))
		}
		held = append(held, r.unacked(queues)...)
		r.mu.Lock()
		r.failures, r.badCopies, r.heldLeft = copies, bad, held
		r.mu.Unlock()
	}()
	out := map[string][]found{}
	start, last := time.Now(), time.Now()
	for empty := 0; empty < 2 || time.Since(last) < quiet || (len(consumers) > 0 && time.Since(start) < r.consumersGone); {
		time.Sleep(300 * time.Millisecond)
		if consumers, ch, err = consumersOn(conn, ch, queues); err != nil {
			return nil, err
		}
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
				i, ours := index[d.MessageId]
				if !ours {
					// A stray, which the accounting reports.
					out[d.MessageId] = append(out[d.MessageId], found{fate, 1, d.Redelivered})
					continue
				}
				attempt, f, wrong := r.copyFacts(&d, fate, i)
				if wrong != "" {
					bad = append(bad, fmt.Sprintf("%s: a copy in %s %s", d.MessageId, q, wrong))
				}
				if f.kind != "" {
					copies = append(copies, f)
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

// consumersOn counts the consumers on each of queues, those that have any,
// by a passive declare of each on ch (a queue not there has none; the
// broker closes ch for it, and the channel returned is a new one).
func consumersOn(conn *amqp.Connection, ch *amqp.Channel, queues []string) (map[string]int, *amqp.Channel, error) {
	consumers := map[string]int{}
	for _, q := range queues {
		info, err := ch.QueueDeclarePassive(q, false, false, false, false, nil)
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			if ch, err = conn.Channel(); err != nil {
				return nil, nil, err
			}
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		if info.Consumers > 0 {
			consumers[q] = info.Consumers
		}
	}
	return consumers, ch, nil
}

// unacked asks the broker how many messages each of queues has delivered
// and unacknowledged, and tells of each that has any, or of the question
// unanswered: such messages are in no queue a basic.get reaches.
func (r *run) unacked(queues []string) []string {
	out, err := r.ctl(context.Background(), "list_queues", "-q", "--no-table-headers", "name", "messages_unacknowledged")
	if err != nil {
		return []string{fmt.Sprintf("the broker was not asked how many messages the run's queues hold unacknowledged, so \"in no queue\" is unproven: %v", err)}
	}
	var held []string
	for line := range strings.Lines(out) {
		q, count, _ := strings.Cut(strings.TrimSpace(line), "\t")
		if n, err := strconv.Atoi(count); slices.Contains(queues, q) && (err != nil || n != 0) {
			held = append(held, fmt.Sprintf("%s had %s messages unacknowledged at the end of the drain: held on a channel still open, with or without a consumer, they were in no queue the drain read, so \"in no queue\" proves nothing of its messages", q, count))
		}
	}
	return held
}

// ctl runs rabbitmqctl with args on the run's broker: on a cluster, through
// its script, on the first node that answers.
func (r *run) ctl(ctx context.Context, args ...string) (string, error) {
	if r.cfg.Cluster != nil {
		return r.cfg.Cluster.do(ctx, append([]string{"ctl"}, args...)...)
	}
	return faults.Rabbitmqctl(ctx, args...)
}

// failure is what a retry or DLQ copy of a message of the run says of the
// failure that made it (its x-lily-failure-* headers), for the accounting
// to hold to how the ledger's handler ended its runs.
type failure struct {
	id   string
	fate Fate // where the copy was made for: a retry bucket (InBucket) or the DLQ
	kind string
	// attempt is the attempt that failed; limited: the copy went to the DLQ
	// at a quorum queue's delivery limit, whatever the failure.
	attempt int
	limited bool
}

// copyFacts reads d, a copy of the run's message i drained from a queue of
// fate: its attempt (1 when its header is missing or mistyped), the
// failure facts it carries, and what is wrong with it, or "". Every copy
// carries the message as the ledger published it (id, type, content type,
// version, body). A copy made by a handoff (in a bucket or the DLQ, or in
// the main queue back from a bucket) carries an int64 x-lily-attempt and
// its failure facts: the kind, the reason, the failed attempt (the one
// before its own, or its own in the DLQ) and the run's queue. The original
// carries neither: the ledger's publishes set no attempt. A DLQ copy that
// the broker dead-lettered from the run's queue at a quorum queue's
// delivery limit is held as it was there.
func (r *run) copyFacts(d *amqp.Delivery, fate Fate, i int) (int, failure, string) {
	f := failure{id: d.MessageId, fate: fate}
	kind, hasFacts := d.Headers[envelope.HeaderFailureKind]
	if fate == InDLQ && limitReached(d, r.spec.Name) {
		fate = InMain
	}
	attempt := 1
	a, present := d.Headers[envelope.HeaderAttempt]
	n, isInt := a.(int64)
	switch {
	case !present && (hasFacts || fate != InMain):
		return attempt, f, "carries no " + envelope.HeaderAttempt
	case !present:
	case !isInt:
		return attempt, f, fmt.Sprintf("carries %s %v, a %T, not an int64", envelope.HeaderAttempt, a, a)
	default:
		attempt = int(n)
	}
	switch {
	case d.Type != messageTyp || d.ContentType != "application/json":
		return attempt, f, fmt.Sprintf("has type %q and content type %q, not those published", d.Type, d.ContentType)
	case d.Headers[envelope.HeaderVersion] != int64(1):
		return attempt, f, fmt.Sprintf("carries %s %#v, not the int64 1 published", envelope.HeaderVersion, d.Headers[envelope.HeaderVersion])
	case !bytes.Equal(d.Body, bodyOf(i)):
		return attempt, f, fmt.Sprintf("has the body %.40q, not the %q published", d.Body, bodyOf(i))
	case !hasFacts && fate == InMain && attempt == 1:
		return attempt, f, "" // the original
	case !hasFacts:
		return attempt, f, fmt.Sprintf("of attempt %d carries no %s", attempt, envelope.HeaderFailureKind)
	}
	f.fate = InBucket
	want := attempt - 1
	if fate == InDLQ {
		f.fate, want = InDLQ, attempt
	}
	failed, ok := d.Headers[envelope.HeaderFailureAttempt].(int64)
	reason, _ := d.Headers[envelope.HeaderFailureReason].(string)
	f.kind, _ = kind.(string)
	f.attempt, f.limited = int(failed), strings.HasPrefix(reason, "delivery limit ")
	_, stamped := d.Headers[envelope.HeaderFailureTime].(time.Time)
	switch {
	case f.kind == "":
		return attempt, f, fmt.Sprintf("carries %s %#v, not a failure's kind", envelope.HeaderFailureKind, kind)
	case !ok || int(failed) != want:
		return attempt, f, fmt.Sprintf("of attempt %d carries %s %#v, not the int64 %d", attempt, envelope.HeaderFailureAttempt, d.Headers[envelope.HeaderFailureAttempt], want)
	case d.Headers[envelope.HeaderFailureQueue] != r.spec.Name:
		return attempt, f, fmt.Sprintf("carries %s %#v, not the run's queue", envelope.HeaderFailureQueue, d.Headers[envelope.HeaderFailureQueue])
	case reason == "":
		return attempt, f, fmt.Sprintf("carries %s %#v, not a reason", envelope.HeaderFailureReason, d.Headers[envelope.HeaderFailureReason])
	case !stamped:
		return attempt, f, fmt.Sprintf("carries %s %#v, not a time", envelope.HeaderFailureTime, d.Headers[envelope.HeaderFailureTime])
	}
	return attempt, f, ""
}

// limitReached says whether the broker dead-lettered d from queue at its
// delivery limit, by any of its x-death: a fault that sets the DLQ's
// messages aside dead-letters them again, for another reason, and that
// death comes first. A message leaves the DLQ only for that fault's queue
// and back, so the limit ended its journey.
func limitReached(d *amqp.Delivery, queue string) bool {
	deaths, _ := d.Headers["x-death"].([]any)
	return slices.ContainsFunc(deaths, func(death any) bool {
		t, _ := death.(amqp.Table)
		return t["reason"] == "delivery_limit" && t["queue"] == queue
	})
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
