package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/quarantine"
	"github.com/lily-mq/lily/runtime/internal/decide"
	"github.com/lily-mq/lily/runtime/internal/guard"
	"github.com/lily-mq/lily/runtime/internal/outcome"
	"github.com/lily-mq/lily/runtime/internal/settle"
	"github.com/lily-mq/lily/topology"
)

type discardAcker struct{}

func (discardAcker) Ack(uint64, bool) error        { return nil }
func (discardAcker) Nack(uint64, bool, bool) error { return nil }

// laneSpec is an ordered queue of one slot, whose deliveries' key is their
// header k.
func laneSpec() QueueSpec {
	return QueueSpec{
		Name: "lane-test", Topology: topology.Queue{Type: "classic", DeadLetterQueue: "lane-test.dlq"},
		Prefetch: 4, Concurrency: 1, MaxAttempts: 1, MaxBodyBytes: 1024, HandlerTimeout: time.Second,
		OrderKey: func(h map[string]any, _ []byte) string { s, _ := h["k"].(string); return s },
	}
}

// recordLines is a consumer of spec, with one route, whose records are
// kept, each as line words it; records returns those kept since it was last
// called.
func recordLines(t *testing.T, spec QueueSpec, line func(Record) string) (c *Consumer, records func() []string) {
	t.Helper()
	var mu sync.Mutex
	var kept []string
	c, err := NewConsumer(spec, Routes{{Type: "t", Version: 1, ContentType: "application/json"}: func(context.Context, RawDelivery) error { return nil }},
		Config{Logger: slog.New(slog.DiscardHandler), Observe: func(rec Record) {
			mu.Lock()
			defer mu.Unlock()
			kept = append(kept, line(rec))
		}})
	if err != nil {
		t.Fatal(err)
	}
	return c, func() []string {
		mu.Lock()
		defer mu.Unlock()
		got := kept
		kept = nil
		return got
	}
}

// pathAndReason words a record as its path and reason.
func pathAndReason(rec Record) string { return string(rec.Path) + ": " + rec.Reason }

// laneSession is a run of c and a session of it whose settler writes
// nowhere.
func laneSession(c *Consumer) (*run, *session) {
	r := c.newRun()
	gen := r.newGeneration()
	gen.Settler = settle.NewSettler(discardAcker{}, gen, 4)
	return r, &session{gen: gen, lost: make(chan struct{}), cancelled: make(chan struct{}), outlived: make(chan struct{})}
}

// An ordered delivery whose session is lost while it waits for a slot, or
// before it looks for one, is not started and frees no slot it did not
// take: whether another key's delivery holds the only slot, or every slot
// is free (when the select may take one or see the loss).
func TestOrderedWaiterOfALostSessionTakesNoSlot(t *testing.T) {
	spec := laneSpec()
	c, err := NewConsumer(spec, Routes{{Type: "t"}: func(context.Context, RawDelivery) error { return nil }}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		held := i%2 == 0 // another key's delivery holds the only slot
		r, s := laneSession(c)
		if held {
			r.slots <- struct{}{}
		} else {
			s.gen.Revoke()
			close(s.lost)
		}
		(&laneIntake{c: c, r: r, s: s}).take(&amqp.Delivery{DeliveryTag: 1, MessageId: "b-0", Headers: amqp.Table{"k": "b"}}, quarantine.Verdict{})
		if held {
			s.gen.Revoke()
			close(s.lost)
		}
		if !waitFor(waitChan(&r.deliveries), 10*time.Second) {
			t.Fatalf("run %d (slot held %v): the delivery never ended", i, held)
		}
		if want := map[bool]int{true: 1, false: 0}[held]; len(r.slots) != want {
			t.Fatalf("run %d: %d slots held after it ended; want %d", i, len(r.slots), want)
		}
	}
}

// An ordered delivery whose channel is lost while it waits is not started,
// and its record, unresolved, says its session was lost, and which wait it
// was in: whether the stop comes before its turn, or after a broker cancel
// that had left the channel healthy, or neither.
func TestOrderedWaiterOfALostSessionSaysSo(t *testing.T) {
	c, records := recordLines(t, laneSpec(), pathAndReason)
	const (
		forKey  = string(PathUnresolved) + ": not started: its session was lost while it waited for its order key"
		forSlot = string(PathUnresolved) + ": not started: its session was lost while it waited for a slot"
	)
	for _, tc := range []struct {
		name         string
		slot, stop   bool // it waits for a slot (else for its key); the stop comes before its turn
		cancelledToo bool // the broker had cancelled the consumer first
		want         string
	}{
		{"key, stop", false, true, false, forKey},
		{"key, cancelled, stop", false, true, true, forKey},
		{"key", false, false, false, forKey},
		{"slot, stop", true, true, false, forSlot},
		{"slot", true, false, false, forSlot},
		{"slot, cancelled", true, false, true, forSlot},
	} {
		records() // the last case's
		r, s := laneSession(c)
		s.lostAfterCancel = func(error) {}
		leaveHead := waitBehind(c, r, s, tc.slot, 1, "b-1")
		if tc.cancelledToo {
			s.lose(errCancelled)
		}
		s.broke(&amqp.Error{Code: amqp.ChannelError, Reason: "gone"})
		if tc.stop {
			close(r.stopping)
		}
		leaveHead()
		if !waitFor(waitChan(&r.deliveries), 10*time.Second) {
			t.Fatalf("%s: the delivery never ended", tc.name)
		}
		if got := records(); !slices.Equal(got, []string{tc.want}) {
			t.Errorf("%s: records %q, want %q", tc.name, got, tc.want)
		}
		if tc.slot {
			<-r.slots
		}
	}
}

// nackAcker records the tags it is asked to NACK.
type nackAcker struct {
	mu    sync.Mutex
	nacks []uint64
}

func (a *nackAcker) Ack(uint64, bool) error { return nil }
func (a *nackAcker) Nack(tag uint64, _, _ bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.nacks = append(a.nacks, tag)
	return nil
}

func (a *nackAcker) sent() []uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.nacks)
}

// An ordered delivery still waiting on a session the broker cancelled
// (retired, its channel healthy) when the consumer stops is requeued only
// once stop intake's cancel of the consuming session has returned: sent
// before, the broker could hand it straight to the consuming session,
// behind its key's later messages. Whether it waited for a slot or for its
// key.
func TestOrderedRetiredWaiterIsRequeuedAfterTheStopsCancel(t *testing.T) {
	c, records := recordLines(t, laneSpec(), func(rec Record) string { return rec.Reason })
	for _, slot := range []bool{true, false} {
		records() // the last case's
		r := c.newRun()
		gen := r.newGeneration()
		acker := &nackAcker{}
		gen.Settler = settle.NewSettler(acker, gen, 4)
		retired := &session{gen: gen, lost: make(chan struct{}), cancelled: make(chan struct{}), outlived: make(chan struct{})}
		retired.lose(errCancelled) // the broker cancelled it; its channel is healthy
		leaveHead := waitBehind(c, r, retired, slot, 7, "b-0")
		// The stop begins; its cancel of the consuming session is not
		// answered yet.
		close(r.stopping)
		leaveHead()
		time.Sleep(100 * time.Millisecond)
		if sent := acker.sent(); len(sent) > 0 {
			t.Fatalf("slot %v: NACKed %v before the stop's cancel was answered", slot, sent)
		}
		r.cancelledAtStop()
		if !waitFor(waitChan(&r.deliveries), 10*time.Second) {
			t.Fatalf("slot %v: the delivery never ended", slot)
		}
		if sent := acker.sent(); !slices.Equal(sent, []uint64{7}) {
			t.Errorf("slot %v: NACKed %v, want [7]", slot, sent)
		}
		want := "not started: intake stopped while it waited for its order key"
		if slot {
			want = "not started: intake stopped while it waited for a slot"
		}
		if reasons := records(); !slices.Equal(reasons, []string{want}) {
			t.Errorf("slot %v: reasons %q, want %q", slot, reasons, want)
		}
		if slot {
			<-r.slots
		}
	}
}

// OrderKey, user code, reads only what the guard passed: a delivery over the
// body limit, one whose headers break their bounds and one the connection's
// filter quarantined are refused without a call.
func TestOrderKeySeesOnlyWhatTheGuardPassed(t *testing.T) {
	var seen []string
	spec := QueueSpec{
		Name: "lane-test", Topology: topology.Queue{Type: "classic", DeadLetterQueue: "lane-test.dlq"},
		Prefetch: 4, Concurrency: 1, MaxAttempts: 1, MaxBodyBytes: 16, HandlerTimeout: time.Second,
		OrderKey: func(h map[string]any, body []byte) string {
			seen = append(seen, string(body))
			s, _ := h["k"].(string)
			return s
		},
	}
	c, err := NewConsumer(spec, Routes{{Type: "t", Version: 1, ContentType: "application/json"}: func(context.Context, RawDelivery) error { return nil }}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	delivery := func(body string, headers amqp.Table) *amqp.Delivery {
		h := amqp.Table{guard.HeaderVersion: int32(1), "k": "a"}
		for k, v := range headers {
			h[k] = v
		}
		return &amqp.Delivery{MessageId: "m-1", Type: "t", ContentType: "application/json", Headers: h, Body: []byte(body)}
	}
	wide := amqp.Table{}
	for i := range 2000 {
		wide["h"+strconv.Itoa(i)] = "v"
	}
	for _, tc := range []struct {
		name, quarantined string
		want              laneKey
		d                 *amqp.Delivery
	}{
		{"passed", "", laneKey{key: "a"}, delivery("{}", nil)},
		{"oversized", "", guardRefused, delivery(strings.Repeat("x", 17), nil)},
		{"poison", "", guardRefused, delivery("{}", wide)},
		{"no type", "", guardRefused, &amqp.Delivery{MessageId: "m-1", Headers: amqp.Table{"k": "a"}}},
		{"quarantined", "a table nested 40 deep", guardRefused, delivery("{}", nil)},
	} {
		seen = nil
		got, read := c.orderKey(tc.d, quarantine.Verdict{Why: tc.quarantined}, nil)
		if got != tc.want {
			t.Errorf("%s: key %+v, want %+v", tc.name, got, tc.want)
		}
		// The journey takes the guard's reading from here, not again; a
		// quarantined delivery's stand-in header is not read at intake.
		if passed := read != nil && read.verdict == guard.Passed && read.env != nil; (read == nil) != (tc.quarantined != "") || passed != (tc.want.key == "a") {
			t.Errorf("%s: reading %+v", tc.name, read)
		}
		if want := tc.want != guardRefused; (len(seen) == 1) != want {
			t.Errorf("%s: OrderKey called %d times, want %v", tc.name, len(seen), want)
		}
	}
}

// The intake that reads what the client buffered after the cancel goes on
// past an OrderKey that calls runtime.Goexit, on another goroutine: every
// delivery takes its place, goes back (intake is cancelled) behind the one
// before it in its lane, and the intake ends with the deliveries. One
// that panics with nil is no Goexit, even under GODEBUG=panicnil=1, where
// recover returns nil for it: the test runs itself again under it.
func TestOrderedIntakeGoesOnPastAGoexit(t *testing.T) {
	if os.Getenv("LILY_PANICNIL_CHILD") != "1" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestOrderedIntakeGoesOnPastAGoexit$", "-test.v")
		cmd.Env = append(os.Environ(), "GODEBUG=panicnil=1", "LILY_PANICNIL_CHILD=1")
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "--- PASS: TestOrderedIntakeGoesOnPastAGoexit") {
			t.Errorf("under GODEBUG=panicnil=1: %v\n%s", err, out)
		}
	}
	spec := QueueSpec{
		Name: "lane-test", Topology: topology.Queue{Type: "classic", DeadLetterQueue: "lane-test.dlq"},
		Prefetch: 5, Concurrency: 1, MaxAttempts: 1, MaxBodyBytes: 1024, HandlerTimeout: time.Second,
		OrderKey: func(h map[string]any, _ []byte) string {
			s, _ := h["k"].(string)
			switch s {
			case "exit":
				goruntime.Goexit()
			case "nil":
				panic(nil)
			}
			return s
		},
	}
	c, err := NewConsumer(spec, Routes{{Type: "t", Version: 1, ContentType: "application/json"}: func(context.Context, RawDelivery) error { return nil }}, Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var entered atomic.Int32
	c.hooks.enteredLane = func() { entered.Add(1) }
	r := c.newRun()
	gen := r.newGeneration()
	acker := &nackAcker{}
	gen.Settler = settle.NewSettler(acker, gen, 5)
	keys := []string{"a", "exit", "exit", "nil", "b"}
	deliveries := make(chan amqp.Delivery, len(keys))
	for i, k := range keys {
		deliveries <- amqp.Delivery{DeliveryTag: uint64(i + 1), MessageId: fmt.Sprint("m-", i), Type: "t", ContentType: "application/json",
			Headers: amqp.Table{guard.HeaderVersion: int32(1), "k": k}, Body: []byte("{}")}
	}
	close(deliveries)
	// Cancelled: each goes back not started, behind the one before it.
	s := &session{gen: gen, link: &link{}, deliveries: deliveries, lost: make(chan struct{}), cancelled: make(chan struct{}), outlived: make(chan struct{})}
	close(s.cancelled)
	if !waitFor(c.readInOrder(r, s, nil).done, 10*time.Second) {
		t.Fatalf("the intake did not end; %d of %d deliveries in their lanes", entered.Load(), len(keys))
	}
	if n := entered.Load(); n != int32(len(keys)) {
		t.Errorf("%d of %d deliveries in their lanes", n, len(keys))
	}
	if !waitFor(waitChan(&r.deliveries), 10*time.Second) {
		t.Fatal("the deliveries never ended")
	}
	// Lanes end in any order; within the lane of those whose key panicked
	// (2, 3, 4), each goes back behind the one before it.
	sent := acker.sent()
	if got := slices.Sorted(slices.Values(sent)); !slices.Equal(got, []uint64{1, 2, 3, 4, 5}) {
		t.Fatalf("NACKed %v, want each of the five once", sent)
	}
	if got := slices.DeleteFunc(slices.Clone(sent), func(tag uint64) bool { return tag == 1 || tag == 5 }); !slices.Equal(got, []uint64{2, 3, 4}) {
		t.Errorf("NACKed %v: those whose key panicked went back as %v, want [2 3 4]", sent, got)
	}
}

// An ordered queue that retries, its budget left zero (as lilygen leaves
// it), gets from NewConsumer one that carries every retry in line, even
// when each call spends its handler timeout and every step around it (four,
// five with a Config.Scope) at the consumer's step timeout, and every delay
// between them; and leaves the last attempt room for its handoff to the DLQ.
func TestOrderedBudgetCarriesEveryRetry(t *testing.T) {
	const handler = 30 * time.Second
	failed := outcome.Outcome{Handler: outcome.HandlerResult{Ran: true, Kind: outcome.KindRetryable, Cause: "db busy"}}
	scope := func(ctx context.Context, _ RawDelivery) (context.Context, func(context.Context) error, error) {
		return ctx, nil, nil
	}
	routes := Routes{{Type: "t"}: func(context.Context, RawDelivery) error { return nil }}
	for _, step := range []time.Duration{time.Second, 0, 10 * time.Second, time.Minute} {
		for _, scoped := range []bool{false, true} {
			cfg, steps := Config{StepTimeout: step}, 4
			if scoped {
				cfg.Scope, steps = scope, 5
			}
			call := handler + time.Duration(steps)*cfg.withDefaults().StepTimeout
			for attempts := 2; attempts <= 12; attempts++ {
				spec := QueueSpec{
					Name:     "budget-test",
					Topology: topology.Queue{Type: "classic", DeadLetterQueue: "budget-test.dlq", RetryDelays: []time.Duration{time.Second, 5 * time.Second}},
					Prefetch: 1, Concurrency: 1, MaxAttempts: attempts, MaxBodyBytes: 1024, HandlerTimeout: handler,
					OrderKey: func(map[string]any, []byte) string { return "" },
				}
				c, err := NewConsumer(spec, routes, cfg)
				if err != nil {
					t.Fatalf("step timeout %s, scope %v, %d attempts: %v", step, scoped, attempts, err)
				}
				budget, spent := c.spec.budget(), time.Duration(0)
				for n := 1; n < attempts; n++ {
					spent += call
					got := decide.Decide(failed, n, c.policy, budget-spent)
					if got.Action != decide.ActPark {
						t.Fatalf("step timeout %s, scope %v, %d attempts: attempt %d with %s of %s left: %s (%s); want it parked", step, scoped, attempts, n, budget-spent, budget, got.Action, got.Reason)
					}
					spent += got.Delay
				}
				if left := budget - spent - call; left < decide.HandoffReserve {
					t.Errorf("step timeout %s, scope %v, %d attempts: the last attempt leaves %s for its handoff, want %s", step, scoped, attempts, left, decide.HandoffReserve)
				}
			}
		}
	}
}

// An ordered delivery whose budget was spent waiting for a slot waits for
// the recycle; when the stop comes first, its record says so, not that its
// budget was spent.
func TestOrderedWaiterSpentAtTheStopSaysStopped(t *testing.T) {
	var reasons []string
	spec := laneSpec()
	c, err := NewConsumer(spec, Routes{{Type: "t"}: func(context.Context, RawDelivery) error { return nil }},
		Config{Observe: func(rec Record) { reasons = append(reasons, rec.Reason) }})
	if err != nil {
		t.Fatal(err)
	}
	c.spec.SettlementBudget = 10 * time.Millisecond // spent at once
	r, s := laneSession(c)
	r.slots <- struct{}{} // another key's delivery holds the only slot
	(&laneIntake{c: c, r: r, s: s}).take(&amqp.Delivery{DeliveryTag: 1, MessageId: "b-0", Headers: amqp.Table{"k": "b"}}, quarantine.Verdict{})
	time.Sleep(50 * time.Millisecond) // its budget is spent: it waits for the recycle
	close(r.stopping)
	s.endWaiting()      // the stop's cancel
	r.cancelledAtStop() // has returned
	if !waitFor(waitChan(&r.deliveries), 10*time.Second) {
		t.Fatal("the delivery never ended")
	}
	if len(reasons) != 1 || !strings.Contains(reasons[0], "intake stopped") {
		t.Errorf("reasons %q, want the stop's", reasons)
	}
}

// An ordered delivery kept from the only slot (a handler past its timeout
// holds it) until the recycle is requeued as one whose budget was spent
// waiting: the recycle comes a step after its budget, counted from its turn
// in its lane, so it cannot come before (unless an older delivery on the
// channel outlived its own budget first). lilytest says the same of it.
func TestOrderedWaiterAtTheRecycleSaysItsBudgetWasSpent(t *testing.T) {
	var reasons []string
	spec := laneSpec()
	c, err := NewConsumer(spec, Routes{{Type: "t"}: func(context.Context, RawDelivery) error { return nil }},
		Config{Logger: slog.New(slog.DiscardHandler), Observe: func(rec Record) { reasons = append(reasons, rec.Reason) }})
	if err != nil {
		t.Fatal(err)
	}
	c.spec.SettlementBudget = 10 * time.Millisecond
	r, s := laneSession(c)
	spent := make(chan struct{})
	c.hooks.laneSpent = func() { close(spent) }
	r.slots <- struct{}{} // a handler past its timeout holds the only slot
	(&laneIntake{c: c, r: r, s: s}).take(&amqp.Delivery{DeliveryTag: 1, MessageId: "b-0", Headers: amqp.Table{"k": "b"}}, quarantine.Verdict{})
	// Its budget counts from its worker's start, which a loaded machine may
	// put off: the recycle comes once the budget is spent, not after a time.
	if !waitFor(spent, 10*time.Second) {
		t.Fatal("its budget was never spent")
	}
	s.endWaiting() // the recycle's cancel: no stop
	if !waitFor(waitChan(&r.deliveries), 10*time.Second) {
		t.Fatal("the delivery never ended")
	}
	if !slices.Equal(reasons, []string{decide.SpentWaiting}) {
		t.Errorf("reasons %q, want %q", reasons, decide.SpentWaiting)
	}
}

// An ordered queue's intake reads a delivery before its lane, so what
// names it where it goes back unstarted, and where its OrderKey panicked,
// is the key the inbox would claim it by, whole, as in the record of one
// that started: here a header-mapped profile's "headers <type> <id>" of 138
// bytes, which a cut at 128 bytes made another string. One the guard
// refused is named by its message_id, cut at 128 bytes as before.
func TestOrderedDeliveryIsNamedByItsKey(t *testing.T) {
	var logs bytes.Buffer // the handler writes a line at a time
	var mu sync.Mutex
	var ids []string
	spec := QueueSpec{
		Name: "lane-test", Topology: topology.Queue{Type: "classic", DeadLetterQueue: "lane-test.dlq"},
		Prefetch: 4, Concurrency: 1, MaxAttempts: 1, MaxBodyBytes: 1024, HandlerTimeout: time.Second,
		Messages: []envelope.Message{{Type: "t", Profile: envelope.Profile{Kind: envelope.Headers, Version: envelope.Version{Fixed: 1}}}},
		OrderKey: func(h map[string]any, _ []byte) string {
			s, _ := h["k"].(string)
			if s == "boom" {
				panic("no key like that")
			}
			return s
		},
	}
	c, err := NewConsumer(spec, Routes{{Type: "t", Version: 1, ContentType: "application/json"}: func(context.Context, RawDelivery) error { return nil }},
		Config{Logger: slog.New(slog.NewJSONHandler(&logs, nil)), Observe: func(rec Record) {
			mu.Lock()
			defer mu.Unlock()
			ids = append(ids, rec.MessageID)
		}})
	if err != nil {
		t.Fatal(err)
	}
	id := strings.Repeat("i", 128)
	key := "headers t " + id
	delivery := func(tag uint64, k string) *amqp.Delivery {
		return &amqp.Delivery{DeliveryTag: tag, MessageId: id, Type: "t", ContentType: "application/json", Headers: amqp.Table{"k": k}, Body: []byte("{}")}
	}
	refused := delivery(3, "a")
	refused.MessageId = strings.Repeat("r", 200) // over the guard's bound
	r, s := laneSession(c)
	s.link = &link{}
	s.endWaiting() // intake cancelled: each goes back not started
	in := &laneIntake{c: c, r: r, s: s}
	in.take(delivery(1, "a"), quarantine.Verdict{})
	in.take(delivery(2, "boom"), quarantine.Verdict{})
	in.take(refused, quarantine.Verdict{})
	if !waitFor(waitChan(&r.deliveries), 10*time.Second) {
		t.Fatal("the deliveries never ended")
	}
	mu.Lock()
	slices.Sort(ids) // the lanes end in any order
	if want := []string{key, key, strings.Repeat("r", 125) + "..."}; !slices.Equal(ids, want) {
		t.Errorf("records name them %q, want %q", ids, want)
	}
	mu.Unlock()
	var panicked []string
	for l := range strings.Lines(logs.String()) {
		var line struct {
			Msg       string `json:"msg"`
			MessageID string `json:"message_id"`
		}
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line.Msg, "lily OrderKey panicked") {
			panicked = append(panicked, line.MessageID)
		}
	}
	if !slices.Equal(panicked, []string{key}) {
		t.Errorf("the OrderKey's panic logged message_id %q, want %q", panicked, key)
	}
}

// waitBehind takes in, on s, a delivery of key b (tag, id) that the guard
// passes, and leaves it waiting: for the only slot, which another key's
// delivery holds (slot), or else behind its key's head, whose leave it
// returns (a no-op for the slot).
func waitBehind(c *Consumer, r *run, s *session, slot bool, tag uint64, id string) (leaveHead func()) {
	leaveHead = func() {}
	if slot {
		r.slots <- struct{}{}
	} else {
		_, head := r.lanes.enter(laneKey{key: "b"})
		leaveHead = func() { head.leave(true, time.Now(), r.aborted) }
	}
	(&laneIntake{c: c, r: r, s: s}).take(&amqp.Delivery{DeliveryTag: tag, MessageId: id, Type: "t", ContentType: "application/json",
		Body: []byte("{}"), Headers: amqp.Table{"k": "b", guard.HeaderVersion: int32(1)}}, quarantine.Verdict{})
	time.Sleep(20 * time.Millisecond) // it waits
	return leaveHead
}

// An order key longer than the part lanes compare is cut to a copy of its
// own: the cut of a 4 MiB field would keep the whole field alive for as long
// as its delivery waits in its lane.
func TestOrderKeyCutKeepsNotTheWhole(t *testing.T) {
	long := strings.Repeat("k", 4<<20)
	spec := laneSpec()
	spec.OrderKey = func(map[string]any, []byte) string { return long }
	c, err := NewConsumer(spec, Routes{{Type: "t", Version: 1, ContentType: "application/json"}: func(context.Context, RawDelivery) error { return nil }}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := c.orderKey(&amqp.Delivery{MessageId: "m-1", Type: "t", ContentType: "application/json",
		Headers: amqp.Table{guard.HeaderVersion: int32(1)}, Body: []byte("{}")}, quarantine.Verdict{}, nil)
	if got.key != long[:maxOrderKey] {
		t.Fatalf("key of %d bytes, want the first %d of the key", len(got.key), maxOrderKey)
	}
	if unsafe.StringData(got.key) == unsafe.StringData(long) {
		t.Error("the cut key shares the whole key's memory")
	}
}

// A turn whose user code runs on after its journey frees its lane when
// that returns, or at the budget's end; a delivery requeued before it ran
// passes the turn on only once the one before it is free, so that a
// delivery of the key received later (on a new session) does not start
// beside what the head abandoned.
func TestLaneTurnHeldByWhatRunsOn(t *testing.T) {
	for _, tc := range []struct {
		name    string
		budget  time.Duration
		release bool // the step returns
	}{
		{"the step returns", time.Hour, true},
		{"the budget ends", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l lanes
			aborted := make(chan struct{})
			key := laneKey{key: "a"}
			_, head := l.enter(key)
			step := head.hold()
			head.leave(true, time.Now().Add(tc.budget), aborted)
			_, notRun := l.enter(key)
			notRun.leave(false, time.Time{}, aborted)
			next, _ := l.enter(key)
			if !closed(next.ended) {
				t.Fatal("the delivery requeued before it ran has not ended its journey")
			}
			if tc.release {
				if closed(next.free) {
					t.Fatal("the lane is free while the head's step runs, within its budget")
				}
				step()
			}
			select {
			case <-next.free:
			case <-time.After(time.Minute):
				t.Fatal("the lane was not freed")
			}
		})
	}
}

// heldSettled is a Telemetry whose Settled waits until release is closed.
type heldSettled struct{ release chan struct{} }

func (heldSettled) Received(ctx context.Context, _ string, _ RawDelivery) context.Context { return ctx }
func (heldSettled) Publish(context.Context, string, string, *Publishing) func(string, time.Time) {
	return nil
}
func (heldSettled) Settle(context.Context, string) func(string, time.Time) { return nil }
func (h heldSettled) Settled(context.Context, Record)                      { <-h.release }
func (heldSettled) Lost(string, string)                                    {}

// A delivery that waited in its lane on a session lost meanwhile ends
// unresolved, and the hook's Settled is told of it: a Settled that hangs
// holds no lane, so the broker's redelivery of it, on the run's next
// session, starts.
func TestOrderedLostWaiterHeldSettledHoldsNoLane(t *testing.T) {
	hook := heldSettled{release: make(chan struct{})}
	ran := make(chan struct{}, 1)
	c, err := NewConsumer(laneSpec(), Routes{{Type: "t", Version: 1, ContentType: "application/json"}: func(context.Context, RawDelivery) error {
		ran <- struct{}{}
		return nil
	}}, Config{Logger: slog.New(slog.DiscardHandler), Telemetry: hook})
	if err != nil {
		t.Fatal(err)
	}
	r, lost := laneSession(c)
	lost.lostAfterCancel = func(error) {}
	leaveHead := waitBehind(c, r, lost, false, 1, "b-1")
	lost.broke(&amqp.Error{Code: amqp.ChannelError, Reason: "gone"})
	leaveHead() // b-1's turn: unresolved, its Settled held
	gen := r.newGeneration()
	gen.Settler = settle.NewSettler(discardAcker{}, gen, 4)
	next := &session{gen: gen, lost: make(chan struct{}), cancelled: make(chan struct{}), outlived: make(chan struct{})}
	(&laneIntake{c: c, r: r, s: next}).take(&amqp.Delivery{DeliveryTag: 1, MessageId: "b-1", Type: "t", ContentType: "application/json",
		Body: []byte("{}"), Headers: amqp.Table{"k": "b", guard.HeaderVersion: int32(1)}, Redelivered: true}, quarantine.Verdict{})
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Error("the redelivery did not start while the lost waiter's Settled ran")
	}
	close(hook.release)
	if !waitFor(waitChan(&r.deliveries), 10*time.Second) {
		t.Fatal("the deliveries never ended")
	}
}

// A delivery waiting in its lane on a session lost meanwhile keeps no
// delivery after it from going back at the stop: here behind a head whose
// handler runs on past its journey, within its budget, the redelivery of
// the lost waiter, on the consuming session, is requeued once the stop's
// cancel is answered, not left for the final abort, while the head's
// handler still runs.
func TestOrderedLostWaiterKeepsNoneFromTheStopsRequeue(t *testing.T) {
	c, records := recordLines(t, laneSpec(), pathAndReason)
	r, lost := laneSession(c)
	lost.lostAfterCancel = func(error) {}
	_, head := r.lanes.enter(laneKey{key: "b"})
	handler := head.hold()
	defer handler()
	head.leave(true, time.Now().Add(time.Hour), r.aborted)
	delivery := func(s *session) {
		(&laneIntake{c: c, r: r, s: s}).take(&amqp.Delivery{DeliveryTag: 1, MessageId: "b-1", Type: "t", ContentType: "application/json",
			Body: []byte("{}"), Headers: amqp.Table{"k": "b", guard.HeaderVersion: int32(1)}}, quarantine.Verdict{})
	}
	delivery(lost)
	lost.broke(&amqp.Error{Code: amqp.ChannelError, Reason: "gone"})
	gen := r.newGeneration()
	acker := &nackAcker{}
	gen.Settler = settle.NewSettler(acker, gen, 4)
	consuming := &session{gen: gen, lost: make(chan struct{}), cancelled: make(chan struct{}), outlived: make(chan struct{})}
	delivery(consuming) // the broker's redelivery of b-1
	close(r.stopping)
	consuming.endWaiting() // the stop's cancel
	r.cancelledAtStop()    // has returned
	if !waitFor(waitChan(&r.deliveries), 10*time.Second) {
		t.Fatalf("the deliveries did not end while the head's handler ran; NACKed %v", acker.sent())
	}
	if sent := acker.sent(); !slices.Equal(sent, []uint64{1}) {
		t.Errorf("NACKed %v on the consuming session, want [1]", sent)
	}
	want := []string{
		string(PathUnresolved) + ": not started: its session was lost while it waited for its order key",
		string(PathNotStarted) + ": not started: intake stopped while it waited for its order key",
	}
	if got := records(); !slices.Equal(got, want) {
		t.Errorf("records %q, want %q", got, want)
	}
}
