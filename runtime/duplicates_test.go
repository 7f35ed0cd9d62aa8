package runtime_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
)

// dupInbox claims every id once: a second claim of an id answers ErrDuplicate.
type dupInbox struct {
	mu   sync.Mutex
	done map[string]bool
}

func (i *dupInbox) Begin(_ context.Context, _, id string) (runtime.InboxTx, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.done[id] {
		return nil, errors.Join(runtime.ErrDuplicate, errors.New("claimed before"))
	}
	return dupTx{i, id}, nil
}

type dupTx struct {
	i  *dupInbox
	id string
}

func (t dupTx) Bind(ctx context.Context) context.Context { return ctx }

func (t dupTx) Commit(context.Context) error {
	t.i.mu.Lock()
	defer t.i.mu.Unlock()
	t.i.done[t.id] = true
	return nil
}

func (dupTx) Rollback(context.Context) {}

// An inbox duplicate is counted in the report and logged at info with a key
// of its own, not passed off as a plain ACK.
func TestBrokerInboxDuplicatesAreCounted(t *testing.T) {
	t.Parallel()
	// One at a time: two copies of d-1 in flight together would make the
	// second wait (deferred) rather than meet the committed claim.
	q := brokerSpec(t, func(q *runtime.QueueSpec) { q.Concurrency, q.Prefetch = 1, 1 })
	declareTopology(t, q)
	ran := make(chan string, 8)
	r := start(t, q, handler(func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		ran <- msg.OrderID
		return nil
	}), func(cfg *runtime.Config) { cfg.Inbox = &dupInbox{done: map[string]bool{}} })
	publish(t, q.Name, order(t, "d-1"))
	r.await(1)
	publish(t, q.Name, order(t, "d-1"), order(t, "d-1"), order(t, "d-2"))
	r.await(4)
	rep := r.stop()
	if rep.Duplicates != 2 || rep.Counts[runtime.PathAcked] != 4 || len(ran) != 2 {
		t.Errorf("duplicates %d, acked %d, handler ran %d times; want 2, 4, 2", rep.Duplicates, rep.Counts[runtime.PathAcked], len(ran))
	}
	if !strings.Contains(rep.String(), "2 inbox duplicates") {
		t.Errorf("summary %q", rep.String())
	}
	dups := 0
	for _, ev := range r.events.all() {
		if ev.stage == "settled" && ev.duplicate {
			dups++
			if ev.level != slog.LevelInfo || ev.messageID != "d-1" {
				t.Errorf("duplicate logged as %+v", ev)
			}
		}
	}
	if dups != 2 {
		t.Errorf("%d settled events marked duplicate, want 2", dups)
	}
	assertCounts(t, map[string][2]int{q.Name: {0, 0}, q.Topology.DeadLetterQueue: {0, 0}})
}
