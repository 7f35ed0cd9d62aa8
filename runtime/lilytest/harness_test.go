package lilytest_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	goruntime "runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily/internal/services"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
	"github.com/lily-mq/lily/runtime/lilytest"
)

// New checks the spec and routes as runtime.NewConsumer does for Run.
func TestNewChecksAsTheConsumerDoes(t *testing.T) {
	spec := fixture.LilytestQueueSpec()
	spec.Topology.DeadLetterQueue = ""
	_, err := lilytest.New(spec, runtime.Routes{}, runtime.Config{})
	if err == nil || !strings.Contains(err.Error(), "the DLQ needs its own name") || !strings.Contains(err.Error(), "the dispatch table is empty") {
		t.Errorf("New: %v", err)
	}
}

// New does not check what a trial has no use for: the fields that reach
// only the broker or a shutdown, which Run would check. What the trial uses,
// it checks as NewConsumer does.
func TestNewChecksOnlyWhatTheTrialUses(t *testing.T) {
	for name, cfg := range map[string]runtime.Config{
		"TLS without amqps URLs": {TLS: &tls.Config{}},
		"an http URL":            {URLs: []string{"http://x"}},
		"ReconnectMax of 1ms":    {ReconnectMax: time.Millisecond},
		"negative ShutdownGrace": {ShutdownGrace: -time.Second},
		"negative ForceWindow":   {ForceWindow: -time.Second},
	} {
		cfg.Logger = quiet
		h, err := lilytest.New(fixture.LilytestQueueSpec(), fixture.LilytestRoutes(handler(ok)), cfg)
		if err != nil {
			t.Errorf("%s: New: %v", name, err)
			continue
		}
		if res := h.Deliver(order(t, "order-"+strings.ReplaceAll(name, " ", "-"))); res.Path != runtime.PathAcked {
			t.Errorf("%s: path %s, want acked", name, res.Path)
		}
		h.Close()
	}
	_, err := lilytest.New(fixture.LilytestQueueSpec(), fixture.LilytestRoutes(handler(ok)), runtime.Config{StepTimeout: -time.Second})
	if err == nil || !strings.Contains(err.Error(), "Config.StepTimeout") {
		t.Errorf("a negative StepTimeout: New: %v", err)
	}
}

// journal is a Telemetry that notes each call it gets.
type journal struct{ calls []string }

func (j *journal) Received(ctx context.Context, queue string, d runtime.RawDelivery) context.Context {
	j.calls = append(j.calls, "received "+queue+" "+d.MessageID())
	return ctx
}

func (j *journal) Publish(_ context.Context, _, routingKey string, _ *runtime.Publishing) func(string, time.Time) {
	return func(evidence string, _ time.Time) { j.calls = append(j.calls, "publish "+routingKey+" "+evidence) }
}

func (j *journal) Settle(_ context.Context, op string) func(string, time.Time) {
	return func(evidence string, _ time.Time) { j.calls = append(j.calls, op+" "+evidence) }
}

func (j *journal) Settled(_ context.Context, r runtime.Record) {
	j.calls = append(j.calls, "settled "+string(r.Path))
}

func (j *journal) Lost(string, string) {}

// The Config's Telemetry follows each journey as it would on the broker.
func TestTelemetryFollowsTheJourney(t *testing.T) {
	j := &journal{}
	h := harness(t, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		if msg.OrderID == "t-2" {
			return runtime.Permanent(context.Canceled)
		}
		return nil
	}, func(cfg *runtime.Config) { cfg.Telemetry = j })
	h.Deliver(order(t, "t-1"))
	h.Deliver(order(t, "t-2"))
	want := []string{
		"received lilytest t-1", "ack ack sent", "settled acked",
		// A copy's publish ends once the original is settled, before the
		// settlement's own end.
		"received lilytest t-2", "publish lilytest.dlq confirmed", "ack ack sent", "settled dead-lettered",
	}
	if strings.Join(j.calls, "\n") != strings.Join(want, "\n") {
		t.Errorf("telemetry calls:\n%s\nwant:\n%s", strings.Join(j.calls, "\n"), strings.Join(want, "\n"))
	}
}

// A Logger whose handler panics at every record, user code as Observe is,
// neither ends the process nor keeps a delivery from its settlement: the
// runtime logs on each delivery's goroutine, and the panic is recovered
// there, on every path.
func TestPanickingLoggerLeavesEveryDeliverySettled(t *testing.T) {
	var panics atomic.Int64
	h := harness(t, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		if msg.OrderID == "refused" {
			return runtime.Permanent(errors.New("refused"))
		}
		return nil
	}, func(cfg *runtime.Config) {
		cfg.Logger = slog.New(handlerOf(func(slog.Record) {
			panics.Add(1)
			panic("the log sink broke")
		}))
	})
	wantPath(t, h.Deliver(order(t, "ok")), runtime.PathAcked)
	wantPath(t, h.Deliver(order(t, "refused")), runtime.PathDeadLettered)
	wantPath(t, h.Deliver(runtime.Publishing{Body: []byte("{}")}), runtime.PathDeadLettered)
	if panics.Load() < 3 {
		t.Errorf("the handler panicked %d times; want once a delivery at least", panics.Load())
	}
}

// After Close, the consumer's authority is gone: a delivery is left
// unresolved, with nothing written, and no user code runs for it (no scope,
// no handler, no after_delivery), however many come.
func TestClosedHarnessSettlesNothing(t *testing.T) {
	var calls atomic.Int32
	cfg := runtime.Config{Logger: quiet,
		Scope: func(ctx context.Context, _ runtime.RawDelivery) (context.Context, func(context.Context) error, error) {
			calls.Add(1)
			return ctx, nil, nil
		},
		AfterDelivery: func(context.Context, runtime.RawDelivery, runtime.Record) error {
			calls.Add(1)
			return nil
		},
	}
	h, err := lilytest.New(fixture.LilytestQueueSpec(), fixture.LilytestRoutes(handler(ok)), cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	for range 3 {
		res := h.Deliver(order(t, "late-1"))
		wantPath(t, res, runtime.PathUnresolved)
		if res.Settlement != "" {
			t.Errorf("result %+v", res)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("%d calls of user code after Close", n)
	}
	h.Close() // a second Close does nothing
}

// With every slot held by a handler past its timeout, a delivery waits for
// one as long as the runtime waits before it recycles the channel, and is
// then requeued unstarted; once the handler returns, its slot serves the
// redelivery.
func TestDeliveryWithoutASlotIsNotStarted(t *testing.T) {
	services.Slow(t, "a recycle, six seconds")
	t.Parallel()
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			t.Parallel() // each waits out a recycle: six seconds
			spec := fixture.LilytestQueueSpec()
			spec.Concurrency = 1
			// Long enough for wait-1's handler to return within it on a loaded
			// machine; stuck-1's, deaf to its context, still outlives it.
			spec.HandlerTimeout = 500 * time.Millisecond
			// Steps long enough for a loaded machine: the settler must write the
			// handoff's ACK within one. The budget leaves a second of slack over
			// the least NewConsumer takes.
			const step = 500 * time.Millisecond
			spec.SettlementBudget = spec.HandlerTimeout + 4*step + 3*time.Second
			// In the runtime's words: a recycle's, or on an ordered queue, a
			// lane's, whose budget was spent by the time the recycle cancels
			// intake under it, a step after the budget. Each message is a
			// key of its own there: wait-1 waits for the slot, not behind
			// stuck-1 in its lane.
			why := "received but not started before its channel was recycled"
			if ordered {
				spec.OrderKey = func(_ map[string]any, body []byte) string { return string(body) }
				why = "not started: its settlement budget was spent while it waited for a slot"
			}
			release := make(chan struct{})
			var calls atomic.Int32
			h := harnessOf(t, spec, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
				calls.Add(1)
				if msg.OrderID == "stuck-1" {
					<-release // deaf to its context
				}
				return nil
			}, func(cfg *runtime.Config) { cfg.StepTimeout = step })

			wantPath(t, h.Deliver(order(t, "stuck-1")), runtime.PathRetried)
			res := h.Deliver(order(t, "wait-1"))
			wantPath(t, res, runtime.PathNotStarted)
			if res.Settlement != "requeue" || res.Handler != "" || res.Reason != why || calls.Load() != 1 {
				t.Errorf("ordered %v: result %+v, handler calls %d", ordered, res, calls.Load())
			}
			close(release)
			res = h.Deliver(order(t, "wait-1"), lilytest.Redelivered())
			wantPath(t, res, runtime.PathAcked)
		})
	}
}

// A slot that frees after a delivery's budget, before the recycle, starts
// nothing: the delivery is requeued unstarted, as the runtime requeues it,
// since its handler's result could only be left unresolved.
func TestDeliveryWhoseBudgetWasSpentWaitingIsNotStarted(t *testing.T) {
	services.Slow(t, "a settlement budget, twenty-seven seconds")
	t.Parallel()
	spec := fixture.LilytestQueueSpec()
	spec.Concurrency = 1
	spec.HandlerTimeout = 500 * time.Millisecond
	// A step wide enough for the slot to free within it, after the
	// delivery's budget and before the recycle, on a loaded machine: the
	// slot frees half a step after the budget, 3 s from either end.
	const step = 6 * time.Second
	spec.SettlementBudget = spec.HandlerTimeout + 4*step + 2*time.Second
	release := make(chan struct{})
	var calls atomic.Int32
	h := harnessOf(t, spec, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		calls.Add(1)
		if msg.OrderID == "stuck-1" {
			<-release // deaf to its context
		}
		return nil
	}, func(cfg *runtime.Config) { cfg.StepTimeout = step })

	wantPath(t, h.Deliver(order(t, "stuck-1")), runtime.PathRetried)
	sent := time.Now()
	done := make(chan lilytest.Result)
	go func() { done <- h.Deliver(order(t, "wait-1")) }()
	time.Sleep(time.Until(sent.Add(spec.SettlementBudget + step/2)))
	close(release)
	res := <-done
	wantPath(t, res, runtime.PathNotStarted)
	if res.Settlement != "requeue" || res.Handler != "" || res.Reason != "not started: its settlement budget was spent while it waited for a slot" || calls.Load() != 1 {
		t.Errorf("result %+v, handler calls %d", res, calls.Load())
	}
	wantPath(t, h.Deliver(order(t, "wait-1"), lilytest.Redelivered()), runtime.PathAcked)
}

// stuckShipping handles the foreign fixture's shipments, counting calls;
// the shipment of order "stuck" waits for release, deaf to its context.
type stuckShipping struct {
	fixture.UnimplementedLilytestForeignHandler
	calls   *atomic.Int32
	release chan struct{}
}

func (s stuckShipping) HandleOrderShippedV1(_ context.Context, msg *fixture.OrderShippedV1, _ runtime.RawDelivery) error {
	s.calls.Add(1)
	if msg.OrderID == "stuck" {
		<-s.release
	}
	return nil
}

// On an ordered queue the same delivery's record names it by its key, as
// the runtime's lane, which read it as it took it in, names it: for a
// header-mapped profile "headers", the type and the id, not its
// message_id. Each message is a key of its own: the stuck handler holds
// its key's lane as well as the one slot, and wait-1 waits for the slot.
func TestOrderedDeliveryWhoseBudgetWasSpentWaitingNamesItsKey(t *testing.T) {
	services.Slow(t, "a settlement budget, twenty-seven seconds")
	t.Parallel()
	spec := fixture.LilytestForeignQueueSpec()
	spec.OrderKey = func(_ map[string]any, body []byte) string { return string(body) }
	spec.Concurrency = 1
	spec.HandlerTimeout = 500 * time.Millisecond
	const step = 6 * time.Second // as above: 3 s from either end
	spec.SettlementBudget = spec.HandlerTimeout + 4*step + 2*time.Second
	var calls atomic.Int32
	release := make(chan struct{})
	routes := fixture.LilytestForeignRoutes(stuckShipping{calls: &calls, release: release})
	h, err := lilytest.New(spec, routes, runtime.Config{Logger: quiet, StepTimeout: step})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	shipment := func(id string) runtime.Publishing {
		p, err := fixture.NewOrderShippedV1(id, &fixture.OrderShippedV1{OrderID: id})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}

	wantPath(t, h.Deliver(shipment("stuck")), runtime.PathRetried)
	sent := time.Now()
	done := make(chan lilytest.Result)
	go func() { done <- h.Deliver(shipment("wait-1")) }()
	time.Sleep(time.Until(sent.Add(spec.SettlementBudget + step/2)))
	close(release)
	res := <-done
	wantPath(t, res, runtime.PathNotStarted)
	if key := "headers " + fixture.OrderShippedType + " wait-1"; res.MessageID != key || res.Reason != "not started: its settlement budget was spent while it waited for a slot" || calls.Load() != 1 {
		t.Errorf("result %+v, handler calls %d; want it named %q", res, calls.Load(), key)
	}
}

// AnswerHandoffs takes only the words of Record.Handoff.
func TestAnswerHandoffsRefusesOtherWords(t *testing.T) {
	h := harness(t, ok)
	defer func() {
		if recover() == nil {
			t.Error("AnswerHandoffs(\"lost\") did not panic")
		}
	}()
	h.AnswerHandoffs("lost")
}

// After Close, as after the runtime's final abort, no handler is called.
func TestClosedHarnessCallsNoHandler(t *testing.T) {
	calls := 0
	h, err := lilytest.New(fixture.LilytestQueueSpec(), fixture.LilytestRoutes(handler(func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		calls++
		return nil
	})), runtime.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	res := h.Deliver(order(t, "late-2"))
	wantPath(t, res, runtime.PathUnresolved)
	if calls != 0 || res.Handler == "ok" {
		t.Errorf("the handler ran %d times after Close (result %+v)", calls, res)
	}
}

// Retried in line, a delivery's Err is its last attempt's: nil when that
// one panicked, whatever an earlier attempt returned.
func TestErrIsTheLastAttemptsAfterARetryInLine(t *testing.T) {
	spec := fixture.LilytestQueueSpec()
	spec.OrderKey = func(map[string]any, []byte) string { return "one" }
	spec.Topology.RetryDelays = []time.Duration{time.Millisecond}
	h := harnessOf(t, spec, func(_ context.Context, _ *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		if d.Attempt() == 1 {
			return runtime.Retryable(errors.New("first"))
		}
		panic("second")
	})
	res := h.Deliver(order(t, "in-line"))
	if res.Attempt < 2 || res.Handler != "panicked" || res.Err != nil {
		t.Errorf("attempt %d, handler %q, Err %v: want a later attempt that panicked, and no error", res.Attempt, res.Handler, res.Err)
	}
}

// An OrderKey that panics or calls runtime.Goexit is logged, as the
// runtime logs it (TestBrokerOrderKeyGoexitIsContained), and its delivery
// goes on: its key is read from a message with a key other than its
// message_id, which the log names it by.
func TestOrderKeyThatPanicsIsLogged(t *testing.T) {
	for _, how := range []string{"panic", "Goexit"} {
		spec := fixture.LilytestForeignQueueSpec()
		spec.OrderKey = func(map[string]any, []byte) string {
			if how == "panic" {
				panic("no key here")
			}
			goruntime.Goexit()
			return ""
		}
		var mu sync.Mutex
		var logged []string
		logger := slog.New(handlerOf(func(r slog.Record) {
			if r.Level != slog.LevelError {
				return
			}
			line := r.Message
			r.Attrs(func(a slog.Attr) bool {
				line += " " + a.Key + "=" + a.Value.String()
				return true
			})
			mu.Lock()
			logged = append(logged, line)
			mu.Unlock()
		}))
		var calls atomic.Int32
		h, err := lilytest.New(spec, fixture.LilytestForeignRoutes(stuckShipping{calls: &calls}), runtime.Config{Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		p, err := fixture.NewOrderShippedV1("key-1", &fixture.OrderShippedV1{OrderID: "key-1"})
		if err != nil {
			t.Fatal(err)
		}
		res := h.Deliver(p)
		h.Close()
		wantPath(t, res, runtime.PathAcked)
		detail := "no key here"
		if how == "Goexit" {
			detail = "it called runtime.Goexit instead of returning"
		}
		want := "lily OrderKey panicked; the delivery is ordered only behind others whose key panicked queue=lilytest.foreign message_id=headers " +
			fixture.OrderShippedType + " key-1 detail=" + detail
		mu.Lock()
		if len(logged) != 1 || logged[0] != want || calls.Load() != 1 {
			t.Errorf("%s: logged %q, handler calls %d; want %q", how, logged, calls.Load(), want)
		}
		mu.Unlock()
	}
}

// A handler reads its headers as they arrive from the broker: a time as the
// whole seconds AMQP carries, an int as the 32 bits amqp091-go sends; the
// retry copy keeps the timestamp as it arrived.
func TestHeadersArriveAsTheWireCarriesThem(t *testing.T) {
	sent := time.Date(2024, 5, 1, 12, 0, 0, 750_000_000, time.UTC)
	var at, n any
	h := harness(t, func(_ context.Context, _ *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		at, _ = d.Header("x-sent-at")
		n, _ = d.Header("x-count")
		return runtime.Retryable(errors.New("again"))
	})
	p := order(t, "wire-1")
	p.Headers["x-sent-at"], p.Headers["x-count"], p.Timestamp = sent, 7, sent
	res := h.Deliver(p)
	if got, ok := at.(time.Time); !ok || !got.Equal(sent.Truncate(time.Second)) {
		t.Errorf("x-sent-at: %#v, want %v", at, sent.Truncate(time.Second))
	}
	if n != int32(7) {
		t.Errorf("x-count: %T %v, want int32 7", n, n)
	}
	if res.Copy == nil || !res.Copy.Timestamp.Equal(sent.Truncate(time.Second)) {
		t.Errorf("copy: %+v, want the timestamp in whole seconds", res.Copy)
	}
}

// What no client publishes, as a Publisher refuses it, is refused, not
// changed: RawDelivery fails, and Deliver panics.
func TestUnpublishableMessageIsRefused(t *testing.T) {
	h := harness(t, ok)
	for want, change := range map[string]func(*runtime.Publishing){
		"x-count: the int 1099511627776 is outside the int32 range": func(p *runtime.Publishing) { p.Headers["x-count"] = 1 << 40 },
		"x-ratio: NaN is not a finite number":                       func(p *runtime.Publishing) { p.Headers["x-ratio"] = math.NaN() },
		"value uint64 not supported":                                func(p *runtime.Publishing) { p.Headers["x-n"] = uint64(1) },
		"app_id: 256 bytes, more than 255":                          func(p *runtime.Publishing) { p.AppId = strings.Repeat("a", 256) },
		"expiration: not a whole number of milliseconds":            func(p *runtime.Publishing) { p.Expiration = "soon" },
		"delivery_mode: 3, not 1 (transient)":                       func(p *runtime.Publishing) { p.DeliveryMode = 3 },
	} {
		p := order(t, "refused-1")
		change(&p)
		if _, err := lilytest.RawDelivery(fixture.LilytestQueueSpec(), fixture.LilytestRoutes(handler(ok)), p); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("RawDelivery: %v, want %q", err, want)
		}
		func() {
			defer func() {
				if r, _ := recover().(string); !strings.Contains(r, "lilytest: Deliver: no client publishes the message: ") || !strings.Contains(r, want) {
					t.Errorf("Deliver: panic %q, want %q", r, want)
				}
			}()
			h.Deliver(p)
		}()
	}
}

// The name of a header no client sends is bounded and sanitized in the
// refusal: Deliver's panic, RawDelivery's error and a Recorder's Send say
// it without ESC or a bidi override, and without its 250 bytes.
func TestRefusalSanitizesTheHeaderName(t *testing.T) {
	name := "x-\x1b[31mred\u202e" + strings.Repeat("n", 240)
	check := func(what, msg string) {
		t.Helper()
		if !strings.Contains(msg, "NaN is not a finite number") || strings.ContainsAny(msg, "\x1b\u202e") || len(msg) > 300 {
			t.Errorf("%s: %d bytes, unsanitized or unbounded: %q", what, len(msg), msg)
		}
	}
	p := order(t, "refused-2")
	p.Headers[name] = math.NaN()
	_, err := lilytest.RawDelivery(fixture.LilytestQueueSpec(), fixture.LilytestRoutes(handler(ok)), p)
	if err == nil {
		t.Fatal("RawDelivery: accepted")
	}
	check("RawDelivery", err.Error())
	func() {
		defer func() {
			r, _ := recover().(string)
			check("Deliver", r)
		}()
		harness(t, ok).Deliver(p)
	}()
	err = (&lilytest.Recorder{}).Send(context.Background(), runtime.Message{Exchange: "shop", RoutingKey: "q", Publishing: p})
	if err == nil {
		t.Fatal("Send: accepted")
	}
	check("Send", err.Error())
}

// An expiration the broker takes from another producer, though a
// Publisher sends none such, is delivered: Deliver and RawDelivery take it.
// One the broker refuses, they refuse.
func TestForeignExpirationIsDelivered(t *testing.T) {
	h := harness(t, ok)
	spec, routes := fixture.LilytestQueueSpec(), fixture.LilytestRoutes(handler(ok))
	for _, expiration := range []string{"+5000", "-0", "315360000000"} {
		p := order(t, "ttl-1")
		p.Expiration = expiration
		if _, err := lilytest.RawDelivery(spec, routes, p); err != nil {
			t.Errorf("RawDelivery of expiration %q: %v", expiration, err)
		}
		wantPath(t, h.Deliver(p), runtime.PathAcked)
	}
	for _, expiration := range []string{"-5", "315360000001", "+-5"} {
		p := order(t, "ttl-2")
		p.Expiration = expiration
		if _, err := lilytest.RawDelivery(spec, routes, p); err == nil || !strings.Contains(err.Error(), "expiration: not a whole number of milliseconds up to ten years") {
			t.Errorf("RawDelivery of expiration %q: %v", expiration, err)
		}
	}
}

// A handler may set the fake broker's answer: its own delivery's copy is
// answered so, at once.
func TestHandlerAnswersItsOwnHandoff(t *testing.T) {
	t.Parallel()
	var h *lilytest.Harness
	h = harness(t, func(context.Context, *fixture.OrderPlacedV1, runtime.RawDelivery) error {
		h.AnswerHandoffs("nacked")
		return runtime.Retryable(errors.New("busy"))
	})
	res := h.Deliver(order(t, "answer-1"))
	if res.Handler != "retryable" || res.Handoff != "nacked" || res.Settlement != "requeue" {
		t.Errorf("handler %q, handoff %q, settlement %q: want retryable, nacked, requeue", res.Handler, res.Handoff, res.Settlement)
	}
}

// A handler, a Scope, its cleanup, AfterDelivery, Observe, a Telemetry
// method, the Logger's handler or the spec's OrderKey calling Deliver or
// Close on its own harness during its delivery would wait for itself: the
// call panics, and so does the Deliver under way, on the test's goroutine;
// the harness is still usable.
func TestUserCodeCallingBackIntoItsDeliveryPanics(t *testing.T) {
	spec := fixture.LilytestQueueSpec()
	// Without the check, a handler's call would wait out its timeout, a
	// step's its StepTimeout, and Observe's, the Telemetry's and the
	// Logger's for good.
	spec.HandlerTimeout = time.Minute
	for _, caller := range []string{"handler", "Scope", "cleanup", "AfterDelivery", "Observe", "Received", "Settled", "Logger", "OrderKey"} {
		for _, method := range []string{"Deliver", "Close"} {
			spec := spec
			var h *lilytest.Harness
			callBack := func(id string) {
				if id != "outer" {
					return
				}
				if method == "Deliver" {
					h.Deliver(order(t, "inner"))
				} else {
					h.Close()
				}
			}
			cfg := runtime.Config{Logger: quiet}
			switch caller {
			case "Scope", "cleanup":
				cfg.Scope = func(ctx context.Context, d runtime.RawDelivery) (context.Context, func(context.Context) error, error) {
					if caller == "Scope" {
						callBack(d.MessageID())
					}
					return ctx, func(context.Context) error {
						if caller == "cleanup" {
							callBack(d.MessageID())
						}
						return nil
					}, nil
				}
			case "AfterDelivery":
				cfg.AfterDelivery = func(_ context.Context, d runtime.RawDelivery, _ runtime.Record) error {
					callBack(d.MessageID())
					return nil
				}
			case "Observe":
				cfg.Observe = func(rec runtime.Record) { callBack(rec.MessageID) }
			case "Received":
				cfg.Telemetry = hookOf{received: func(d runtime.RawDelivery) { callBack(d.MessageID()) }}
			case "Settled":
				cfg.Telemetry = hookOf{settled: func(rec runtime.Record) { callBack(rec.MessageID) }}
			case "OrderKey":
				// Before the delivery's journey, as intake takes it in.
				spec.OrderKey = func(_ map[string]any, body []byte) string {
					if strings.Contains(string(body), `"outer"`) {
						callBack("outer")
					}
					return ""
				}
			case "Logger":
				// At the delivery's first record, before its handler.
				cfg.Logger = slog.New(handlerOf(func(r slog.Record) {
					r.Attrs(func(a slog.Attr) bool {
						if a.Key == "message_id" {
							callBack(a.Value.String())
						}
						return true
					})
				}))
			}
			var err error
			h, err = lilytest.New(spec, fixture.LilytestRoutes(handler(func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
				if caller == "handler" {
					callBack(msg.OrderID)
				}
				return nil
			})), cfg)
			if err != nil {
				t.Fatal(err)
			}
			panicked := make(chan any)
			go func() {
				defer func() { panicked <- recover() }()
				h.Deliver(order(t, "outer"))
			}()
			select {
			case r := <-panicked:
				want := "lilytest: " + method + " called during its own delivery by its handler or a function of its Config"
				if s, _ := r.(string); !strings.HasPrefix(s, want) {
					t.Errorf("%s calling %s: panic %v, want %q", caller, method, r, want)
				}
			case <-time.After(time.Minute):
				// Left holding the harness: Close would wait for good.
				t.Errorf("%s calling %s: Deliver still waits", caller, method)
				continue
			}
			wantPath(t, h.Deliver(order(t, "after")), runtime.PathAcked)
			h.Close()
		}
	}
}

// hookOf is a Telemetry that calls received and settled, where set.
type hookOf struct {
	noTelemetry
	received func(runtime.RawDelivery)
	settled  func(runtime.Record)
}

func (h hookOf) Received(ctx context.Context, _ string, d runtime.RawDelivery) context.Context {
	if h.received != nil {
		h.received(d)
	}
	return ctx
}

func (h hookOf) Settled(_ context.Context, rec runtime.Record) {
	if h.settled != nil {
		h.settled(rec)
	}
}

// handlerOf is an slog.Handler, of every level, that hands each record to
// handle.
type handlerOf func(slog.Record)

func (handlerOf) Enabled(context.Context, slog.Level) bool { return true }
func (f handlerOf) Handle(_ context.Context, r slog.Record) error {
	f(r)
	return nil
}
func (f handlerOf) WithAttrs([]slog.Attr) slog.Handler { return f }
func (f handlerOf) WithGroup(string) slog.Handler      { return f }

// Deliver calls from several goroutines wait for one another, however
// their handlers run.
func TestConcurrentDeliveriesWait(t *testing.T) {
	spec := fixture.LilytestQueueSpec()
	spec.HandlerTimeout = time.Minute
	started, release := make(chan struct{}), make(chan struct{})
	h := harnessOf(t, spec, func(_ context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		switch msg.OrderID {
		case "first":
			close(started)
			<-release
		case "second":
			select {
			case <-release:
			default:
				t.Error("the second delivery's handler ran while the first's was held")
			}
		}
		return nil
	})
	second := make(chan lilytest.Result)
	go func() {
		<-started
		second <- h.Deliver(order(t, "second"))
	}()
	go func() {
		<-started
		// Time for the second Deliver to wait on the first; it passes
		// without it too.
		time.Sleep(50 * time.Millisecond)
		close(release)
	}()
	wantPath(t, h.Deliver(order(t, "first")), runtime.PathAcked)
	wantPath(t, <-second, runtime.PathAcked)
}
