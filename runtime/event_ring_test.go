package runtime

import "testing"

func TestEventRingKeepsTheMostRecent(t *testing.T) {
	r := newEventRing(3)
	for i := range 5 {
		r.push(Event{Attempt: i})
	}
	got := r.snapshot()
	if len(got) != 3 || got[0].Attempt != 2 || got[2].Attempt != 4 {
		t.Errorf("snapshot %+v", got)
	}
}
