package runtime

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxReported bounds the unresolved deliveries (and lost-intake reasons) a
// report lists one by one; beyond it they are only counted.
const maxReported = 1000

// Report is what Run returns when the consumer stops: the shutdown's phases,
// how many deliveries took each path, and every delivery not settled with
// proof. Every string in it is sanitized and bounded.
type Report struct {
	Queue   string       `json:"queue"`
	Started time.Time    `json:"started"`
	Stopped time.Time    `json:"stopped"`
	Phases  []Phase      `json:"phases"`
	Counts  map[Path]int `json:"counts"`
	// AcksProven counts ACKs that a later reply on their channel proved.
	AcksProven int `json:"acks_proven"`
	// Unresolved lists deliveries not settled with proof, with why: the broker
	// redelivers them, or (an ACK never proven) may.
	Unresolved []Record `json:"unresolved"`
	// Omitted counts unresolved deliveries beyond maxReported.
	Omitted int `json:"omitted,omitempty"`
	// PossibleCopies lists deliveries whose handoff copy exists, or may,
	// while the original may come back too, so the work may run twice
	// (bounded like Unresolved): a failed handoff whose publish had been
	// written (the original requeued as the table says), a confirmed one whose
	// ACK was not sent or never proven, and one still waiting for its confirm
	// when the consumer closed.
	PossibleCopies []Record `json:"possible_copies,omitempty"`
	// Reconnects counts the sessions opened after a loss; Lost says why each
	// earlier one ended.
	Reconnects int      `json:"reconnects"`
	Lost       []string `json:"lost,omitempty"`
	// Handlers: how every handler goroutine ended, as observed at the final abort.
	Handlers HandlerEnds `json:"handlers"`
}

// HandlerEnds counts handler goroutines by how they ended.
type HandlerEnds struct {
	Completed int `json:"completed"`
	Panicked  int `json:"panicked"`
	// Abandoned were still running at the final abort; their deliveries are unresolved.
	Abandoned int `json:"abandoned"`
}

// Phase is one step of the shutdown, with how long it took.
type Phase struct {
	Name     string        `json:"name"`
	Duration time.Duration `json:"duration_ns"`
}

// String is a short human summary of the report.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "queue %s: %s", r.Queue, r.Stopped.Sub(r.Started).Round(time.Millisecond))
	paths := make([]string, 0, len(r.Counts))
	for p := range r.Counts {
		paths = append(paths, string(p))
	}
	sort.Strings(paths)
	for _, p := range paths {
		fmt.Fprintf(&b, ", %s %d", p, r.Counts[Path(p)])
	}
	fmt.Fprintf(&b, "; %d acks proven", r.AcksProven)
	if r.Reconnects > 0 {
		fmt.Fprintf(&b, "; %d reconnects", r.Reconnects)
	}
	h := r.Handlers
	fmt.Fprintf(&b, "; handlers: %d completed, %d panicked, %d abandoned", h.Completed, h.Panicked, h.Abandoned)
	for _, p := range r.Phases {
		fmt.Fprintf(&b, "\n  phase %s: %s", p.Name, p.Duration.Round(time.Millisecond))
	}
	for _, u := range r.Unresolved {
		fmt.Fprintf(&b, "\n  unresolved %s (attempt %d): %s", u.MessageID, u.Attempt, u.Reason)
	}
	if r.Omitted > 0 {
		fmt.Fprintf(&b, "\n  and %d more unresolved", r.Omitted)
	}
	for _, c := range r.PossibleCopies {
		fmt.Fprintf(&b, "\n  possible copy of %s (attempt %d) in %s: handoff %s", c.MessageID, c.Attempt, c.Handoff.Destination, c.Handoff.Status)
		if c.Handoff.Detail != "" {
			fmt.Fprintf(&b, " (%s)", c.Handoff.Detail)
		}
	}
	return b.String()
}

type reportBuilder struct {
	mu     sync.Mutex
	r      Report
	sealed bool
	// inflight holds the deliveries on their journey, so that the report
	// lists those still travelling when it is sealed.
	inflight map[uint64]journey
	next     uint64
}

// journey is what the report knows of a delivery still travelling.
type journey struct {
	messageID string // sanitized
	copyTo    string // where a handoff's publish has been written, if one was
}

// begin notes a delivery starting its journey; add ends it with the token.
func (b *reportBuilder) begin(messageID string) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	b.inflight[b.next] = journey{messageID: messageID}
	return b.next
}

// writingCopy notes that the delivery's handoff copy to dest is about to be
// written (dest empty: it was not written after all). It reports false once
// the report is sealed: a copy written then could be listed nowhere.
func (b *reportBuilder) writingCopy(token uint64, dest string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if j, ok := b.inflight[token]; ok {
		j.copyTo = dest
		b.inflight[token] = j
	}
	return !b.sealed
}

// copyMayRepeat reports whether rec's handoff published a copy while the
// original may come back too: its ACK was not sent, or not proven.
func copyMayRepeat(rec Record) bool {
	return rec.Handoff.Published && (rec.Handoff.Status != HandoffConfirmed || rec.Settlement.Status != AckSent)
}

func (b *reportBuilder) listCopy(rec Record) {
	if copyMayRepeat(rec) && len(b.r.PossibleCopies) < maxReported {
		b.r.PossibleCopies = append(b.r.PossibleCopies, rec)
	}
}

// add counts a finished journey (token from begin, or 0), and lists an
// unresolved one; it reports false once the report is sealed.
func (b *reportBuilder) add(token uint64, rec Record) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.inflight, token)
	if b.sealed {
		return false
	}
	b.r.Counts[rec.Path]++
	if rec.Path == PathUnresolved {
		b.list(rec)
	}
	b.listCopy(rec)
	return true
}

// unresolved lists a delivery whose settlement turned out unproven after its
// journey ended (token from begin): the seal must not list it again as still
// travelling, should its record come later.
func (b *reportBuilder) unresolved(token uint64, rec Record) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.inflight, token)
	b.list(rec)
	b.listCopy(rec)
}

func (b *reportBuilder) list(rec Record) {
	if len(b.r.Unresolved) < maxReported {
		b.r.Unresolved = append(b.r.Unresolved, rec)
	} else {
		b.r.Omitted++
	}
}

func (b *reportBuilder) proven(n int) {
	b.mu.Lock()
	b.r.AcksProven += n
	b.mu.Unlock()
}

func (b *reportBuilder) reconnected() {
	b.mu.Lock()
	b.r.Reconnects++
	b.mu.Unlock()
}

func (b *reportBuilder) lostIntake(why string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.r.Lost) < maxReported {
		b.r.Lost = append(b.r.Lost, why)
	}
}

func (b *reportBuilder) phase(name string, took time.Duration) {
	b.mu.Lock()
	b.r.Phases = append(b.r.Phases, Phase{Name: name, Duration: took})
	b.mu.Unlock()
}

// seal returns the finished report; what happens later is no longer in it.
// Deliveries still on their journey are listed unresolved: their authority is
// revoked, and the broker redelivers them.
func (b *reportBuilder) seal(queue string, h HandlerEnds) *Report {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sealed = true
	left := slices.SortedFunc(maps.Values(b.inflight), func(a, b journey) int { return strings.Compare(a.messageID, b.messageID) })
	for _, j := range left {
		rec := Record{Queue: queue, MessageID: j.messageID, Path: PathUnresolved,
			Reason:     "still in flight when the consumer closed; the broker redelivers it",
			Settlement: SettlementEvidence{Status: SettlementNotAttempted, Detail: "final abort"}}
		if j.copyTo != "" {
			rec.Handoff = HandoffEvidence{Destination: j.copyTo, Status: HandoffTimedOut, Detail: "no confirm when the consumer closed", Published: true}
		}
		b.list(rec)
		b.listCopy(rec)
	}
	rep := b.r
	rep.Stopped = time.Now()
	rep.Handlers = h
	rep.Unresolved = append([]Record{}, b.r.Unresolved...)
	rep.PossibleCopies = append([]Record(nil), b.r.PossibleCopies...)
	rep.Counts = make(map[Path]int, len(b.r.Counts))
	for k, v := range b.r.Counts {
		rep.Counts[k] = v
	}
	return &rep
}

// handlerCount observes the end of every handler goroutine.
type handlerCount struct {
	started, completed, panicked atomic.Int64
}

func (h *handlerCount) start() { h.started.Add(1) }

func (h *handlerCount) end(panicked bool) {
	if panicked {
		h.panicked.Add(1)
	} else {
		h.completed.Add(1)
	}
}

// ends reads the counts; handlers neither completed nor panicked are abandoned.
func (h *handlerCount) ends() HandlerEnds {
	c, p := h.completed.Load(), h.panicked.Load()
	return HandlerEnds{Completed: int(c), Panicked: int(p), Abandoned: int(h.started.Load() - c - p)}
}
