package runtime

import (
	"slices"
	"sync"
	"sync/atomic"
)

// The runtime remembers two things per process, each in a bounded memory that
// forgets its oldest keys first once full:
//
//   - requeues per message id, to pace the next requeue (a guard, not a ledger);
//   - work completed whose ACK is ambiguous or was never sent, per message id
//     and attempt, so that a redelivery is settled from the record instead of
//     running the handler again.
const (
	requeueMemorySize   = 4096
	completedMemorySize = 65536
)

// workKey names one attempt of one message. A retry copy carries the same id
// with the next attempt: it is other work.
type workKey struct {
	id      string
	attempt int
}

// memory counts keys, forgetting the least recently added once it holds
// limit of them.
type memory[K comparable] struct {
	mu     sync.Mutex
	counts map[K]int
	order  []K // insertion order, for eviction
	limit  int
}

func newMemory[K comparable](limit int) *memory[K] {
	return &memory[K]{counts: make(map[K]int), limit: limit}
}

func (m *memory[K]) count(k K) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counts[k]
}

func (m *memory[K]) add(k K) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, known := m.counts[k]; known {
		// Added again: it is recent again.
		m.order = slices.DeleteFunc(m.order, func(o K) bool { return o == k })
	} else if len(m.order) >= m.limit {
		delete(m.counts, m.order[0])
		m.order = m.order[1:]
	}
	m.order = append(m.order, k)
	m.counts[k]++
}

func (m *memory[K]) forget(k K) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, known := m.counts[k]; !known {
		return
	}
	delete(m.counts, k)
	for i, o := range m.order {
		if o == k {
			m.order = append(m.order[:i], m.order[i+1:]...)
			break
		}
	}
}

// busyWork is the set of work (message id and attempt) being handled now. A
// redelivery of work whose handler still runs (its channel was lost) waits its
// turn instead of running twice at once.
type busyWork struct {
	mu   sync.Mutex
	keys map[workKey]bool
}

// start reports false when k is already running; otherwise k runs until done.
func (s *busyWork) start(k workKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys[k] {
		return false
	}
	if s.keys == nil {
		s.keys = make(map[workKey]bool)
	}
	s.keys[k] = true
	return true
}

func (s *busyWork) done(k workKey) {
	s.mu.Lock()
	delete(s.keys, k)
	s.mu.Unlock()
}

// countdown returns a func that runs done on its n-th call: each of n
// parties calls it once, and the last one runs done.
func countdown(n int32, done func()) func() {
	var left atomic.Int32
	left.Store(n)
	return func() {
		if left.Add(-1) == 0 {
			done()
		}
	}
}
