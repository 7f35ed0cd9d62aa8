// Package workers runs a consumer's deliveries and handlers on long-lived
// goroutines.
package workers

// Pool runs a consumer's deliveries and handlers on long-lived goroutines. A
// goroutine per delivery would be started, grow its stack through the
// extractor and be torn down again, thousands of times a second; a worker
// keeps its stack for the next task. The number of workers stays bounded:
// a running task holds a concurrency slot (an abandoned handler keeps its
// worker and its slot until it returns) or, its delivery settled, one of as
// many places as the prefetch while the telemetry's ends run; and the
// ordered tasks waiting for their key or a slot, or waiting in line to be
// retried, are bounded by the prefetch of each session.
type Pool struct {
	tasks chan func()
	stop  chan struct{}
}

// New returns a pool without workers; they start as tasks come.
func New() *Pool {
	return &Pool{tasks: make(chan func()), stop: make(chan struct{})}
}

// Run starts task on an idle worker, or on a new one when none is idle.
func (w *Pool) Run(task func()) {
	select {
	case w.tasks <- task:
	default:
		go w.work(task)
	}
}

func (w *Pool) work(task func()) {
	for {
		task()
		select {
		case task = <-w.tasks:
		case <-w.stop:
			return
		}
	}
}

// Close lets idle Pool end; busy ones end when their task returns.
func (w *Pool) Close() { close(w.stop) }
