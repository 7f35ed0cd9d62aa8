package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
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
			// Whatever read the output may have gone with the signal (a
			// hang-up ends a "| tee" too), and a write to a broken pipe on
			// stdout or stderr would kill the process now, between a
			// publish and its ACK: such a write fails instead.
			signal.Ignore(syscall.SIGPIPE)
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

// interrupted is the cause of a context a signal cancelled: it is
// context.Canceled, as signal.NotifyContext's is.
type interrupted string

func (s interrupted) Error() string { return string(s) }

func (s interrupted) Is(target error) bool { return target == context.Canceled }
