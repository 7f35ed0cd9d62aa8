package ledger

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
)

// String prints the ledger.
func (res *Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "ledger: seed %d, %d messages, queue %s, %s\n", res.Seed, res.N, res.Queue, res.Duration.Round(time.Millisecond))
	fmt.Fprintf(&b, "  behaviours: %s\n", counts(res.Behaviours))
	fmt.Fprintf(&b, "  fates: %s\n", counts(res.Fates))
	fmt.Fprintf(&b, "  lost: %d\n", res.Fates[Lost])
	fmt.Fprintf(&b, "  faults (%d): %s\n", total(res.Faults), counts(res.Faults))
	fmt.Fprintf(&b, "  handler runs: %d; second deliveries of one attempt (a run, or one that found the work done): %d: %s\n", res.HandlerRuns, total(res.SecondDeliveries), counts(res.SecondDeliveries))
	fmt.Fprintf(&b, "  extra copies at the end: %d: %s\n", total(res.ExtraCopies), counts(res.ExtraCopies))
	fmt.Fprintf(&b, "  inbox: %d rows committed, %d redeliveries stopped as duplicates\n", res.InboxRows, res.InboxStopped)
	fmt.Fprintf(&b, "  406 channel errors: %d\n", res.Channel406)
	if res.Resent > 0 {
		fmt.Fprintf(&b, "  sends made again after one that may have left a copy: %d\n", res.Resent)
	}
	for _, fault := range slices.Sorted(maps.Keys(res.Resumes)) {
		ds := slices.Sorted(slices.Values(res.Resumes[fault]))
		fmt.Fprintf(&b, "  consumption resumed after %s: %d measured, median %s, max %s\n",
			fault, len(ds), ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
	}
	for _, f := range res.NodeFaults {
		fmt.Fprintf(&b, "  node fault at %s\n", f)
	}
	if res.FailedStarts > 0 {
		fmt.Fprintf(&b, "  consumers started again after their first connection failed: %d\n", res.FailedStarts)
	}
	for i, rep := range res.Reports {
		first, _, _ := strings.Cut(rep.String(), "\n")
		fmt.Fprintf(&b, "  report %d of %d: %s; %d unresolved listed, %d unresolved or possible copies left out\n", i+1, len(res.Reports), first, len(rep.Unresolved), rep.Omitted)
	}
	if len(res.Problems) == 0 {
		b.WriteString("  problems: none\n")
	}
	for _, p := range res.Problems {
		fmt.Fprintf(&b, "  PROBLEM: %s\n", p)
	}
	return b.String()
}

func counts[K ~string](m map[K]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[K(k)]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func total[K comparable](m map[K]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
