// Package memory is what a consumer remembers within its process, bounded:
// counts of recent keys that forget the least recently added first, and the
// set of work being handled now.
package memory

import (
	"slices"
	"sync"
)

// Work names one attempt of one message. A retry copy carries the same id
// with the next attempt: it is other work. So is a copy re-driven from a
// DLQ, which keeps the id and may start again at attempt 1: Redriven counts
// its re-drives.
type Work struct {
	ID       string
	Attempt  int
	Redriven int64
}

// Keyless reports whether w belongs to a message without an id, which
// cannot be told from others like it: no memory keeps it.
func (w Work) Keyless() bool { return w.ID == "" }

// Keyless reports whether k is the key of a message without an id.
func Keyless(k string) bool { return k == "" }

// Recent counts keys, forgetting the least recently added once it holds
// limit of them. It keeps no keyless key: its count is always 0.
type Recent[K comparable] struct {
	mu      sync.Mutex
	counts  map[K]int
	order   []K // insertion order, for eviction
	limit   int
	keyless func(K) bool
}

// New returns an empty memory of at most limit keys; keyless picks the keys
// it never keeps.
func New[K comparable](limit int, keyless func(K) bool) *Recent[K] {
	return &Recent[K]{counts: make(map[K]int), limit: limit, keyless: keyless}
}

func (m *Recent[K]) Count(k K) int {
	if m.keyless(k) {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counts[k]
}

func (m *Recent[K]) Add(k K) {
	if m.keyless(k) {
		return
	}
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

func (m *Recent[K]) Forget(k K) {
	if m.keyless(k) {
		return
	}
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

// Busy is the set of work (message id and attempt) being handled now. A
// redelivery of work whose handler still runs (its channel was lost) waits its
// turn instead of running twice at once.
type Busy struct {
	mu   sync.Mutex
	keys map[Work]bool
}

// Start reports false when k is already running; otherwise k runs until
// done. Keyless work always starts: nothing tells it from other work.
func (s *Busy) Start(k Work) bool {
	if k.Keyless() {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys[k] {
		return false
	}
	if s.keys == nil {
		s.keys = make(map[Work]bool)
	}
	s.keys[k] = true
	return true
}

func (s *Busy) Done(k Work) {
	s.mu.Lock()
	delete(s.keys, k)
	s.mu.Unlock()
}
