package ledger

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/topology"
)

// A forced stop strikes only when it met what it is there for: a force
// window, a final abort with a delivery in flight, and a delivery requeued
// unstarted. Each missing alone makes it a stop to try again.
func TestForcedStopStrikesOnlyWithWorkInFlight(t *testing.T) {
	full := func() *runtime.Report {
		return &runtime.Report{
			Phases:     []runtime.Phase{{Name: "drain"}, {Name: "force window"}, {Name: "close"}},
			Counts:     map[runtime.Path]int{runtime.PathAcked: 40, runtime.PathNotStarted: 3},
			Unresolved: []runtime.Record{{MessageID: "m1", Handler: "abandoned", Reason: "settlement not attempted (authority revoked)"}},
		}
	}
	if !metWorkInFlight(full()) {
		t.Error("a stop that met all three did not strike")
	}
	open := full()
	open.Unresolved[0] = runtime.Record{MessageID: "m1", Reason: "still in flight when the consumer closed (final abort); the broker redelivers it"}
	if !metWorkInFlight(open) {
		t.Error("a stop whose journey was still open at the abort did not strike")
	}
	for name, spoil := range map[string]func(*runtime.Report){
		"no force window": func(r *runtime.Report) { r.Phases = r.Phases[:1] },
		"nothing aborted": func(r *runtime.Report) { r.Unresolved[0].Handler = "ok" },
		"nothing waiting": func(r *runtime.Report) { delete(r.Counts, runtime.PathNotStarted) },
	} {
		rep := full()
		spoil(rep)
		if metWorkInFlight(rep) {
			t.Errorf("%s: struck", name)
		}
	}
}

// A fault that makes the broker refuse handoffs strikes only once a record
// shows one it refused: none may have come while it lasted.
func TestRefusedHandoffsAreSeenInTheRecords(t *testing.T) {
	r := newRun(Config{}, spec("q", topology.Classic))
	returned := refusal{"returned", "q.retry"}
	r.observe(runtime.Record{MessageID: "m1", Attempt: 1, Path: runtime.PathRequeued, Handoff: "nacked", Destination: "q.retry"})
	r.observe(runtime.Record{MessageID: "m2", Attempt: 1, Path: runtime.PathRequeued, Handoff: "returned", Destination: "q.dlq"})
	// Refusals of another kind, or to another queue, are not this one's.
	if n := r.refusedSoFar(returned); n != 0 {
		t.Errorf("%d handoffs to the bucket returned, want 0", n)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if r.refusedSince(ended, returned, 0) {
		t.Error("struck with no handoff to the bucket returned")
	}
	before := r.refusedSoFar(returned)
	go func() {
		time.Sleep(100 * time.Millisecond)
		r.observe(runtime.Record{MessageID: "m3", Attempt: 1, Path: runtime.PathRequeued, Handoff: "returned", Destination: "q.retry"})
	}()
	if !r.refusedSince(context.Background(), returned, before) {
		t.Error("a handoff to the bucket returned, and the fault did not strike")
	}
}

// A round strikes the kinds that need work in flight first, while the
// publishing is at its fullest, then the others, then a cluster's nodes'
// (in an order drawn from the seed); each group keeps its order.
func TestRoundStrikesTheFaultsThatNeedWorkFirst(t *testing.T) {
	var kinds []fault
	for _, name := range []string{faultCommitKilled, "consumer restarted", faultNodeStopped, "stall", faultBucketDeleted, faultLeaderKilled, faultDLQRefusing, "delay", faultAckDropped} {
		kinds = append(kinds, fault{name: name})
	}
	var names []string
	for _, k := range newRun(Config{Seed: 1}, spec("q", topology.Classic)).round(kinds) {
		names = append(names, k.name)
	}
	want := []string{faultCommitKilled, faultBucketDeleted, faultDLQRefusing, faultAckDropped, "consumer restarted", "stall", "delay"}
	if len(names) != len(kinds) || !slices.Equal(names[:len(want)], want) {
		t.Fatalf("round %q; want %q, then the node faults", names, want)
	}
	if nodes := names[len(want):]; !slices.Contains(nodes, faultNodeStopped) || !slices.Contains(nodes, faultLeaderKilled) {
		t.Errorf("round ends with %q; want the node faults", nodes)
	}
}

// A frame fault strikes only when it changed the traffic: a stall or a delay
// that held no frame back did not, nor a confirm that found no consume
// connection to cut.
func TestFrameFaultsStrikeOnlyWhenTheyChangedTraffic(t *testing.T) {
	broker, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Close()
	r := newRun(Config{Seed: 1}, spec("q", topology.Classic))
	if r.proxy, err = faults.Listen(broker.Addr().String()); err != nil {
		t.Fatal(err)
	}
	defer r.proxy.Close()
	kinds := map[string]fault{}
	for _, k := range r.nodeFaults() {
		kinds[k.name] = k
	}
	// With no connection through the proxy, nothing to hold.
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for _, name := range []string{"stall", "delay"} {
		if struck, err := kinds[name].strike(ended); struck || err != nil {
			t.Errorf("%s with no traffic: struck %v, %v", name, struck, err)
		}
	}
	// A handoff connection whose confirms pass, and no consume connection.
	client, err := net.Dial("tcp", r.proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	name := faults.ConnectionName("q", "handoff")
	startOk := binary.BigEndian.AppendUint32([]byte("\x0fconnection_nameS"), uint32(len(name)))
	if _, err := client.Write(slices.Concat([]byte("AMQP\x00\x00\x09\x01"), methodFrame(0, faults.ConnectionStartOk, append(startOk, name...)))); err != nil {
		t.Fatal(err)
	}
	conn, err := broker.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.ReadFull(conn, make([]byte, 8+7+4+len(startOk)+len(name)+1)); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, client) }()
	result := make(chan bool, 1)
	go func() {
		struck, err := kinds[faultConfirmCut].strike(context.Background())
		if err != nil {
			t.Error(err)
		}
		result <- struck
	}()
	confirm := methodFrame(1, faults.BasicAck, make([]byte, 9))
	for {
		select {
		case struck := <-result:
			if struck {
				t.Error("a confirm cut that found no consume connection struck")
			}
			return
		case <-time.After(50 * time.Millisecond):
			if _, err := conn.Write(confirm); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// methodFrame is an AMQP method frame of m on channel with args.
func methodFrame(channel uint16, m faults.Method, args []byte) []byte {
	payload := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, m.Class), m.ID)
	frame := binary.BigEndian.AppendUint32([]byte{1, byte(channel >> 8), byte(channel)}, uint32(len(payload)+len(args)))
	return append(append(append(frame, payload...), args...), 0xCE)
}
