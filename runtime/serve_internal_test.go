package runtime

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakeSignals stands in for os/signal under Serve and Run: deliver sends a
// signal to every channel registered at that moment, without blocking, as
// os/signal does.
type fakeSignals struct {
	mu    sync.Mutex
	chans []chan<- os.Signal
	n     int           // registrations so far
	twice chan struct{} // closed at the second registration
	// first, if set, runs at the first registration with its channel.
	first func(c chan<- os.Signal)
}

func useFakeSignals(t *testing.T) *fakeSignals {
	f := &fakeSignals{twice: make(chan struct{})}
	notify, stop := notifySignals, stopSignals
	t.Cleanup(func() { notifySignals, stopSignals = notify, stop })
	notifySignals = func(c chan<- os.Signal) {
		f.mu.Lock()
		f.chans = append(f.chans, c)
		f.n++
		n, first := f.n, f.first
		f.mu.Unlock()
		if n == 1 && first != nil {
			first(c)
		}
		if n == 2 {
			close(f.twice)
		}
	}
	stopSignals = func(c chan<- os.Signal) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.chans = slices.DeleteFunc(f.chans, func(d chan<- os.Signal) bool { return d == c })
	}
	return f
}

func (f *fakeSignals) deliver(sig os.Signal) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.chans {
		select {
		case c <- sig:
		default:
		}
	}
}

func (f *fakeSignals) registered() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.chans)
}

// stopService stops when its ctx is done and then until is closed, or a
// while has passed (never, if patience is 0), unless it is forced first.
type stopService struct {
	started  chan struct{}
	forced   chan struct{}
	once     sync.Once
	until    <-chan struct{}
	patience time.Duration
}

func newStopService(until <-chan struct{}, patience time.Duration) *stopService {
	return &stopService{started: make(chan struct{}), forced: make(chan struct{}), until: until, patience: patience}
}

func (s *stopService) Run(ctx context.Context) (*Report, error) {
	close(s.started)
	<-ctx.Done()
	var timeout <-chan time.Time
	if s.patience > 0 {
		t := time.NewTimer(s.patience)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-s.forced:
	case <-s.until:
	case <-timeout:
	}
	return &Report{Queue: "stop"}, nil
}

func (s *stopService) Force() { s.once.Do(func() { close(s.forced) }) }

func (s *stopService) wasForced() bool { return closed(s.forced) }

// Under signal.NotifyContext one SIGTERM reaches both the caller's ctx and
// Serve's own watch. Here it is in Serve's channel and ctx is done before
// Serve's goroutine looks at either, so the goroutine may wake on ctx.Done
// and find the same signal waiting: that signal began the stop and must not
// force it. Each run the goroutine picks one of the two at random; a Serve
// that took the waiting signal as the second would force in about half of
// them.
func TestServeTheSignalThatCancelledCtxDoesNotForce(t *testing.T) {
	for i := range 64 {
		f := useFakeSignals(t)
		ctx, cancel := context.WithCancel(context.Background())
		f.first = func(c chan<- os.Signal) {
			c <- syscall.SIGTERM // as os/signal sends it to every watcher
			cancel()             // as signal.NotifyContext does on the same signal
		}
		// Each stops once Serve watches for a second signal; a second
		// bounds the wait of a Serve that never does.
		a, b := newStopService(f.twice, time.Second), newStopService(f.twice, time.Second)
		if _, err := Serve(ctx, a, b); err != nil {
			t.Fatal(err)
		}
		cancel()
		if a.wasForced() || b.wasForced() {
			t.Fatalf("run %d: the one signal that cancelled ctx forced the services", i)
		}
		if n := f.registered(); n != 0 {
			t.Fatalf("run %d: %d signal channels still registered after Serve returned", i, n)
		}
	}
}

// With a ctx that watches no signal, Serve stops at the first signal by
// itself, gracefully, and a signal once the stop began forces.
func TestServeStopsAtTheFirstSignalAndForcesAtTheSecond(t *testing.T) {
	f := useFakeSignals(t)
	// Only a Force ends these, so that the second signal has a stop to force.
	a, b := newStopService(nil, 0), newStopService(nil, 0)
	done := make(chan error, 1)
	go func() {
		_, err := Serve(context.Background(), a, b)
		done <- err
	}()
	<-a.started
	<-b.started
	f.deliver(syscall.SIGINT)
	select {
	case <-f.twice: // the stop began: Serve watches for the second signal
	case <-time.After(30 * time.Second):
		t.Fatal("the first signal did not stop Serve")
	}
	if a.wasForced() || b.wasForced() {
		t.Fatal("the first signal forced the services")
	}
	f.deliver(syscall.SIGTERM)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !a.wasForced() || !b.wasForced() {
		t.Errorf("the second signal forced a: %v, b: %v; want both", a.wasForced(), b.wasForced())
	}
	if n := f.registered(); n != 0 {
		t.Errorf("%d signal channels still registered after Serve returned", n)
	}
}

// A Run whose ctx was done when it began holds SIGINT and SIGTERM while it
// stops, and no longer once it returned: a signal sent then is the
// program's, not swallowed by a watch registered late.
func TestRunHoldsTheSignalsUntilItReturnsAndNoLonger(t *testing.T) {
	f := useFakeSignals(t)
	registrations := func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.n
	}
	for i := range 200 {
		c, err := NewConsumer(refusingSpec("signals-test"), Routes{{Type: "t", Version: 1, ContentType: "application/json"}: func(context.Context, RawDelivery) error { return nil }},
			Config{URLs: []string{"amqp://guest:guest@127.0.0.1:1/"}, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		before := registrations()
		if _, err := c.Run(ctx); err != nil {
			t.Fatal(err)
		}
		at, held := registrations(), f.registered()
		time.Sleep(time.Millisecond)
		if at != before+1 || held != 0 || registrations() != at {
			t.Fatalf("run %d: %d registrations by Run's return, %d still held then, %d more after", i, at-before, held, registrations()-at)
		}
	}
}

// Serve with no service, or a nil one (untyped, or a typed nil pointer),
// runs nothing and says why; before, no service returned at once without
// an error, and a nil one panicked, on a goroutine of Serve's own for the
// untyped nil, which no caller could recover.
func TestServeRefusesNoServiceAndANilOne(t *testing.T) {
	if rep, err := Serve(context.Background()); rep != nil || err == nil || err.Error() != "lily: Serve: no services to run" {
		t.Errorf("Serve of nothing: %v, %v", rep, err)
	}
	ok := newStopService(nil, 0)
	for _, nilOne := range []Service{nil, (*Consumer)(nil), (*stopService)(nil)} {
		if rep, err := Serve(context.Background(), ok, nilOne); rep != nil || err == nil || err.Error() != "lily: Serve: service 2 of 2 is nil" {
			t.Errorf("Serve of %T(nil): %v, %v", nilOne, rep, err)
		}
	}
	if closed(ok.started) {
		t.Error("Serve ran a service beside a nil one")
	}
}
