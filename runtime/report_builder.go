package runtime

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lily-mq/lily/internal/lostline"
	"github.com/lily-mq/lily/runtime/internal/outcome"
)

// maxReported bounds the unresolved deliveries (and lost-intake reasons) a
// report lists one by one; beyond it they are only counted.
const maxReported = 1000

type reportBuilder struct {
	mu     sync.Mutex
	r      Report
	sealed bool
	// inflight holds the deliveries on their journey, so that the report
	// lists those still travelling when it is sealed.
	inflight map[uint64]journey
	next     uint64
	// unresolvedOmitted and lostOmitted count what Unresolved and Lost
	// leave out; Report.Omitted holds the first and the copies left out.
	unresolvedOmitted, lostOmitted int
	// lastLost is the reason Lost's last line tells, lastLostTimes how many
	// times in a row it came (lostIntake).
	lastLost      string
	lastLostTimes int
}

// journey is what the report knows of a delivery still travelling.
type journey struct {
	messageID string // sanitized
	attempt   int    // the delivery's, as its redelivery carries it; 0 when the guard read none
	copyTo    string // where a handoff's publish has been written, if one was
	// listed: its settlement turned out unproven before its journey ended,
	// and it is listed so already.
	listed bool
}

// begin notes a delivery starting its journey; add ends it with the token.
func (b *reportBuilder) begin(messageID string, attempt int) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	b.inflight[b.next] = journey{messageID: messageID, attempt: attempt}
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

// listCopy lists rec among the possible copies when its copy may repeat.
func (b *reportBuilder) listCopy(rec Record, mayRepeat bool) {
	switch {
	case !mayRepeat:
	case len(b.r.PossibleCopies) < maxReported:
		b.r.PossibleCopies = append(b.r.PossibleCopies, rec)
	default:
		b.r.Omitted++
	}
}

// add counts a finished journey (token from begin, or 0), a duplicate the
// inbox caught among them, and lists an unresolved one, and one whose copy
// may repeat (copyMayRepeat); it reports false once the report is sealed.
func (b *reportBuilder) add(token uint64, rec Record, mayRepeat, duplicate bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.inflight, token)
	if b.sealed {
		return false
	}
	b.r.Counts[rec.Path]++
	if duplicate {
		b.r.Duplicates++
	}
	if rec.Path == PathUnresolved {
		b.list(rec)
	}
	b.listCopy(rec, mayRepeat)
	return true
}

// unresolved lists a delivery whose settlement turned out unproven (token
// from begin), its journey ended or not. It counts nothing: a journey that
// has recorded was counted by add, under its record's path (acked, say), and
// one that has not is marked listed, so that add counts its record when it
// comes, or, should the seal come first, the seal counts it unresolved
// without listing it again. Unresolved so lists, beside the deliveries
// counted unresolved, those counted under the path of an ACK or NACK never
// proven.
func (b *reportBuilder) unresolved(token uint64, rec Record, mayRepeat bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if j, ok := b.inflight[token]; ok {
		j.listed = true
		b.inflight[token] = j
	}
	b.list(rec)
	b.listCopy(rec, mayRepeat)
}

func (b *reportBuilder) list(rec Record) {
	if len(b.r.Unresolved) < maxReported {
		b.r.Unresolved = append(b.r.Unresolved, rec)
	} else {
		b.r.Omitted++
		b.unresolvedOmitted++
	}
}

// unresolvedSoFar counts the deliveries found unresolved so far.
func (b *reportBuilder) unresolvedSoFar() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.r.Unresolved) + b.unresolvedOmitted
}

func (b *reportBuilder) proven(n int) {
	b.mu.Lock()
	b.r.AcksProven += n
	b.mu.Unlock()
}

// lostIntake lists why a session ended or a connection attempt failed. The
// same reason as the line before is not listed again, but counted in that
// line: "<why> (N times in a row)". A refusal of the topology waits for a
// person, a day perhaps, each attempt of the backoff refused alike, and a
// broker away fails every attempt alike: told line by line, they would
// fill the list, and push other queues' reasons out of Serve's.
func (b *reportBuilder) lostIntake(why string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.lostOmitted == 0 && len(b.r.Lost) > 0 && why == b.lastLost:
		b.lastLostTimes++
		b.r.Lost[len(b.r.Lost)-1] = lostline.Format(why, b.lastLostTimes)
	case len(b.r.Lost) < maxReported-1:
		b.r.Lost = append(b.r.Lost, lostline.Format(why, 1))
		b.lastLost, b.lastLostTimes = why, 1
	default:
		b.lostOmitted++
	}
}

// lostCounted lists a line of another report's Lost, which counts n losses
// (Serve's combined report, its parts' lines): as it is, not merged with
// the line before, whose losses did not come in a row with it (another
// service's, of the same queue perhaps); past the bound, its n losses are
// counted in the last line.
func (b *reportBuilder) lostCounted(line string, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.r.Lost) < maxReported-1 {
		b.r.Lost = append(b.r.Lost, line)
	} else {
		b.lostOmitted += n
	}
}

// lostLines is Report.Lost: the reasons listed, then, past them, a last line
// that counts the losses they leave out.
func (b *reportBuilder) lostLines() []string {
	lost := slices.Clone(b.r.Lost)
	if b.lostOmitted > 0 {
		lost = append(lost, lostline.More(b.lostOmitted))
	}
	return lost
}

// splitLost returns a Report.Lost's reasons, and how many more its last line
// counts. Only a list of maxReported lines ends with that line: a reason
// that reads like it stays a reason.
func splitLost(lost []string) (reasons []string, more int) {
	if len(lost) != maxReported {
		return lost, 0
	}
	more, ok := lostline.ParseMore(lost[len(lost)-1])
	if !ok {
		return lost, 0
	}
	return lost[:len(lost)-1], more
}

func (b *reportBuilder) phase(name string, took time.Duration) {
	b.mu.Lock()
	b.r.Phases = append(b.r.Phases, Phase{Name: name, Duration: took})
	b.mu.Unlock()
}

// seal returns the finished report; what happens later is no longer in it.
// Deliveries still on their journey are listed, and counted, unresolved:
// their authority is revoked, and the broker redelivers them.
func (b *reportBuilder) seal(queue string, abandoned int) *Report {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sealed = true
	left := slices.SortedFunc(maps.Values(b.inflight), func(a, b journey) int { return strings.Compare(a.messageID, b.messageID) })
	for _, j := range left {
		b.r.Counts[PathUnresolved]++
		if j.listed {
			continue
		}
		rec := Record{Queue: queue, MessageID: j.messageID, Attempt: j.attempt, Path: PathUnresolved,
			Reason: "still in flight when the consumer closed (final abort); the broker redelivers it"}
		if j.copyTo != "" {
			rec.Handoff, rec.Destination = outcome.HandoffTimedOut.String(), j.copyTo
			rec.Reason += "; its handoff had no confirm yet"
		}
		b.list(rec)
		b.listCopy(rec, j.copyTo != "")
	}
	rep := b.r
	rep.Stopped = time.Now()
	rep.Abandoned = abandoned
	rep.Unresolved = append([]Record{}, b.r.Unresolved...)
	rep.PossibleCopies = append([]Record(nil), b.r.PossibleCopies...)
	rep.Lost = b.lostLines()
	rep.Counts = make(map[Path]int, len(b.r.Counts))
	for k, v := range b.r.Counts {
		rep.Counts[k] = v
	}
	return &rep
}

// handlerCount observes the end of every handler goroutine. The final abort
// seals it: no handler starts after it, so none runs uncounted past the
// report.
type handlerCount struct {
	// started counts the handlers started, with sealed set once sealed: one
	// atomic word, so that a start and the seal cannot pass each other.
	started atomic.Int64
	ended   atomic.Int64
}

const sealed = int64(1) << 62

// start counts a handler about to run, and reports false, counting
// nothing, once the count is sealed.
func (h *handlerCount) start() bool {
	for {
		n := h.started.Load()
		if n&sealed != 0 {
			return false
		}
		if h.started.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (h *handlerCount) end() { h.ended.Add(1) }

// seal stops handlers from starting.
func (h *handlerCount) seal() { h.started.Or(sealed) }

// running counts the handlers whose end was not observed.
func (h *handlerCount) running() int {
	return int(h.started.Load()&^sealed - h.ended.Load())
}
