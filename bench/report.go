package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// printReport writes the results as Markdown: per scenario, each run; per
// consumer the medians over the rounds, with the least and greatest of
// throughput and CPU; Lily's throughput over each other consumer's per round,
// with the median and the least and greatest of those ratios; and issue 18's
// targets of the path, each with its value per round and the rounds it holds
// in.
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
		unquiet := false
		for _, r := range rs {
			round := fmt.Sprint(r.Round)
			if r.Unquiet {
				round += " " + unquietMark
				unquiet = true
			}
			fmt.Fprintf(w, "| %s | %s | %.0f | %.1f | %.1f | %.1f | %.0f | %.1f | %.1f | %.1f | %.0f | %.0f |\n",
				round, r.Consumer, r.Rate, r.P50, r.P99, r.PeakRSS, r.AllocBytes, r.Allocs, r.CPU, r.BrokerCPU, r.Idle, r.Others)
		}
		if unquiet {
			fmt.Fprintf(w, "\n%s The run's drain started although the machine was not %.0f %% idle within %.0f s: what the broker still did for the run before it (deleting its queues) or for its fill may be in its figures.\n",
				unquietMark, 100*quietShare, quietLimit.Seconds())
		}

		fmt.Fprintln(w, "\n| consumer | msg/s, median (min–max) | median p50 ms | median p99 ms | max peak RSS MiB | median alloc B/msg | median allocs/msg | CPU µs/msg, median (min–max) |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
		for _, c := range consumersIn(rs) {
			var of []result
			for _, r := range rs {
				if r.Consumer == c {
					of = append(of, r)
				}
			}
			fmt.Fprintf(w, "| %s | %s | %.1f | %.1f | %.1f | %.0f | %.1f | %s |\n", c,
				spreadOf(column(of, func(r result) float64 { return r.Rate })).format("%.0f"),
				median(of, func(r result) float64 { return r.P50 }),
				median(of, func(r result) float64 { return r.P99 }),
				slices.Max(column(of, func(r result) float64 { return r.PeakRSS })),
				median(of, func(r result) float64 { return r.AllocBytes }),
				median(of, func(r result) float64 { return r.Allocs }),
				spreadOf(column(of, func(r result) float64 { return r.CPU })).format("%.1f"))
		}
		if scenario != scenarioLive { // every consumer keeps up with the live rate: its ratios are 1
			printRatios(w, rs)
		}
		printTargets(w, judge(scenario, rs))
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

// unquietMark marks, in the report, the round of a run whose drain started
// before the machine was quiet (result.Unquiet).
const unquietMark = "†"

// printRatios writes Lily's throughput over each other consumer's, per round
// (runs of the same round ran back to back), and the median, least and
// greatest of those ratios.
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
	fmt.Fprint(w, "| **median** (min–max) |")
	for i := range others {
		if len(ratios[i]) == 0 {
			fmt.Fprint(w, " |")
			continue
		}
		sp := spreadOf(ratios[i])
		fmt.Fprintf(w, " **%.3f** (%.3f–%.3f) |", sp.med, sp.lo, sp.hi)
	}
	fmt.Fprintln(w)
}

// goal is one of issue 18's targets for Lily on one path: in each round,
// value is what Lily's run gives against the run of consumer base in that
// round, and holds says whether that meets the target.
type goal struct {
	scenario, base, name string
	value                func(lily, base result) float64
	holds                func(float64) bool
	format               string // of a value
}

var goals = []goal{
	{scenarioAck, "plain-extract", "CPU ≤ 1.1× plain-extract", cpuRatio, atMost(1.1), "%.2f×"},
	{scenarioAck, "plain-extract", "allocs ≤ plain-extract + 8", allocsOver, atMost(8), "%+.1f"},
	{scenarioAck, "plain", "msg/s ≥ 0.95× plain", rateRatio, atLeast(0.95), "%.3f"},
	{scenarioRetry, "plain-facts", "CPU ≤ 1.1× plain-facts", cpuRatio, atMost(1.1), "%.2f×"},
	{scenarioRetry, "plain-facts", "msg/s ≥ 0.95× plain-facts", rateRatio, atLeast(0.95), "%.3f"},
	{scenarioRetry, "plain", "msg/s ≥ 0.90× plain", rateRatio, atLeast(0.90), "%.3f"},
	// The value is Lily's p99 over the bound: at most 1.
	{scenarioLive, "plain", "p99 ≤ 1.2× plain's + 1 ms", p99OverBound, atMost(1), "%.2f"},
}

func cpuRatio(lily, base result) float64   { return lily.CPU / base.CPU }
func allocsOver(lily, base result) float64 { return lily.Allocs - base.Allocs }
func rateRatio(lily, base result) float64  { return lily.Rate / base.Rate }
func p99OverBound(lily, base result) float64 {
	return lily.P99 / (1.2*base.P99 + 1)
}

func atMost(limit float64) func(float64) bool  { return func(v float64) bool { return v <= limit } }
func atLeast(limit float64) func(float64) bool { return func(v float64) bool { return v >= limit } }

// verdict is a goal judged over the rounds in which Lily and its base both
// ran.
type verdict struct {
	goal
	values []float64 // per round, in the order the rounds ran
	held   int       // rounds in which the goal holds
}

// met is the rule: a target is met when it holds in at least four
// of five rounds (for another number of rounds, in at least the same share).
func (v verdict) met() bool { return len(v.values) > 0 && 5*v.held >= 4*len(v.values) }

// judge gives the verdict of each goal of scenario whose consumers ran in rs.
func judge(scenario string, rs []result) []verdict {
	type run struct {
		round    int
		consumer string
	}
	at := map[run]result{}
	var rounds []int
	for _, r := range rs {
		if r.Scenario != scenario {
			continue
		}
		at[run{r.Round, r.Consumer}] = r
		if !slices.Contains(rounds, r.Round) {
			rounds = append(rounds, r.Round)
		}
	}
	var out []verdict
	for _, g := range goals {
		if g.scenario != scenario {
			continue
		}
		v := verdict{goal: g}
		for _, round := range rounds {
			lily, ok := at[run{round, "lily"}]
			base, baseOK := at[run{round, g.base}]
			if !ok || !baseOK {
				continue
			}
			value := g.value(lily, base)
			v.values = append(v.values, value)
			if g.holds(value) {
				v.held++
			}
		}
		if len(v.values) > 0 {
			out = append(out, v)
		}
	}
	return out
}

// printTargets writes each verdict: its value per round, their median,
// least and greatest, the rounds it holds in, and whether it is met.
func printTargets(w io.Writer, vs []verdict) {
	if len(vs) == 0 {
		return
	}
	fmt.Fprintln(w, "\n| target (issue 18) | per round | median (min–max) | holds in | met (in at least 4 of 5 rounds) |")
	fmt.Fprintln(w, "|---|---|---:|---:|---|")
	for _, v := range vs {
		cells := make([]string, len(v.values))
		for i, x := range v.values {
			cells[i] = fmt.Sprintf(v.format, x)
		}
		met := "no"
		if v.met() {
			met = "**yes**"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d of %d | %s |\n", v.name, strings.Join(cells, ", "),
			spreadOf(v.values).format(v.format), v.held, len(v.values), met)
	}
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

// spread is the median, least and greatest of some values.
type spread struct{ med, lo, hi float64 }

func spreadOf(v []float64) spread { return spread{medianOf(v), slices.Min(v), slices.Max(v)} }

// format writes s as "median (least–greatest)", each value by verb.
func (s spread) format(verb string) string {
	return fmt.Sprintf(verb+" ("+verb+"–"+verb+")", s.med, s.lo, s.hi)
}

func medianOf(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
