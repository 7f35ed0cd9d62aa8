package main

import (
	"bufio"
	"math/bits"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// histogram counts latencies in microseconds, log-linear: 64 sub-buckets per
// power of two, so a quantile is within about 1.6% of the true value. Its size
// is fixed and recording allocates nothing, so it costs the same in every
// consumer under test and does not grow over a million messages.
type histogram struct {
	counts [64 * 64]atomic.Int64
}

const subBits = 6

func bucketOf(us int64) int {
	if us < 1<<subBits {
		return int(max(us, 0))
	}
	e := bits.Len64(uint64(us)) - subBits // >= 1
	return e<<subBits + int(us>>(e-1)) - 1<<subBits
}

// lowerBound is the smallest value in bucket b.
func lowerBound(b int) int64 {
	if b < 1<<subBits {
		return int64(b)
	}
	e, m := b>>subBits, b&(1<<subBits-1)
	return int64(m+1<<subBits) << (e - 1)
}

func (h *histogram) record(d time.Duration) {
	h.counts[min(bucketOf(d.Microseconds()), len(h.counts)-1)].Add(1)
}

// quantile returns the q-quantile (0 < q <= 1) in milliseconds.
func (h *histogram) quantile(q float64) float64 {
	var total int64
	for i := range h.counts {
		total += h.counts[i].Load()
	}
	want := int64(q*float64(total) + 0.5)
	var seen int64
	for i := range h.counts {
		if seen += h.counts[i].Load(); seen >= max(want, 1) {
			return float64(lowerBound(i)) / 1000
		}
	}
	return 0
}

// procStatus reads one "Vm..." line of /proc/self/status in MiB. VmHWM is the
// peak resident set of the process so far; each run is its own process, so it
// is that run's peak.
func procStatus(field string) float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		rest, ok := strings.CutPrefix(s.Text(), field+":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
		return kb / 1024
	}
	return 0
}

// tracker counts settlements in one run and times them.
type tracker struct {
	n       int64
	born    time.Time // newTracker's call
	settled atomic.Int64
	lat     histogram
	// firstCPU is this process's CPU time (selfCPU) at the first delivery,
	// and firstAt that delivery's time since born, in nanoseconds; 0 until
	// then.
	firstCPU, firstAt atomic.Int64

	done   chan struct{} // closed at the n-th settlement
	end    time.Time     // the n-th settlement; read after done
	endCPU time.Duration // this process's CPU time (selfCPU) then; read after done
	rss    [10]atomic.Uint64
}

func newTracker(n int) *tracker {
	return &tracker{n: int64(n), born: time.Now(), done: make(chan struct{})}
}

// deliver notes a delivery reaching the consumer's code. The first starts
// the run's clocks, CPU and wall: the process's start, dial and
// declarations before it are not a cost per message. A consumer that
// consumes on several channels calls it only once it consumes on all of
// them (see drainWatermill), so that the run is timed at its full
// concurrency and prefetch.
func (t *tracker) deliver() {
	if t.firstCPU.Load() == 0 {
		if t.firstCPU.CompareAndSwap(0, int64(selfCPU())) {
			t.firstAt.Store(int64(time.Since(t.born)))
		}
	}
}

// started is the time of the first delivery; born until then.
func (t *tracker) started() time.Time {
	return t.born.Add(time.Duration(t.firstAt.Load()))
}

// settle notes one settlement of the message with this id, now. It samples
// the resident set at every tenth of the run, to show whether memory stays
// flat as messages go by.
func (t *tracker) settle(messageID string) {
	now := time.Now()
	if at, ok := publishedAt(messageID); ok {
		t.lat.record(now.Sub(at))
	}
	k := t.settled.Add(1)
	if tenth := max(t.n/10, 1); k%tenth == 0 && k/tenth <= 10 {
		t.rss[k/tenth-1].Store(uint64(procStatus("VmRSS") * 1024))
	}
	if k == t.n {
		t.end, t.endCPU = now, selfCPU()
		close(t.done)
	}
}

// rssMiB is VmRSS at each tenth of the run.
func (t *tracker) rssMiB() []float64 {
	out := make([]float64, 0, len(t.rss))
	for i := range t.rss {
		out = append(out, float64(t.rss[i].Load())/1024)
	}
	return out
}
