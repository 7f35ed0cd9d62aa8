package memory

import "testing"

// A full memory forgets the key added least recently; a key added again is
// recent again, and keeps its count.
func TestMemoryForgetsTheLeastRecentlyAdded(t *testing.T) {
	m := New[string](3)
	m.Add("a")
	m.Add("b")
	m.Add("c")
	m.Add("a") // recent again: b is now the oldest
	m.Add("d")
	if m.Count("b") != 0 || m.Count("a") != 2 || m.Count("c") != 1 || m.Count("d") != 1 {
		t.Errorf("counts a=%d b=%d c=%d d=%d; want 2 0 1 1", m.Count("a"), m.Count("b"), m.Count("c"), m.Count("d"))
	}
	m.Forget("c")
	m.Add("e")
	m.Add("f") // full again: a is the oldest now
	if m.Count("a") != 0 || m.Count("d") != 1 || len(m.order) != 3 {
		t.Errorf("after forget: a=%d d=%d, %d keys", m.Count("a"), m.Count("d"), len(m.order))
	}
}
