package settle

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lily-mq/lily/runtime/internal/outcome"
	"github.com/lily-mq/lily/runtime/internal/step"
)

// frames records what a settler writes, in order; after is called after
// each write, when set.
type frames struct {
	written []string
	fail    bool
	after   func()
}

func (f *frames) Ack(tag uint64, multiple bool) error {
	f.written = append(f.written, fmt.Sprintf("ack %d multiple=%t", tag, multiple))
	return f.err()
}

func (f *frames) Nack(tag uint64, multiple, requeue bool) error {
	f.written = append(f.written, fmt.Sprintf("nack %d multiple=%t requeue=%t", tag, multiple, requeue))
	return f.err()
}

func (f *frames) err() error {
	if f.after != nil {
		f.after()
	}
	if f.fail {
		return errors.New("write failed")
	}
	return nil
}

// The settler's choice of frames for one batch: a multiple ACK covers exactly
// the ACKs that are the lowest unsettled tags; every other settlement is
// written alone, NACKs before ACKs.
func TestSettlerWriteChoosesFrames(t *testing.T) {
	ack := func(tag uint64) *settlement { return &settlement{tag: tag, written: make(chan error, 1)} }
	nack := func(tag uint64, requeue bool) *settlement {
		return &settlement{tag: tag, nack: true, requeue: requeue, written: make(chan error, 1)}
	}
	for _, tc := range []struct {
		name     string
		received []uint64
		before   [][]*settlement // earlier batches
		batch    []*settlement
		want     []string
		left     []uint64 // unsettled afterwards
	}{
		{
			name: "a run from the lowest tag is one multiple ACK", received: []uint64{1, 2, 3, 4},
			batch: []*settlement{ack(3), ack(1), ack(2)},
			want:  []string{"ack 3 multiple=true"}, left: []uint64{4},
		},
		{
			name: "an ACK above an unsettled tag is written alone", received: []uint64{1, 2, 3, 4, 5},
			batch: []*settlement{ack(1), ack(2), ack(4), ack(5)},
			want:  []string{"ack 2 multiple=true", "ack 4 multiple=false", "ack 5 multiple=false"}, left: []uint64{3},
		},
		{
			name: "a NACK in the batch is written first and the run goes past it", received: []uint64{1, 2, 3, 4},
			batch: []*settlement{ack(1), nack(2, true), ack(3)},
			want:  []string{"nack 2 multiple=false requeue=true", "ack 3 multiple=true"}, left: []uint64{4},
		},
		{
			name: "tags settled by earlier batches do not stop a run", received: []uint64{1, 2, 3, 4, 5},
			before: [][]*settlement{{ack(2)}, {nack(3, false)}},
			batch:  []*settlement{ack(4), ack(1)},
			want:   []string{"ack 2 multiple=false", "nack 3 multiple=false requeue=false", "ack 4 multiple=true"}, left: []uint64{5},
		},
		{
			name: "a lone ACK is never multiple", received: []uint64{7, 8},
			batch: []*settlement{ack(7)},
			want:  []string{"ack 7 multiple=false"}, left: []uint64{8},
		},
		{
			name: "a delivery left unsettled keeps later ACKs single", received: []uint64{1, 2, 3},
			batch: []*settlement{ack(2), ack(3)},
			want:  []string{"ack 2 multiple=false", "ack 3 multiple=false"}, left: []uint64{1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &frames{}
			s := &Settler{ch: f, gen: &Generation{}}
			for _, tag := range tc.received {
				s.Received(tag, time.Now())
			}
			for _, b := range append(tc.before, tc.batch) {
				s.write(b)
				for _, st := range b {
					if err := <-st.written; err != nil {
						t.Fatalf("settlement of %d: %v", st.tag, err)
					}
				}
			}
			if d := cmp.Diff(tc.want, f.written); d != "" {
				t.Errorf("frames (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.left, s.unsettled); d != "" {
				t.Errorf("unsettled (-want +got):\n%s", d)
			}
		})
	}
}

// A generation revoked while its settler writes a batch (the final abort, a
// lost channel) has no frame of that batch written after the revocation.
func TestSettlerWritesNothingOnceRevokedMidBatch(t *testing.T) {
	for _, revokeAfter := range []int{1, 2, 3} {
		t.Run(fmt.Sprint("after ", revokeAfter, " frames"), func(t *testing.T) {
			gen := &Generation{}
			f := &frames{}
			f.after = func() {
				if len(f.written) == revokeAfter {
					gen.Revoke()
				}
			}
			s := &Settler{ch: f, gen: gen}
			for tag := uint64(1); tag <= 6; tag++ {
				s.Received(tag, time.Now())
			}
			st := func(tag uint64, nack bool) *settlement {
				return &settlement{tag: tag, nack: nack, written: make(chan error, 1)}
			}
			// Five frames: nack 2, nack 4, then ack 1, ack 5 and ack 6,
			// each alone (3 stays unsettled).
			batch := []*settlement{st(1, false), st(2, true), st(4, true), st(5, false), st(6, false)}
			s.write(batch)
			if len(f.written) != revokeAfter {
				t.Errorf("frames written %q; want the %d before the revocation", f.written, revokeAfter)
			}
			revoked := 0
			for _, st := range batch {
				if err := <-st.written; errors.Is(err, errRevoked) {
					revoked++
				}
			}
			if revoked == 0 {
				t.Error("no settlement was told its generation was revoked")
			}
		})
	}
}

// A NACK whose write failed stays unsettled, so no later multiple ACK can
// cover it; a revoked generation writes nothing.
func TestSettlerNeverCoversWhatItCouldNotSettle(t *testing.T) {
	f := &frames{fail: true}
	s := &Settler{ch: f, gen: &Generation{}}
	for tag := uint64(1); tag <= 3; tag++ {
		s.Received(tag, time.Now())
	}
	failed := &settlement{tag: 1, nack: true, written: make(chan error, 1)}
	s.write([]*settlement{failed})
	if err := <-failed.written; err == nil {
		t.Fatal("the failed NACK was reported written")
	}
	f.fail = false
	acks := []*settlement{{tag: 2, written: make(chan error, 1)}, {tag: 3, written: make(chan error, 1)}}
	s.write(acks)
	want := []string{"nack 1 multiple=false requeue=false", "ack 2 multiple=false", "ack 3 multiple=false"}
	if d := cmp.Diff(want, f.written); d != "" {
		t.Errorf("frames (-want +got):\n%s", d)
	}

	s.gen.Revoke()
	late := &settlement{tag: 1, written: make(chan error, 1)}
	s.write([]*settlement{late})
	if err := <-late.written; !errors.Is(err, errRevoked) || len(f.written) != 3 {
		t.Errorf("after the revocation: %v, frames %q", err, f.written)
	}
}

// A settlement handed to a settler that has stopped was never written, nor
// one the loop did not take by the deadline (its queue full behind a write
// that does not return): the authority says not attempted. One the loop took
// and did not answer in time is ambiguous (TestSettlerStuckWriteDoesNotHoldTheClose).
func TestSettlerStoppedOrStuck(t *testing.T) {
	gen := &Generation{}
	s := &Settler{ch: &frames{}, gen: gen, todo: make(chan *settlement), stop: make(chan struct{}), exited: make(chan struct{})}
	gen.Settler = s
	st := &settlement{tag: 1, written: make(chan error, 1)}
	if _, err := s.settle(st, time.Now().Add(50*time.Millisecond)); !errors.Is(err, errNotHandedOver) {
		t.Errorf("no loop running: %v, want not handed over", err)
	}
	if ev := NewAuthority(1, gen).Ack(time.Now().Add(50 * time.Millisecond)); ev.Status != outcome.SettlementNotAttempted {
		t.Errorf("no loop running: the authority says %v (%s), want not attempted", ev.Status, ev.Detail)
	}
	close(s.exited)
	if _, err := s.settle(st, time.Now().Add(time.Second)); !errors.Is(err, errNotWritten) {
		t.Errorf("loop exited: %v, want not written", err)
	}
}

// An authority whose generation is revoked (the channel lost, the final
// abort) answers not attempted at once, with nothing handed to the settler:
// neither a settler whose loop is not running, which would hold it until its
// deadline, nor one whose loop has exited, which would call it a closed
// channel. The deadline is an hour away: only the revocation ends the wait.
func TestAuthorityRevokedHandsNothingOver(t *testing.T) {
	for _, exited := range []bool{false, true} {
		t.Run(fmt.Sprint("loop exited ", exited), func(t *testing.T) {
			gen := &Generation{}
			// A queue with room: a settlement handed over stays in it.
			s := &Settler{ch: &frames{}, gen: gen, todo: make(chan *settlement, 1), stop: make(chan struct{}), exited: make(chan struct{})}
			if exited {
				close(s.exited)
			}
			gen.Settler = s
			gen.Revoke()
			answer := make(chan outcome.SettlementEvidence, 1)
			go func() { answer <- NewAuthority(1, gen).Ack(time.Now().Add(time.Hour)) }()
			select {
			case ev := <-answer:
				if ev.Status != outcome.SettlementNotAttempted || ev.Detail != revokedDetail {
					t.Errorf("revoked: the authority says %v (%s), want not attempted, %q", ev.Status, ev.Detail, revokedDetail)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("revoked: the authority waited for its deadline")
			}
			if n := len(s.todo); n != 0 {
				t.Errorf("revoked: %d settlements handed to the settler, want none", n)
			}
		})
	}
}

// A settler whose loop has returned has stopped, even when the wait for it
// has ended too: the close's deadline may have passed by the time it asks.
func TestSettlerStoppedWhateverTheDeadline(t *testing.T) {
	s := NewSettler(&frames{}, &Generation{}, 4)
	s.Close()
	if !s.Stopped(context.Background()) {
		t.Fatal("not stopped after the close")
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 1000 {
		if !s.Stopped(ended) {
			t.Fatalf("call %d: not stopped, its deadline passed", i)
		}
	}
}

// stuck is a channel whose writes never return, as on a dead connection
// with a full send buffer.
type stuck struct{ release chan struct{} }

func (s stuck) Ack(uint64, bool) error        { <-s.release; return nil }
func (s stuck) Nack(uint64, bool, bool) error { <-s.release; return nil }

// A write stuck on the connection leaves its delivery ambiguous at the
// deadline, and does not hold up the settler's close; the settler has not
// stopped (a frame may still follow) until the write returns.
func TestSettlerStuckWriteDoesNotHoldTheClose(t *testing.T) {
	ch := stuck{release: make(chan struct{})}
	s := NewSettler(ch, &Generation{}, 4)
	s.Received(1, time.Now())
	st := &settlement{tag: 1, written: make(chan error, 1)}
	if _, err := s.settle(st, time.Now().Add(100*time.Millisecond)); !errors.Is(err, step.ErrTimeout) {
		t.Fatalf("stuck write: %v, want the step timeout", err)
	}
	closed := make(chan struct{})
	go func() {
		s.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(time.Second):
		t.Fatal("close waited for the stuck write")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if s.Stopped(ctx) {
		t.Error("stopped while a write was still running")
	}
	// Health reads the stuck write's start to tell a wedged settler.
	if since := s.WritingSince(); since.IsZero() || time.Since(since) < 100*time.Millisecond {
		t.Errorf("writing since %v, while the write has run longer than the step", since)
	}
	close(ch.release)
	if !s.Stopped(context.Background()) {
		t.Error("not stopped after the write returned")
	}
	if since := s.WritingSince(); !since.IsZero() {
		t.Errorf("writing since %v after the write returned", since)
	}
}

// Oldest times a delivery from its receipt, or, for one received with a
// zero time, from when Started says its journey began; one still waiting
// counts for nothing.
func TestSettlerOldestSkipsTheWaiting(t *testing.T) {
	s := NewSettler(&frames{}, &Generation{}, 4)
	defer s.Close()
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	s.Received(1, time.Time{})
	s.Received(2, t0.Add(time.Second))
	if got := s.Oldest(); !got.Equal(t0.Add(time.Second)) {
		t.Errorf("Oldest = %v, want the receipt of 2", got)
	}
	s.Started(1, t0.Add(2*time.Second))
	if got := s.Oldest(); !got.Equal(t0.Add(time.Second)) {
		t.Errorf("Oldest = %v, want the receipt of 2, before 1 started", got)
	}
	s.settled(2)
	if got := s.Oldest(); !got.Equal(t0.Add(2 * time.Second)) {
		t.Errorf("Oldest = %v, want the start of 1", got)
	}
}
