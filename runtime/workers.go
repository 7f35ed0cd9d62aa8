package runtime

// workers runs a run's deliveries and handlers on long-lived goroutines. A
// goroutine per delivery would be started, grow its stack through the
// extractor and be torn down again, thousands of times a second; a worker
// keeps its stack for the next task. The number of workers stays bounded
// because every task holds a concurrency slot, and an abandoned handler keeps
// its worker (and its slot) until it returns.
type workers struct {
	tasks chan func()
	stop  chan struct{}
}

func newWorkers() *workers {
	return &workers{tasks: make(chan func()), stop: make(chan struct{})}
}

// run starts task on an idle worker, or on a new one when none is idle.
func (w *workers) run(task func()) {
	select {
	case w.tasks <- task:
	default:
		go w.work(task)
	}
}

func (w *workers) work(task func()) {
	for {
		task()
		select {
		case task = <-w.tasks:
		case <-w.stop:
			return
		}
	}
}

// close lets idle workers end; busy ones end when their task returns.
func (w *workers) close() { close(w.stop) }
