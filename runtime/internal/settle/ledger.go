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
	closed  bool // the channel's end was judged; no later ACK can be proven
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
	l.pending = nil
	return p
}

// Take removes and returns every waiting ACK. Whatever proof follows covers
// exactly these: each was written before take returned. The next interval's
// list starts as large as this one's, so that a steady stream of ACKs does
// not grow it from nothing, copying every entry again, each interval.
func (l *Ledger) Take() []SentAck {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.pending
	l.pending = nil
	if len(p) > 0 {
		l.pending = make([]SentAck, 0, len(p))
	}
	return p
}
