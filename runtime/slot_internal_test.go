package runtime

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// A retry waiting in line lends its slot out: taken anew after the wait,
// kept by a handler past its timeout, and owed (not freed twice) when the
// stop, or the channel's loss, came first.
func TestSlotLend(t *testing.T) {
	stop := make(chan struct{})
	later := time.Now().Add(time.Hour)
	slots := make(chan struct{}, 1)
	take := func() *slot {
		slots <- struct{}{}
		s := &slot{slots: slots}
		s.hold()
		return s
	}

	s := take()
	freed := false
	if !s.lend(func() bool { freed = len(slots) == 0; return true }, stop, nil, later) {
		t.Fatal("lend after a wait that ended reported false")
	}
	if !freed || len(slots) != 1 {
		t.Fatalf("slot freed during the wait %v, taken after it %v", freed, len(slots) == 1)
	}
	s.release()
	if len(slots) != 0 {
		t.Fatal("the last release kept the slot")
	}

	// A handler past its timeout holds the slot through the wait.
	s = take()
	s.hold()
	if !s.lend(func() bool { return len(slots) == 1 }, stop, nil, later) {
		t.Fatal("the slot was freed while a handler still held it")
	}
	s.release()
	s.release()
	if len(slots) != 0 {
		t.Fatalf("%d slots held after both releases", len(slots))
	}

	// The stop came first: no slot is taken, and none is freed at the end.
	s = take()
	if s.lend(func() bool { return false }, stop, nil, later) {
		t.Fatal("lend reported true after a wait cut short")
	}
	s.release()
	if len(slots) != 0 {
		t.Fatal("a slot is held after the stop")
	}

	// Another delivery took the slot meanwhile, and the budget the call
	// needs is spent before it is free again.
	s = take()
	if s.lend(func() bool { slots <- struct{}{}; return true }, stop, nil, time.Now().Add(10*time.Millisecond)) {
		t.Fatal("lend took a slot that was not free")
	}
	s.release()
	if len(slots) != 1 {
		t.Fatalf("%d slots held, want only the other delivery's", len(slots))
	}
	<-slots

	// Another delivery took the slot meanwhile, and the stop comes before
	// it is free again.
	s = take()
	close(stop)
	if s.lend(func() bool { slots <- struct{}{}; return true }, stop, nil, later) {
		t.Fatal("lend took a slot that was not free")
	}
	s.release()
	if len(slots) != 1 {
		t.Fatalf("%d slots held, want only the other delivery's", len(slots))
	}
	<-slots

	// Another delivery took the slot meanwhile, and the channel is lost
	// before it is free again.
	s = take()
	lost := make(chan struct{})
	close(lost)
	if s.lend(func() bool { slots <- struct{}{}; return true }, nil, lost, later) {
		t.Fatal("lend took a slot that was not free")
	}
	s.release()
	if len(slots) != 1 {
		t.Fatalf("%d slots held, want only the other delivery's", len(slots))
	}
}

// A requeue's pause ends when its delivery's channel is lost: the NACK it
// paces can no longer be sent, and the slot it holds is another's to take.
func TestPauseEndsWithTheChannel(t *testing.T) {
	r := &run{stopping: make(chan struct{})}
	lost := make(chan struct{})
	close(lost)
	done := make(chan bool, 1)
	go func() { done <- r.pause(time.Hour, lost) }()
	select {
	case waited := <-done:
		if waited {
			t.Error("pause reported its whole delay waited")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("pause waits on past the loss of its channel")
	}
}

// A delivery waiting for a slot ends at once when its channel is lost,
// after a broker cancel that left the channel healthy too: not once a slow
// handler frees the slot, nor at the recycle. It is not started, and its
// record, unresolved, says its session was lost (the broker redelivers
// it); the slot stays the handler's.
func TestAwaitSlotEndsWhenTheChannelIsLost(t *testing.T) {
	spec := laneSpec()
	spec.OrderKey = nil
	c, records := recordLines(t, spec, pathAndReason)
	for _, cancelled := range []bool{false, true} {
		records() // the last case's
		r, s := laneSession(c)
		told := make(chan error, 1)
		s.lostAfterCancel = func(why error) { told <- why }
		r.slots <- struct{}{} // a slow handler holds the only slot
		if cancelled {
			s.lose(errCancelled)
		}
		type result struct {
			ok  bool
			err error
		}
		done := make(chan result, 1)
		go func() {
			ok, err := c.awaitSlot(context.Background(), r, s, &amqp.Delivery{DeliveryTag: 1, MessageId: "m-1"})
			done <- result{ok, err}
		}()
		s.broke(&amqp.Error{Code: amqp.ChannelError, Reason: "gone"})
		var res result
		select {
		case res = <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("cancelled first %v: awaitSlot waits on for a slot after the channel's loss", cancelled)
		}
		// After a cancel the session retires, as when the loss ends the
		// client's buffer; the loss was told as it came.
		want := error(errCancelled)
		if !cancelled {
			want = s.why
		}
		if res.ok || res.err != want {
			t.Errorf("cancelled first %v: awaitSlot = %v, %v; want false, %v", cancelled, res.ok, res.err, want)
		}
		if cancelled {
			if why := <-told; !strings.Contains(why.Error(), "gone") {
				t.Errorf("the loss after the cancel was told as %v", why)
			}
		}
		if got, want := records(), []string{string(PathUnresolved) + ": " + lostWaiting}; !slices.Equal(got, want) {
			t.Errorf("cancelled first %v: records %q, want %q", cancelled, got, want)
		}
		if len(r.slots) != 1 {
			t.Errorf("cancelled first %v: %d slots held, want the handler's alone", cancelled, len(r.slots))
		}
	}
}
