// Command bench measures Lily's consumer against a plain amqp091-go loop and
// Watermill's AMQP subscriber, on the ack path, on the retry path's first pass
// and on the ack path under a steady publish rate (see docs/benchmarks.md).
// For each run it fills a fresh durable classic queue with n persistent 1 KiB
// OrderPlaced v2 messages (in the live scenario, publishes them while the
// consumer runs), and drains it in a child process of its own, so that each
// run's peak resident set is its own and no run inherits another's heap. Runs
// alternate (plain, lily, watermill, plain, ...) over the rounds, so that a
// drift of the machine or the broker spreads over all three.
//
//	cd bench && go run . [-n 100000] [-rounds 3] [-scenarios ack,retry,live] ...
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/lily-mq/lily/runtime"
)

// The scenarios.
const (
	scenarioAck   = "ack"   // every handler succeeds: ACK
	scenarioRetry = "retry" // every handler fails retryably: confirmed copy to the bucket, then ACK
	// scenarioLive is the ack path under a steady load below every consumer's
	// limit: messages are published at a fixed rate while the consumer runs,
	// so that publish-to-settlement latency is the consumer's, not the time a
	// message waited behind a filled queue.
	scenarioLive = "live"
)

var scenarioOrder = []string{scenarioAck, scenarioRetry, scenarioLive}

// drains are the consumers under test, by name, in the order runs alternate.
var drains = map[string]func(context.Context, runConfig, *tracker) error{
	"plain":     drainPlain,
	"lily":      drainLily,
	"watermill": drainWatermill,
	// Not run by default: plain with the generated extractor, to tell the
	// runtime's cost from the extractor's.
	"plain-extract": drainPlain,
	// Not run by default: plain-extract whose retry copies also carry the
	// failure facts and handoff id Lily's carry, to tell the broker's cost of
	// those headers from the runtime's.
	"plain-facts": drainPlain,
	// Not run by default: plain-extract running its extractor on a goroutine
	// of its own under a timeout and ACKing through one writer, as Lily's
	// journey does, to tell what those hand-offs cost from the rest of
	// Lily's.
	"plain-duties": drainPlain,
	// Not run by default: plain-extract ACKing with multiple, to tell what
	// Lily's settler's multiple ACKs buy from the rest of Lily.
	"plain-batch": drainPlain,
}

// consumersOf is how many consumers the drain of consumer holds on its queue
// once it consumes on all its channels: Watermill's router a subscription,
// on a channel of its own, per handler; the others one channel.
func consumersOf(consumer string, concurrency int) int {
	if consumer == "watermill" {
		return concurrency
	}
	return 1
}

// runConfig is one run: a scenario, a consumer and its queue.
type runConfig struct {
	url                   string
	scenario, consumer    string
	round, n              int
	retryN, liveN         int     // n of the retry and live scenarios' runs, in the parent
	liveRate              float64 // messages per second published in the live scenario
	prefetch, concurrency int
	spec                  runtime.QueueSpec
	profile               string // directory for the run's profiles; empty: none
}

// result is what a run measured; the child prints it as JSON.
type result struct {
	Scenario string  `json:"scenario"`
	Consumer string  `json:"consumer"`
	Round    int     `json:"round"`
	N        int     `json:"n"`
	Seconds  float64 `json:"seconds"` // from the first delivery to the N-th settlement, as CPU
	Rate     float64 `json:"msg_per_s"`
	P50      float64 `json:"p50_ms"`
	P99      float64 `json:"p99_ms"`
	// PeakRSS is the child's VmHWM in MiB; RSS its VmRSS at each tenth of the run.
	PeakRSS float64   `json:"peak_rss_mib"`
	RSS     []float64 `json:"rss_mib"`
	// AllocBytes and Allocs are the Go heap's allocations per message over
	// the whole run, setup included.
	AllocBytes float64 `json:"alloc_bytes_per_msg"`
	Allocs     float64 `json:"allocs_per_msg"`
	// CPUFirst and CPUEnd are the child's user and system time (getrusage),
	// in nanoseconds, at its first delivery and at its N-th settlement. CPU
	// is the span between them per message in microseconds, which the
	// parent works out (cpuPerMessage): the process's start, dial and
	// declarations before the first delivery and its stop after the N-th
	// settlement are not a cost per message. The first delivery is the
	// first once the consumer consumes on all its channels (tracker.deliver).
	CPUFirst int64   `json:"cpu_ns_at_first_delivery"`
	CPUEnd   int64   `json:"cpu_ns_at_nth_settlement"`
	CPU      float64 `json:"cpu_us_per_msg"`
	// BrokerCPU is the broker's CPU time per message over the child's life,
	// in microseconds; Idle the share of the machine's CPU left idle then,
	// and Others the share other processes took (neither the broker nor the
	// run: on a shared machine, builds and tests running beside it).
	BrokerCPU float64 `json:"broker_cpu_us_per_msg"`
	Idle      float64 `json:"idle_percent"`
	Others    float64 `json:"others_percent"`
	// Unquiet says the machine was not quiet within quietLimit before the
	// drain, which started anyway (quiesce); the parent sets it.
	Unquiet bool `json:"-"`
}

func main() {
	url := flag.String("url", envOr("LILY_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), "RabbitMQ URL")
	n := flag.Int("n", 100_000, "messages per run on the ack path")
	retryN := flag.Int("retry-n", 30_000, "messages per run on the retry path, whose first pass is slower (each message waits for a confirm)")
	liveN := flag.Int("live-n", 30_000, "messages per run in the live scenario")
	liveRate := flag.Float64("live-rate", 3_000, "messages per second published in the live scenario")
	rounds := flag.Int("rounds", 3, "rounds; each runs every consumer once per scenario")
	prefetch := flag.Int("prefetch", 256, "unacknowledged messages the broker sends ahead, per consumer")
	concurrency := flag.Int("concurrency", 64, "deliveries handled at once (and handoffs in flight on the retry path)")
	scenarios := flag.String("scenarios", strings.Join(scenarioOrder, ","), "comma-separated: ack, retry, live")
	consumers := flag.String("consumers", "plain,lily,watermill", "comma-separated consumers, in the order runs alternate")
	profile := flag.String("profile", "", "directory for each run's CPU and allocation profiles (<scenario>-<consumer>-r<round>.{cpu,allocs}.pprof)")
	showRSS := flag.Bool("rss", false, "print each run's resident set at every tenth of the run")
	child := flag.String("child", "", "internal: run one drain as <scenario>,<consumer>,<round>,<queue> and print its result")
	flag.Parse()

	base := runConfig{url: *url, n: *n, retryN: *retryN, liveN: *liveN, liveRate: *liveRate, prefetch: *prefetch, concurrency: *concurrency, profile: *profile}
	if *child != "" {
		if err := runChild(base, *child); err != nil {
			fmt.Fprintln(os.Stderr, "bench child:", err)
			os.Exit(1)
		}
		return
	}
	results, err := runAll(base, *rounds, split(*scenarios), split(*consumers))
	printReport(os.Stdout, base, *rounds, results, *showRSS)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func split(s string) []string { return strings.Split(s, ",") }

func envOr(key, fallback string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return fallback
}

// runAll runs every round, alternating the consumers within each scenario.
func runAll(base runConfig, rounds int, scenarios, consumers []string) ([]result, error) {
	for _, s := range scenarios {
		if !slices.Contains(scenarioOrder, s) {
			return nil, fmt.Errorf("unknown scenario %q", s)
		}
	}
	for _, c := range consumers {
		if drains[c] == nil {
			return nil, fmt.Errorf("unknown consumer %q", c)
		}
		if c == "plain-duties" && slices.Contains(scenarios, scenarioRetry) {
			return nil, errors.New("plain-duties runs the ack path only: leave retry out of -scenarios")
		}
	}
	if base.profile != "" {
		if err := os.MkdirAll(base.profile, 0o755); err != nil {
			return nil, err
		}
	}
	tpl, err := newTemplate()
	if err != nil {
		return nil, err
	}
	var results []result
	for round := 1; round <= rounds; round++ {
		// Each round starts one consumer later, so that over rounds every
		// consumer runs in every position (a run pays for the broker's work
		// left over from the one before it).
		order := append(slices.Clone(consumers[(round-1)%len(consumers):]), consumers[:(round-1)%len(consumers)]...)
		for _, scenario := range scenarios {
			for _, consumer := range order {
				r := base
				r.scenario, r.consumer, r.round = scenario, consumer, round
				switch scenario {
				case scenarioRetry:
					r.n = r.retryN
				case scenarioLive:
					r.n = r.liveN
				}
				res, err := runOne(r, &tpl)
				if err != nil {
					return results, fmt.Errorf("%s %s round %d: %w", scenario, consumer, round, err)
				}
				fmt.Fprintf(os.Stderr, "round %d %-5s %-9s %8.0f msg/s  p50 %7.1f ms  p99 %7.1f ms  peak RSS %5.1f MiB  %6.0f B/msg %5.1f allocs/msg %5.1f CPU µs/msg, broker %5.1f, idle %3.0f%%, others %3.0f%%\n",
					round, scenario, consumer, res.Rate, res.P50, res.P99, res.PeakRSS, res.AllocBytes, res.Allocs, res.CPU, res.BrokerCPU, res.Idle, res.Others)
				results = append(results, res)
			}
		}
	}
	return results, nil
}

// runOne fills a queue of its own, drains it in a child process, checks where
// the messages went and deletes the queues.
func runOne(r runConfig, tpl *template) (result, error) {
	queue := fmt.Sprintf("lily-bench-%s-%s-r%d-%08x", r.scenario, r.consumer, r.round, rand.Uint32())
	spec := benchSpec(queue, r.prefetch, r.concurrency)
	defer func() {
		if err := deleteTopology(r.url, spec); err != nil {
			fmt.Fprintln(os.Stderr, "bench: delete", queue+":", err)
		}
	}()
	self, err := os.Executable()
	if err != nil {
		return result{}, err
	}
	if err := declare(r.url, spec); err != nil {
		return result{}, err
	}
	if r.scenario != scenarioLive {
		if err := fill(r.url, spec.Name, tpl, r.n, 0); err != nil {
			return result{}, fmt.Errorf("fill: %w", err)
		}
	}
	unquiet := !quiesce()
	if unquiet {
		fmt.Fprintf(os.Stderr, "round %d %-5s %-9s the machine was not %.0f %% idle within %.0f s: the drain starts anyway (marked %s in the report)\n",
			r.round, r.scenario, r.consumer, 100*quietShare, quietLimit.Seconds(), unquietMark)
	}
	cmd := exec.Command(self, "-child", strings.Join([]string{r.scenario, r.consumer, fmt.Sprint(r.round), queue}, ","),
		"-url", r.url, "-n", fmt.Sprint(r.n), "-prefetch", fmt.Sprint(r.prefetch), "-concurrency", fmt.Sprint(r.concurrency),
		"-profile", r.profile)
	cmd.Stderr = os.Stderr
	var out strings.Builder
	cmd.Stdout = &out
	broker0, found0 := brokerCPU(r.url)
	self0 := selfCPU()
	idle0, total0 := machineCPU()
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	if r.scenario == scenarioLive {
		// Publish only once the consumer listens on all its channels (all
		// of Watermill's subscriptions), at the steady rate: no message
		// waits for a subscription still opening.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := awaitConsumers(ctx, r.url, queue, consumersOf(r.consumer, r.concurrency))
		cancel()
		if err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return result{}, err
		}
		if err := fill(r.url, spec.Name, tpl, r.n, r.liveRate); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return result{}, fmt.Errorf("publish: %w", err)
		}
	}
	err = cmd.Wait()
	broker1, found1 := brokerCPU(r.url)
	self1 := selfCPU()
	idle1, total1 := machineCPU()
	if err != nil {
		return result{}, fmt.Errorf("child: %w", err)
	}
	var res result
	if err := json.Unmarshal([]byte(out.String()), &res); err != nil {
		return result{}, fmt.Errorf("child's result: %w", err)
	}
	if res.CPU, err = cpuPerMessage(res); err != nil {
		return result{}, fmt.Errorf("child's result: %w", err)
	}
	res.Unquiet = unquiet
	// others % leaves out the child's CPU over its whole life: what it
	// spent before its first delivery and after its N-th settlement still
	// took the machine's.
	st := cmd.ProcessState
	child := st.UserTime() + st.SystemTime()
	if found0 && found1 {
		res.BrokerCPU = float64((broker1 - broker0).Microseconds()) / float64(r.n)
	} else {
		// Counted in others % as well, which then holds the broker's.
		fmt.Fprintln(os.Stderr, "broker CPU not read: no local process found listening on the URL's port, nor one RabbitMQ node alone (run as root, or the broker's user, to read its sockets)")
		broker0, broker1 = 0, 0
	}
	if total := total1 - total0; total > 0 {
		busy := total - (idle1 - idle0)
		res.Idle = 100 * float64(idle1-idle0) / float64(total)
		res.Others = max(0, 100*float64(busy-child-(broker1-broker0)-(self1-self0))/float64(total))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return res, settleCheck(ctx, r.url, spec, r.scenario, r.n)
}

// cpuPerMessage is res's CPU time from its first delivery to its N-th
// settlement, per message, in microseconds.
func cpuPerMessage(res result) (float64, error) {
	if res.N <= 0 || res.CPUFirst <= 0 || res.CPUEnd < res.CPUFirst {
		return 0, fmt.Errorf("CPU time %d ns at the first delivery and %d ns at settlement %d", res.CPUFirst, res.CPUEnd, res.N)
	}
	return float64(res.CPUEnd-res.CPUFirst) / 1e3 / float64(res.N), nil
}

// runChild drains one filled queue and prints the result as JSON.
func runChild(r runConfig, arg string) error {
	parts := strings.SplitN(arg, ",", 4)
	if len(parts) != 4 {
		return errors.New("-child wants <scenario>,<consumer>,<round>,<queue>")
	}
	r.scenario, r.consumer = parts[0], parts[1]
	if _, err := fmt.Sscan(parts[2], &r.round); err != nil {
		return err
	}
	r.spec = benchSpec(parts[3], r.prefetch, r.concurrency)
	drain := drains[r.consumer]
	if drain == nil {
		return fmt.Errorf("unknown consumer %q", r.consumer)
	}
	// A run that stalls fails instead of hanging the benchmark: no consumer
	// here is slower than 1,000 msg/s.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute+time.Duration(r.n)*time.Millisecond)
	defer cancel()

	stem := filepath.Join(r.profile, fmt.Sprintf("%s-%s-r%d", r.scenario, r.consumer, r.round))
	if r.profile != "" {
		f, err := os.Create(stem + ".cpu.pprof")
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	t := newTracker(r.n)
	var before, after goruntime.MemStats
	goruntime.ReadMemStats(&before)
	if err := drain(ctx, r, t); err != nil {
		return err
	}
	goruntime.ReadMemStats(&after)
	if r.profile != "" {
		pprof.StopCPUProfile()
		if err := writeProfile("allocs", stem+".allocs.pprof"); err != nil {
			return err
		}
	}
	secs := t.end.Sub(t.started()).Seconds()
	n := float64(r.n)
	return json.NewEncoder(os.Stdout).Encode(result{
		Scenario: r.scenario, Consumer: r.consumer, Round: r.round, N: r.n,
		Seconds: secs, Rate: n / secs, P50: t.lat.quantile(0.5), P99: t.lat.quantile(0.99),
		CPUFirst: t.firstCPU.Load(), CPUEnd: t.endCPU.Nanoseconds(),
		PeakRSS: procStatus("VmHWM"), RSS: t.rssMiB(),
		AllocBytes: float64(after.TotalAlloc-before.TotalAlloc) / n,
		Allocs:     float64(after.Mallocs-before.Mallocs) / n,
	})
}

func writeProfile(name, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
