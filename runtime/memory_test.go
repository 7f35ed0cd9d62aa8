package runtime

import "testing"

// A full memory forgets the key added least recently; a key added again is
// recent again, and keeps its count.
func TestMemoryForgetsTheLeastRecentlyAdded(t *testing.T) {
	m := newMemory[string](3)
	m.add("a")
	m.add("b")
	m.add("c")
	m.add("a") // recent again: b is now the oldest
	m.add("d")
	if m.count("b") != 0 || m.count("a") != 2 || m.count("c") != 1 || m.count("d") != 1 {
		t.Errorf("counts a=%d b=%d c=%d d=%d; want 2 0 1 1", m.count("a"), m.count("b"), m.count("c"), m.count("d"))
	}
	m.forget("c")
	m.add("e")
	m.add("f") // full again: a is the oldest now
	if m.count("a") != 0 || m.count("d") != 1 || len(m.order) != 3 {
		t.Errorf("after forget: a=%d d=%d, %d keys", m.count("a"), m.count("d"), len(m.order))
	}
}
