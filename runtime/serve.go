package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/lily-mq/lily/internal/lostline"
)

// notifySignals and stopSignals register and unregister c for SIGINT and
// SIGTERM; a test replaces them to deliver signals at exact moments.
var (
	notifySignals = func(c chan<- os.Signal) { signal.Notify(c, os.Interrupt, syscall.SIGTERM) }
	stopSignals   = func(c chan<- os.Signal) { signal.Stop(c) }
)

// Service is one part of a process that Serve runs: a *Consumer, or an
// outbox relay.
type Service interface {
	// Run runs until ctx is done, then stops gracefully and reports.
	Run(ctx context.Context) (*Report, error)
	// Force asks a stopping service to stop now: what is in flight is given
	// up as its own shutdown says.
	Force()
}

// Serve runs every service until ctx is done or the process gets SIGINT or
// SIGTERM, then stops them together: gracefully, each through its own
// shutdown; a signal that arrives once the stop began forces them all. The
// signal that cancelled a ctx from signal.NotifyContext is the first, not
// the second. A consumer whose topology the
// broker refuses, at its first connection or after, retries it alone, not
// ready and logging each refusal at error, and the others run on; so does
// one whose queue is out of reach (its node down, or its declare or consume
// not answered within a step by a node that took the connection, or that
// connection closed under them after the login). That holds for each
// *Consumer given to Serve, a lone one too; one wrapped in a Service of the
// caller's own returns a refusal, a step not answered or the connection
// closed, at its first connection, as Run does. When a service's Run fails
// (a consumer's first connection failed otherwise, before its login was
// through: no broker at its URLs, a login refused), the others are stopped
// gracefully too.
//
// It returns the one service's report, or for several a combined report:
// their counts summed, their unresolved deliveries, possible copies (each
// Record names its queue) and lost sessions bounded as one report's lists
// are, and each service's own report in Parts, in the order of the
// services: a service whose Run failed before it ran has none there, so
// find a part by its Queue. The error joins the services' errors.
//
// Serve with no service, or with a nil one, runs nothing and returns an
// error at once: a list of services built from configuration that came out
// empty would otherwise end the process at once, with no error to say why.
func Serve(ctx context.Context, services ...Service) (*Report, error) {
	if len(services) == 0 {
		return nil, errors.New("lily: Serve: no services to run")
	}
	for i, s := range services {
		if s == nil || reflect.ValueOf(s).Kind() == reflect.Pointer && reflect.ValueOf(s).IsNil() {
			return nil, fmt.Errorf("lily: Serve: service %d of %d is nil", i+1, len(services))
		}
	}
	// The first signal is watched from the start, for a ctx that watches
	// none. The second is watched on a channel registered only once the
	// stop began: under signal.NotifyContext one signal reaches both ctx and
	// the first channel, and were the goroutine to wake on ctx.Done first,
	// that same signal, still in the first channel, would force at once.
	first := make(chan os.Signal, 1)
	notifySignals(first)
	defer stopSignals(first)
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	ended, gone := make(chan struct{}), make(chan struct{})
	defer func() {
		close(ended)
		<-gone // its signals unregistered once Serve returns
	}()
	go func() {
		defer close(gone)
		select {
		case <-first:
		case <-ctx.Done():
		case <-ended:
			return
		}
		// Registered before the stop begins, so that a signal sent once
		// anything of the stop can be seen (a service's shutdown told) is
		// caught, and before the first is stopped, so that none is missed;
		// a signal already sent to the first (this stop's own, or one in the
		// instant between the wake and now) is dropped with it.
		second := make(chan os.Signal, 1)
		notifySignals(second)
		defer stopSignals(second)
		stopSignals(first)
		stop()
		select {
		case <-second:
			for _, s := range services {
				s.Force()
			}
		case <-ended:
		}
	}()

	reports := make([]*Report, len(services))
	errs := make([]error, len(services))
	var wg sync.WaitGroup
	for i, s := range services {
		if c, ok := s.(*Consumer); ok {
			c.served.Store(true)
		}
		wg.Go(func() {
			reports[i], errs[i] = s.Run(ctx)
			if errs[i] != nil {
				stop()
			}
		})
	}
	wg.Wait()
	if len(services) == 1 {
		return reports[0], errs[0]
	}
	return combine(slices.DeleteFunc(reports, func(r *Report) bool { return r == nil })), errors.Join(errs...)
}

// combine is one report of several services' reports. Its lists are bounded
// as each part's are, and counted past their bounds as each part's are: the
// parts hold every record their own bounds kept. A part's Lost line keeps
// the count it wrote, and is counted by it when left out.
func combine(parts []*Report) *Report {
	b := &reportBuilder{r: Report{Counts: map[Path]int{}}}
	var names []string
	for _, p := range parts {
		names = append(names, p.Queue)
		if b.r.Started.IsZero() || p.Started.Before(b.r.Started) {
			b.r.Started = p.Started
		}
		if p.Stopped.After(b.r.Stopped) {
			b.r.Stopped = p.Stopped
		}
		for path, n := range p.Counts {
			b.r.Counts[path] += n
		}
		b.r.AcksProven += p.AcksProven
		b.r.Duplicates += p.Duplicates
		b.r.Abandoned += p.Abandoned
		b.r.Omitted += p.Omitted
		for _, rec := range p.Unresolved {
			b.list(rec)
		}
		for _, rec := range p.PossibleCopies {
			b.listCopy(rec, true)
		}
		reasons, more := splitLost(p.Lost)
		for _, line := range reasons {
			_, n := lostline.Parse(line)
			b.lostCounted(p.Queue+": "+line, n)
		}
		b.lostOmitted += more
	}
	out := b.r
	out.Queue = strings.Join(names, ", ")
	out.Lost = b.lostLines()
	out.Parts = parts
	return &out
}
