package main

import "testing"

// BenchmarkReplay is the per-delivery path of each consumer without a
// broker: the consumers of the broker runs (drainPlain, drainLily) read the
// same recorded 1 KiB delivery, replayed b.N times over loopback TCP, and
// settle it; the replay's ACKs go to a counter and its publishes are
// confirmed at once. Run with a fixed count (-benchtime 50000x), so that
// connecting is a small share, and compare with benchstat -col /consumer.
//
// ns/op and cpu-ns/op run from the first delivery (once the consumer
// consumes on all its channels) to the b.N-th settlement, as the broker
// runs' throughput and CPU do: what a consumer does to start before it and
// to stop after it (Watermill waits half a second for its last ACKs to be
// written) is not a cost per message. allocs/op is the whole run's, start
// and stop included.
func BenchmarkReplay(b *testing.B) {
	for _, path := range []struct {
		scenario  string
		consumers []string
	}{
		{scenarioAck, []string{"plain", "plain-extract", "plain-batch", "plain-duties", "lily", "watermill"}},
		{scenarioRetry, []string{"plain", "plain-facts", "lily", "watermill"}},
	} {
		for _, consumer := range path.consumers {
			b.Run("path="+path.scenario+"/consumer="+consumer, func(b *testing.B) {
				url, end := startReplay(b, b.N)
				run := runConfig{
					url: url, scenario: path.scenario, consumer: consumer, n: b.N,
					prefetch: 256, concurrency: 64, spec: benchSpec("replay", 256, 64),
				}
				t := newTracker(b.N)
				b.ReportAllocs()
				b.ResetTimer()
				if err := drains[consumer](b.Context(), run, t); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				select {
				case <-t.done:
				default:
					b.Fatalf("the drain returned after %d of %d settlements", t.settled.Load(), b.N)
				}
				b.ReportMetric(float64(t.end.Sub(t.started()).Nanoseconds())/float64(b.N), "ns/op")
				b.ReportMetric(float64(t.endCPU.Nanoseconds()-t.firstCPU.Load())/float64(b.N), "cpu-ns/op")
				c := end()
				b.ReportMetric(float64(c.AckFrames)/float64(b.N), "ack-frames/op")
				if err := c.want(int64(b.N), map[string]int64{scenarioAck: 0, scenarioRetry: int64(b.N)}[path.scenario]); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}
