package settle

import (
	"testing"

	"github.com/lily-mq/lily/runtime/internal/memory"
)

func TestLedgerFillsTheListHandedBack(t *testing.T) {
	var l Ledger
	for i := range 3 {
		l.Add(SentAck{Token: uint64(i + 1), Work: memory.Work{ID: "m", Attempt: 1}, MessageID: "m"})
	}
	taken := l.Take()
	if len(taken) != 3 || taken[2].Token != 3 {
		t.Fatalf("took %+v, want the three ACKs added", taken)
	}
	l.Done(taken)
	if taken[0] != (SentAck{}) {
		t.Fatalf("a list handed back still holds %+v: its strings would stay reachable", taken[0])
	}
	// Once the first two lists exist, the intervals take turns with them.
	interval := func() {
		for i := range 1000 {
			l.Add(SentAck{Token: uint64(i), MessageID: "m"})
		}
		l.Done(l.Take())
	}
	for range 3 {
		interval() // both lists grow to their size
	}
	if allocs := testing.AllocsPerRun(10, interval); allocs != 0 {
		t.Errorf("an interval of 1,000 ACKs allocated %v times, want none", allocs)
	}
	if l.Take() != nil || l.pending != nil || l.spare != nil {
		t.Error("an idle interval kept the lists")
	}
}

func TestLedgerLetsABurstsListsGo(t *testing.T) {
	var l Ledger
	interval := func(acks int) {
		for i := range acks {
			l.Add(SentAck{Token: uint64(i)})
		}
		l.Done(l.Take())
	}
	for range 2 {
		interval(10_000)
	}
	// The trickle that follows is kept in lists sized to it.
	for range 2 {
		interval(1)
	}
	if c := cap(l.pending) + cap(l.spare); c > 4*minKept {
		t.Errorf("after a trickle of one ACK an interval, the lists hold room for %d", c)
	}
}

func TestLedgerClosedKeepsNoList(t *testing.T) {
	var l Ledger
	l.Add(SentAck{Token: 1})
	taken := l.Take()
	l.Add(SentAck{Token: 2})
	if left := l.Close(); len(left) != 1 || left[0].Token != 2 {
		t.Fatalf("Close returned %+v, want ACK 2", left)
	}
	l.Done(taken)
	if l.Add(SentAck{Token: 3}) {
		t.Fatal("a closed ledger took an ACK")
	}
	if l.spare != nil {
		t.Error("a closed ledger kept the list handed back")
	}
}
