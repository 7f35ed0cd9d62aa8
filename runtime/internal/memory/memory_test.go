package memory

import "testing"

// A full memory forgets the key added least recently; a key added again is
// recent again, and keeps its count.
func TestMemoryForgetsTheLeastRecentlyAdded(t *testing.T) {
	m := New[string](3, Keyless)
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

// A message without an id is never remembered: its work always starts,
// and no count of it grows.
func TestMemoryKeepsNoKeylessMessage(t *testing.T) {
	m := New[Work](3, Work.Keyless)
	m.Add(Work{Attempt: 1})
	if m.Count(Work{Attempt: 1}) != 0 || len(m.order) != 0 {
		t.Errorf("a keyless work counted %d, %d keys kept", m.Count(Work{Attempt: 1}), len(m.order))
	}
	var b Busy
	first, second := b.Start(Work{Attempt: 1}), b.Start(Work{Attempt: 1})
	if !first || !second {
		t.Error("keyless work waited for other keyless work")
	}
	if !b.Start(Work{ID: "m", Attempt: 1}) || b.Start(Work{ID: "m", Attempt: 1}) {
		t.Error("work with an id: want the second start refused")
	}
}
