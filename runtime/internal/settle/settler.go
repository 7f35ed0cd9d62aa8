package settle

import (
	"cmp"
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lily-mq/lily/runtime/internal/step"
)

// A settler writes one consumer channel's ACKs and NACKs from a single
// goroutine. Deliveries hand it their settlement and wait for the write to
// return, as they would for their own. What it gains: no goroutine per write,
// and ACKs that arrive together leave in one frame. A basic.ack with
// multiple=true acknowledges every outstanding delivery up to its tag, so the
// settler uses one only when every delivery still unsettled up to that tag is
// being ACKed in the same batch; it never holds an ACK back to make a batch.

// errNotWritten: the settler stopped (its session ended) before it wrote the
// frame, so nothing reached the broker.
var errNotWritten = errors.New("the channel's settler stopped before the write")

// errNotHandedOver: the loop did not take the settlement by its deadline,
// busy with a write that does not return and its queue full: nothing was
// written.
var errNotHandedOver = errors.New("the channel's settler did not take the settlement in time")

// errRevoked: the generation was revoked after the settlement was handed over
// and before its write; nothing was written.
var errRevoked = errors.New("authority revoked before the write")

// Acker is what the settler writes on: the consumer channel.
type Acker interface {
	Ack(tag uint64, multiple bool) error
	Nack(tag uint64, multiple, requeue bool) error
}

// settlement is one delivery's ACK or NACK, handed to the settler.
type settlement struct {
	tag           uint64
	nack, requeue bool
	written       chan error // the write's result; buffered, written once
}

type Settler struct {
	ch   Acker
	gen  *Generation
	todo chan *settlement
	stop chan struct{}
	// exited is closed once the loop has returned: a settlement it did not
	// answer by then was never written.
	exited chan struct{}
	// writing is when the loop began the batch it is writing (Unix ns), 0
	// between batches: a write that never returns is a wedged settler.
	writing atomic.Int64

	mu sync.Mutex
	// unsettled lists the tags received on the channel and not yet settled,
	// ascending (tags grow in delivery order). The broker bounds it by the
	// prefetch: an unsettled delivery is an unacknowledged one. since[i] is
	// when unsettled[i] was received.
	unsettled []uint64
	since     []time.Time
	// last is the last tag received.
	last uint64
}

// NewSettler starts the settler of gen, writing on ch; prefetch bounds what
// it holds.
func NewSettler(ch Acker, gen *Generation, prefetch int) *Settler {
	s := &Settler{
		ch: ch, gen: gen, todo: make(chan *settlement, prefetch),
		stop: make(chan struct{}), exited: make(chan struct{}),
		unsettled: make([]uint64, 0, prefetch), since: make([]time.Time, 0, prefetch),
	}
	go s.loop()
	return s
}

// Received registers a delivery's tag, received at (a zero time for one
// whose journey starts later: Started times it then). The consumer calls it
// for every delivery, in the order the channel hands them over, before the
// delivery can be settled: a multiple ACK must never cover a tag the settler
// has not seen.
func (s *Settler) Received(tag uint64, at time.Time) {
	s.mu.Lock()
	s.unsettled = append(s.unsettled, tag)
	s.since = append(s.since, at)
	s.last = tag
	s.mu.Unlock()
}

// Holding reports the last tag received and how many of those received are
// unsettled: by the consumer's count, the channel's unacknowledged.
func (s *Settler) Holding() (last uint64, unsettled int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, len(s.unsettled)
}

// Started times the delivery of tag from at rather than from its receipt:
// one received with a zero time, which waited before its journey began.
func (s *Settler) Started(tag uint64, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := slices.BinarySearch(s.unsettled, tag); ok {
		s.since[i] = at
	}
}

// Oldest is when the delivery unsettled the longest was received (or
// started); zero when every delivery received is settled, or has yet to
// start. A delivery left unresolved stays unsettled: its channel still
// holds it.
func (s *Settler) Oldest() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var oldest time.Time
	for _, at := range s.since {
		if !at.IsZero() && (oldest.IsZero() || at.Before(oldest)) {
			oldest = at
		}
	}
	return oldest
}

// Close stops the loop once it has answered what it already took. It does
// not wait: a write stuck on a dead connection must not hold up the session's
// end, and whoever waits for a settlement is bounded by its own deadline.
func (s *Settler) Close() { close(s.stop) }

// Stopped waits, until ctx ends, for the loop to return after close, and
// reports whether it did: once it has, no frame of this settler can follow.
func (s *Settler) Stopped(ctx context.Context) bool {
	select {
	case <-s.exited:
		return true
	case <-ctx.Done():
		// A loop that had returned by then has stopped, whichever case
		// the select picked.
		select {
		case <-s.exited:
			return true
		default:
			return false
		}
	}
}

// settle hands st to the loop and waits for the write to return, until the
// deadline at the latest (errNotHandedOver when the loop never took it;
// step.ErrTimeout when it did: the frame may still be written).
// answered reports whether the loop's answer was received: the loop is then
// done with st, which may be used again.
func (s *Settler) settle(st *settlement, deadline time.Time) (answered bool, err error) {
	t := step.Timer(deadline)
	defer step.Release(t)
	select {
	case s.todo <- st:
	case <-s.exited:
		return false, errNotWritten
	case <-t.C:
		return false, errNotHandedOver
	}
	select {
	case err := <-st.written:
		return true, err
	case <-s.exited:
		// The loop answers every settlement it took before it exits.
		select {
		case err := <-st.written:
			return true, err
		default:
			return false, errNotWritten
		}
	case <-t.C:
		return false, step.ErrTimeout
	}
}

func (s *Settler) loop() {
	defer close(s.exited)
	var batch []*settlement
	for {
		select {
		case st := <-s.todo:
			batch = append(batch[:0], st)
		case <-s.stop:
			return
		}
		// One yield lets deliveries that are finishing hand over their
		// settlements too: ACKs then leave together, a few microseconds later.
		runtime.Gosched()
	more:
		for len(batch) < cap(s.todo) {
			select {
			case st := <-s.todo:
				batch = append(batch, st)
			default:
				break more
			}
		}
		s.writing.Store(time.Now().UnixNano())
		s.write(batch)
		s.writing.Store(0)
	}
}

// WritingSince is when the batch being written began; zero when the settler
// is waiting for work.
func (s *Settler) WritingSince() time.Time {
	if at := s.writing.Load(); at != 0 {
		return time.Unix(0, at)
	}
	return time.Time{}
}

// write settles one batch: NACKs first, each alone (a multiple ACK must not
// cover them before they are written), then the ACKs, the run of them that
// starts at the lowest unsettled tag as one multiple ACK and the rest alone.
// The generation's authority is looked at before each frame: the final abort
// or a lost channel may revoke it while a batch is being written.
func (s *Settler) write(batch []*settlement) {
	acks := batch[:0:0]
	for _, st := range batch {
		if !st.nack {
			acks = append(acks, st)
			continue
		}
		if s.gen.Revoked() {
			st.written <- errRevoked
			continue
		}
		err := s.ch.Nack(st.tag, false, st.requeue)
		if err == nil {
			s.settled(st.tag)
		}
		st.written <- err
	}
	if len(acks) == 0 {
		return
	}
	slices.SortFunc(acks, func(a, b *settlement) int { return cmp.Compare(a.tag, b.tag) })
	if s.gen.Revoked() {
		for _, st := range acks {
			st.written <- errRevoked
		}
		return
	}
	run := s.leadingRun(acks)
	if run > 1 {
		err := s.ch.Ack(acks[run-1].tag, true)
		for _, st := range acks[:run] {
			st.written <- err
		}
		acks = acks[run:]
	}
	for _, st := range acks {
		if s.gen.Revoked() {
			st.written <- errRevoked
			continue
		}
		err := s.ch.Ack(st.tag, false)
		if err == nil {
			s.settled(st.tag)
		}
		st.written <- err
	}
}

// leadingRun counts the sorted ACKs that are exactly the lowest unsettled
// tags, and marks them settled: one multiple ACK at the last of them covers
// them and nothing else.
func (s *Settler) leadingRun(acks []*settlement) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for n < len(acks) && n < len(s.unsettled) && s.unsettled[n] == acks[n].tag {
		n++
	}
	if n > 1 {
		s.unsettled = slices.Delete(s.unsettled, 0, n)
		s.since = slices.Delete(s.since, 0, n)
	}
	return n
}

// settled removes one tag from the unsettled list.
func (s *Settler) settled(tag uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := slices.BinarySearch(s.unsettled, tag); ok {
		s.unsettled = slices.Delete(s.unsettled, i, i+1)
		s.since = slices.Delete(s.since, i, i+1)
	}
}
