package settle

import (
	"sync"

	"github.com/lily-mq/lily/runtime/internal/memory"
	"github.com/lily-mq/lily/runtime/internal/outcome"
)

// SentAck is one ACK waiting for its proof, or one dead-lettering NACK.
type SentAck struct {
	Token      uint64 // the delivery's journey in the report
	Work       memory.Work
	MessageID  string // sanitized, for the report
	Attempt    int
	Handoff    outcome.HandoffEvidence // the confirmed copy this ACK follows, if any
	DeadLetter bool                    // a NACK without requeue: no work was done
}

// Ledger holds one generation's ACKs sent and not yet proven.
type Ledger struct {
	mu      sync.Mutex
	pending []SentAck
	// spare is the list Take returned last, handed back by Done: the next
	// interval fills it again. At tens of thousands of ACKs a second a list
	// is a MiB, and one allocated afresh every interval costs its zeroing,
	// a page fault on each of its pages and, once the collector has taken
	// it, its return to the system.
	spare  []SentAck
	closed bool // the channel's end was judged; no later ACK can be proven
}

// Add keeps a for its proof; it reports false when the channel's end was
// already judged, and a can no longer be proven.
func (l *Ledger) Add(a SentAck) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.pending = append(l.pending, a)
	return true
}

// Close returns every waiting ACK and refuses later ones: the channel ended.
func (l *Ledger) Close() []SentAck {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	p := l.pending
	l.pending, l.spare = nil, nil
	return p
}

// Take removes and returns every waiting ACK. Whatever proof follows covers
// exactly these: each was written before take returned. The next interval
// fills the list Done handed back, or else one as large as this one, so
// that a steady stream of ACKs does not grow it from nothing, copying every
// entry again, each interval. An interval without ACKs returns nil.
func (l *Ledger) Take() []SentAck {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.pending
	if len(p) == 0 {
		// An idle interval lets both lists go.
		l.pending, l.spare = nil, nil
		return nil
	}
	l.pending, l.spare = l.spare, nil
	if l.pending == nil {
		l.pending = make([]SentAck, 0, len(p))
	}
	return p
}

// Done hands back p, a list Take returned, once nothing reads it any more:
// a later interval fills it again. A list far larger than its interval
// needed is let go instead, so that a trickle of ACKs after a burst does
// not keep the burst's MiB: the next list is sized to the trickle.
func (l *Ledger) Done(p []SentAck) {
	clear(p)
	if cap(p) > 2*max(len(p), minKept) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.spare = p[:0]
	}
}

// minKept: a list handed back with room for at most twice as many entries
// is kept whatever its interval held; so small a list is not worth
// returning.
const minKept = 64
