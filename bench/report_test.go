package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

func TestSpread(t *testing.T) {
	for _, c := range []struct {
		v    []float64
		want spread
	}{
		{[]float64{3, 1, 2}, spread{2, 1, 3}},
		{[]float64{4, 1, 3, 2}, spread{2.5, 1, 4}},
		{[]float64{7}, spread{7, 7, 7}},
	} {
		if got := spreadOf(c.v); got != c.want {
			t.Errorf("spreadOf(%v) = %+v, want %+v", c.v, got, c.want)
		}
	}
	if got := (spread{1.28, 1.18, 1.31}).format("%.2f×"); got != "1.28× (1.18×–1.31×)" {
		t.Errorf("format: %q", got)
	}
}

func TestVerdictMet(t *testing.T) {
	for _, c := range []struct {
		held, rounds int
		want         bool
	}{
		{5, 5, true}, {4, 5, true}, {3, 5, false},
		{3, 3, true}, {2, 3, false},
		{8, 10, true}, {7, 10, false},
		{0, 0, false},
	} {
		v := verdict{values: make([]float64, c.rounds), held: c.held}
		if got := v.met(); got != c.want {
			t.Errorf("held in %d of %d: met %t, want %t", c.held, c.rounds, got, c.want)
		}
	}
}

// TestJudge works the ack path's targets out of five rounds, in one of which
// plain-extract did not run.
func TestJudge(t *testing.T) {
	var rs []result
	run := func(round int, consumer string, rate, cpu, allocs float64) {
		rs = append(rs, result{Scenario: scenarioAck, Round: round, Consumer: consumer, Rate: rate, CPU: cpu, Allocs: allocs})
	}
	// Lily's CPU per round over plain-extract's: 1.0, 1.2, 1.1, 1.06, and
	// round 3 without plain-extract. Allocs: +5, +9, +8, +7.
	for i, r := range []struct{ lilyCPU, baseCPU, lilyAllocs, lilyRate, plainRate float64 }{
		{20, 20, 117, 9600, 10000},
		{24, 20, 121, 9400, 10000},
		{30, 0, 118, 9000, 10000},
		{22, 20, 120, 10000, 10000},
		{21.2, 20, 119, 12000, 10000},
	} {
		round := i + 1
		run(round, "plain", r.plainRate, 15, 76)
		if r.baseCPU > 0 {
			run(round, "plain-extract", 9800, r.baseCPU, 112)
		}
		run(round, "lily", r.lilyRate, r.lilyCPU, r.lilyAllocs)
	}
	got := map[string]verdict{}
	for _, v := range judge(scenarioAck, rs) {
		got[v.name] = v
	}
	if len(got) != 3 {
		t.Fatalf("%d verdicts, want the ack path's 3: %v", len(got), got)
	}
	for _, c := range []struct {
		name   string
		values []float64
		held   int
		met    bool
	}{
		{"CPU ≤ 1.1× plain-extract", []float64{1.0, 1.2, 1.1, 1.06}, 3, false},
		{"allocs ≤ plain-extract + 8", []float64{5, 9, 8, 7}, 3, false},
		{"msg/s ≥ 0.95× plain", []float64{0.96, 0.94, 0.90, 1.0, 1.2}, 3, false},
	} {
		v := got[c.name]
		if !slices.EqualFunc(v.values, c.values, func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }) || v.held != c.held || v.met() != c.met {
			t.Errorf("%s: values %v, held %d, met %t; want %v, %d, %t", c.name, v.values, v.held, v.met(), c.values, c.held, c.met)
		}
	}
	for i := range rs {
		if rs[i].Consumer == "plain" {
			rs = append(rs, rs[i])
			rs[len(rs)-1].Scenario = scenarioRetry
		}
	}
	if vs := judge(scenarioRetry, rs); len(vs) != 0 {
		t.Errorf("the retry path's targets judged from the ack path's runs: %v", vs)
	}

	var out bytes.Buffer
	printTargets(&out, judge(scenarioAck, rs))
	for _, line := range []string{
		"| CPU ≤ 1.1× plain-extract | 1.00×, 1.20×, 1.10×, 1.06× | 1.08× (1.00×–1.20×) | 3 of 4 | no |",
		"| msg/s ≥ 0.95× plain | 0.960, 0.940, 0.900, 1.000, 1.200 | 0.960 (0.900–1.200) | 3 of 5 | no |",
	} {
		if !strings.Contains(out.String(), line+"\n") {
			t.Errorf("the targets lack the line\n%s\nin\n%s", line, out.String())
		}
	}
}

// A run whose drain started before the machine was quiet is marked on its
// round, with the mark's footnote under its path's runs; a path without
// such a run has neither.
func TestReportMarksUnquietRun(t *testing.T) {
	rs := []result{
		{Scenario: scenarioAck, Round: 1, Consumer: "plain", N: 100, Rate: 1000},
		{Scenario: scenarioAck, Round: 1, Consumer: "lily", N: 100, Rate: 1000, Unquiet: true},
		{Scenario: scenarioRetry, Round: 1, Consumer: "plain", N: 100, Rate: 500},
		{Scenario: scenarioRetry, Round: 1, Consumer: "lily", N: 100, Rate: 500},
	}
	var out bytes.Buffer
	printReport(&out, runConfig{prefetch: 256, concurrency: 64}, 1, rs, false)
	report := out.String()
	ack, retry, ok := strings.Cut(report, "### retry path")
	if !ok {
		t.Fatalf("no retry path in\n%s", report)
	}
	footnote := "\n† The run's drain started although the machine was not 80 % idle within 20 s: "
	for _, want := range []string{"\n| 1 | plain | 1000 |", "\n| 1 † | lily | 1000 |", footnote} {
		if !strings.Contains(ack, want) {
			t.Errorf("the ack path lacks %q in\n%s", want, ack)
		}
	}
	if strings.Count(report, "†") != 2 {
		t.Errorf("%d marks, want the run's and its footnote's:\n%s", strings.Count(report, "†"), report)
	}
	if !strings.Contains(retry, "\n| 1 | lily | 500 |") || strings.Contains(retry, "†") {
		t.Errorf("the retry path's runs, all quiet, marked:\n%s", retry)
	}
}
