package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// printReport writes the results as Markdown: per scenario, each run, the
// medians per consumer, and Lily's ratios to the others per round and as the
// median of those ratios.
func printReport(w io.Writer, base runConfig, rounds int, results []result, showRSS bool) {
	for _, scenario := range scenarioOrder {
		var rs []result
		for _, r := range results {
			if r.Scenario == scenario {
				rs = append(rs, r)
			}
		}
		if len(rs) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n### %s path: %d messages per run, prefetch %d, concurrency %d, %d rounds\n\n",
			scenario, rs[0].N, base.prefetch, base.concurrency, rounds)
		fmt.Fprintln(w, "| round | consumer | msg/s | p50 ms | p99 ms | peak RSS MiB | alloc B/msg | allocs/msg | CPU µs/msg | broker CPU µs/msg | idle % | others % |")
		fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, r := range rs {
			fmt.Fprintf(w, "| %d | %s | %.0f | %.1f | %.1f | %.1f | %.0f | %.1f | %.1f | %.1f | %.0f | %.0f |\n",
				r.Round, r.Consumer, r.Rate, r.P50, r.P99, r.PeakRSS, r.AllocBytes, r.Allocs, r.CPU, r.BrokerCPU, r.Idle, r.Others)
		}

		fmt.Fprintln(w, "\n| consumer | median msg/s | median p50 ms | median p99 ms | max peak RSS MiB | median alloc B/msg | median allocs/msg | median CPU µs/msg |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
		for _, c := range consumersIn(rs) {
			var of []result
			for _, r := range rs {
				if r.Consumer == c {
					of = append(of, r)
				}
			}
			fmt.Fprintf(w, "| %s | %.0f | %.1f | %.1f | %.1f | %.0f | %.1f | %.1f |\n", c,
				median(of, func(r result) float64 { return r.Rate }),
				median(of, func(r result) float64 { return r.P50 }),
				median(of, func(r result) float64 { return r.P99 }),
				slices.Max(column(of, func(r result) float64 { return r.PeakRSS })),
				median(of, func(r result) float64 { return r.AllocBytes }),
				median(of, func(r result) float64 { return r.Allocs }),
				median(of, func(r result) float64 { return r.CPU }))
		}
		if scenario != scenarioLive { // every consumer keeps up with the live rate: its ratios are 1
			printRatios(w, rs)
		}
		if showRSS {
			fmt.Fprintln(w, "\n| round | consumer | VmRSS MiB at each tenth of the run |")
			fmt.Fprintln(w, "|---|---|---|")
			for _, r := range rs {
				cells := make([]string, len(r.RSS))
				for i, v := range r.RSS {
					cells[i] = fmt.Sprintf("%.1f", v)
				}
				fmt.Fprintf(w, "| %d | %s | %s |\n", r.Round, r.Consumer, strings.Join(cells, " "))
			}
		}
	}
}

// printRatios writes Lily's throughput over each other consumer's, per round
// (runs of the same round ran back to back) and the median of those ratios.
func printRatios(w io.Writer, rs []result) {
	rate := map[[2]any]float64{}
	var rounds []int
	for _, r := range rs {
		rate[[2]any{r.Round, r.Consumer}] = r.Rate
		if !slices.Contains(rounds, r.Round) {
			rounds = append(rounds, r.Round)
		}
	}
	var others []string
	for _, c := range consumersIn(rs) {
		if c != "lily" {
			others = append(others, c)
		}
	}
	if len(others) == 0 || !slices.ContainsFunc(rs, func(r result) bool { return r.Consumer == "lily" }) {
		return
	}
	fmt.Fprint(w, "\n| round |")
	for _, c := range others {
		fmt.Fprintf(w, " lily / %s |", c)
	}
	fmt.Fprint(w, "\n|---|")
	fmt.Fprint(w, strings.Repeat("---:|", len(others)))
	fmt.Fprintln(w)
	ratios := make([][]float64, len(others))
	for _, round := range rounds {
		fmt.Fprintf(w, "| %d |", round)
		for i, c := range others {
			lily, other := rate[[2]any{round, "lily"}], rate[[2]any{round, c}]
			if lily == 0 || other == 0 {
				fmt.Fprint(w, " |")
				continue
			}
			ratios[i] = append(ratios[i], lily/other)
			fmt.Fprintf(w, " %.3f |", lily/other)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprint(w, "| **median** |")
	for i := range others {
		if len(ratios[i]) == 0 {
			fmt.Fprint(w, " |")
			continue
		}
		fmt.Fprintf(w, " **%.3f** |", medianOf(ratios[i]))
	}
	fmt.Fprintln(w)
}

// consumersIn lists the consumers of rs in the order they ran.
func consumersIn(rs []result) []string {
	var cs []string
	for _, r := range rs {
		if !slices.Contains(cs, r.Consumer) {
			cs = append(cs, r.Consumer)
		}
	}
	return cs
}

func column(rs []result, f func(result) float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

func median(rs []result, f func(result) float64) float64 { return medianOf(column(rs, f)) }

func medianOf(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
