package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// interruptible returns a context the first of sigs cancels, and a function
// that releases it. That first signal ends a read before its next copy, but
// a publish already begun is seen through to its confirm (send), which may
// take sendWait and two steps: so it says so on stderr, and stops catching
// sigs, so that a second one ends the process at once, as the signal does
// to a program that does not catch it.
func interruptible(parent context.Context, stderr io.Writer, sigs ...os.Signal) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	caught := make(chan os.Signal, 1)
	if len(sigs) > 0 { // Notify of no signal would relay every one
		signal.Notify(caught, sigs...)
	}
	released := make(chan struct{})
	go func() {
		select {
		case s := <-caught:
			signal.Stop(caught)
			why := s.String() + " signal received"
			fmt.Fprintf(stderr, "lilydlq: %s: stopping once the publish in flight, if any, is answered (up to %s and twice -step), so that its copy ends in one place; a second signal stops at once, leaving that publish in doubt: a re-driven copy may then be in its queue and still in the DLQ\n", why, sendWait)
			cancel(interrupted(why))
		case <-released:
		}
	}()
	return ctx, func() {
		signal.Stop(caught)
		close(released)
		cancel(nil)
	}
}

// closable ignores SIGPIPE and returns a context that the first failed write
// to the stdout it returns, wrapping w, cancels as a first signal does. By
// default a write to a broken pipe on stdout or stderr (| head gone, a tee
// ended by a hang-up) kills the process: killed between a publish and its
// ACK, a re-driven copy would be in its queue and still in the DLQ. Ignored,
// the write fails, and the command stops once the copy in flight ends in one
// place; run then fails it, however late the write failed. A failed write
// to stderr is ignored: stderr only tells.
func closable(parent context.Context, w io.Writer) (context.Context, io.Writer) {
	signal.Ignore(syscall.SIGPIPE)
	ctx, cancel := context.WithCancelCause(parent)
	return ctx, &stopOnError{w: w, cancel: cancel}
}

// stopOnError is stdout: its first failed write cancels the command's
// context, and it writes nothing after it, so that what was written stays a
// prefix of the output.
type stopOnError struct {
	w      io.Writer
	cancel context.CancelCauseFunc
	mu     sync.Mutex // as an *os.File, it may be written from any goroutine
	err    error
}

func (s *stopOnError) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.w.Write(p)
	if err != nil {
		s.err = err
		s.cancel(outputError{err})
	}
	return n, err
}

// failed is the error of its first failed write, or nil.
func (s *stopOnError) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// outputError is the cause of a context a failed write to stdout
// cancelled: context.Canceled, as a signal's cause is, wrapping the write's
// error, so that a command's error tells whether it is that failure.
type outputError struct{ err error }

func (o outputError) Error() string {
	why := "its output failed"
	if errors.Is(o.err, syscall.EPIPE) {
		why = "its output was closed"
	}
	return why + " (" + o.err.Error() + ")"
}

func (o outputError) Is(target error) bool { return target == context.Canceled }

func (o outputError) Unwrap() error { return o.err }

// interrupted is the cause of a context a signal cancelled: it is
// context.Canceled, as signal.NotifyContext's is.
type interrupted string

func (s interrupted) Error() string { return string(s) }

func (s interrupted) Is(target error) bool { return target == context.Canceled }
