package runtime

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// maxReported bounds the unresolved deliveries a report lists one by one;
// beyond it they are only counted.
const maxReported = 1000

// Report is what Run returns when the consumer stops: how many deliveries took
// each path, and every delivery that was not settled with evidence.
type Report struct {
	Queue   string       `json:"queue"`
	Started time.Time    `json:"started"`
	Stopped time.Time    `json:"stopped"`
	Phases  []Phase      `json:"phases"`
	Counts  map[Path]int `json:"counts"`
	// Unresolved lists deliveries the broker will redeliver, with why.
	Unresolved []Record `json:"unresolved"`
	// Omitted counts unresolved deliveries beyond maxReported.
	Omitted int `json:"omitted,omitempty"`
	// Abandoned counts handler goroutines still running when the consumer closed.
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
	if r.Abandoned > 0 {
		fmt.Fprintf(&b, ", %d handlers abandoned", r.Abandoned)
	}
	for _, u := range r.Unresolved {
		fmt.Fprintf(&b, "\n  unresolved %s (attempt %d): %s", u.MessageID, u.Attempt, u.Reason)
	}
	if r.Omitted > 0 {
		fmt.Fprintf(&b, "\n  and %d more unresolved", r.Omitted)
	}
	return b.String()
}

type reportBuilder struct {
	mu sync.Mutex
	r  Report
}

func (b *reportBuilder) add(rec Record) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.r.Counts[rec.Path]++
	if rec.Path != PathUnresolved {
		return
	}
	if len(b.r.Unresolved) < maxReported {
		b.r.Unresolved = append(b.r.Unresolved, rec)
	} else {
		b.r.Omitted++
	}
}

func (b *reportBuilder) phase(name string, since time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.r.Phases = append(b.r.Phases, Phase{Name: name, Duration: time.Since(since)})
}
