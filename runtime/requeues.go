package runtime

import "sync"

// requeueMemory counts, per message id, the bounded requeues this process made,
// so that decide can lengthen the pause before the next one. It forgets the
// oldest ids first once full: the pacing is a guard, not a ledger.
type requeueMemory struct {
	mu     sync.Mutex
	counts map[string]int
	order  []string // insertion order, for eviction
	limit  int
}

func newRequeueMemory(limit int) *requeueMemory {
	return &requeueMemory{counts: make(map[string]int), limit: limit}
}

func (m *requeueMemory) count(id string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counts[id]
}

func (m *requeueMemory) add(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, known := m.counts[id]; !known {
		if len(m.order) >= m.limit {
			delete(m.counts, m.order[0])
			m.order = m.order[1:]
		}
		m.order = append(m.order, id)
	}
	m.counts[id]++
}

func (m *requeueMemory) forget(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, known := m.counts[id]; known {
		delete(m.counts, id)
		for i, o := range m.order {
			if o == id {
				m.order = append(m.order[:i], m.order[i+1:]...)
				break
			}
		}
	}
}
