package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// replayCounts is what a replay process saw, printed as JSON when its
// standard input closes.
type replayCounts struct {
	Acked, Rejected, Published, AckFrames, Misacked int64
	Unserved, Misack                                string
}

// want fails unless the replay saw exactly acked deliveries ACKed and
// published publishes, and nothing it refused: no rejection, no method it
// could not answer, no settlement of a tag not sent or already settled.
func (c replayCounts) want(acked, published int64) error {
	if c.Acked != acked || c.Published != published || c.Rejected != 0 || c.Misacked != 0 || c.Unserved != "" {
		return fmt.Errorf("the replay saw %+v, want %d ACKs and %d publishes", c, acked, published)
	}
	return nil
}

// TestMain runs the replay when the benchmark starts this binary as one.
func TestMain(m *testing.M) {
	if n := os.Getenv(replayEnv); n != "" {
		os.Exit(replayMain(n))
	}
	os.Exit(m.Run())
}

// replayMain listens, prints its address, and serves. It prints a line
// "open C H K" whenever its open connections, channels or consumers change;
// a line "go" on its standard input starts a paced replay; when its standard
// input closes it prints what it saw, as JSON.
func replayMain(arg string) int {
	nText, rateText, paced := strings.Cut(arg, ",")
	n, err := strconv.Atoi(nText)
	rate := 0.0
	if paced {
		rate, err = strconv.ParseFloat(rateText, 64)
	}
	tpl, terr := newTemplate()
	if err = errors.Join(err, terr); err != nil {
		fmt.Fprintln(os.Stderr, "replay:", err)
		return 2
	}
	r, err := listenReplay(tpl.stamp(1, time.Now()), n, rate)
	if err != nil {
		fmt.Fprintln(os.Stderr, "replay:", err)
		return 2
	}
	var out sync.Mutex // the lines of the reporter and the final JSON
	fmt.Println(r.ln.Addr())
	go r.serveAll()
	go func() {
		for range r.changed {
			out.Lock()
			fmt.Println("open", r.conns.Load(), r.chans.Load(), r.consumers.Load())
			out.Unlock()
		}
	}()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() == "go" {
			r.start()
		}
	}
	counts := replayCounts{Acked: r.acked.Load(), Rejected: r.rejected.Load(), Published: r.published.Load(), AckFrames: r.ackFrames.Load(), Misacked: r.misacked.Load()}
	counts.Unserved, _ = r.unserved.Load().(string)
	counts.Misack, _ = r.misack.Load().(string)
	out.Lock()
	defer out.Unlock()
	_ = json.NewEncoder(os.Stdout).Encode(counts)
	return 0
}

// replayProcess is a replay process seen from the benchmark.
type replayProcess struct {
	tb    testing.TB
	url   string
	stdin io.WriteCloser
	// open is the last "open" line: connections, channels, consumers.
	open   chan [3]int64
	counts chan replayCounts
}

// startReplay starts a replay process of n deliveries, sent as fast as the
// consumers' windows allow.
func startReplay(tb testing.TB, n int) (url string, end func() replayCounts) {
	p := startPacedReplay(tb, n, 0)
	return p.url, p.end
}

// startPacedReplay starts a replay process of n deliveries at rate per
// second (0: at once, without waiting for go).
func startPacedReplay(tb testing.TB, n int, rate float64) *replayProcess {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), replayEnv+"="+strconv.Itoa(n)+","+strconv.FormatFloat(rate, 'f', -1, 64))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		tb.Fatalf("replay: no address: %v", lines.Err())
	}
	p := &replayProcess{tb: tb, url: "amqp://guest:guest@" + lines.Text() + "/", stdin: stdin, open: make(chan [3]int64, 1), counts: make(chan replayCounts, 1)}
	go func() {
		for lines.Scan() {
			var c replayCounts
			var open [3]int64
			switch line := lines.Text(); {
			case strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &c) == nil:
				p.counts <- c
			case strings.HasPrefix(line, "open "):
				if _, err := fmt.Sscan(line[len("open "):], &open[0], &open[1], &open[2]); err != nil {
					continue
				}
				select {
				case <-p.open:
				default:
				}
				p.open <- open
			}
		}
		close(p.counts)
	}()
	return p
}

// waitOpen waits until the replay has had consumers open at once, and
// returns its open connections and channels then.
func (p *replayProcess) waitOpen(consumers int64) (conns, chans int64) {
	deadline := time.After(2 * time.Minute)
	for {
		select {
		case o := <-p.open:
			if o[2] >= consumers {
				return o[0], o[1]
			}
		case <-deadline:
			p.tb.Fatalf("replay: fewer than %d consumers after two minutes", consumers)
		}
	}
}

// start lets a paced replay's deliveries go.
func (p *replayProcess) start() {
	if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
		p.tb.Fatal(err)
	}
}

// end ends the replay and returns what it saw.
func (p *replayProcess) end() replayCounts {
	_ = p.stdin.Close()
	c, ok := <-p.counts
	if !ok {
		p.tb.Fatal("replay: ended without its counts")
	}
	return c
}
