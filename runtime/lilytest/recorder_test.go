package lilytest_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/frame"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
	"github.com/lily-mq/lily/runtime/lilytest"
)

// forward is a handler that sends a follow-up through out, then fails when
// the order is "bad".
func forward(out runtime.Sender) handler {
	return func(ctx context.Context, msg *fixture.OrderPlacedV1, _ runtime.RawDelivery) error {
		p, err := fixture.NewOrderPlacedV1("fwd-"+msg.OrderID, &fixture.OrderPlacedV1{OrderID: msg.OrderID})
		if err != nil {
			return runtime.Permanent(err)
		}
		if err := out.Send(ctx, runtime.Message{Exchange: "shop", RoutingKey: "forwarded", Publishing: p}); err != nil {
			return err
		}
		if msg.OrderID == "bad" {
			return runtime.Permanent(errors.New("refused"))
		}
		return nil
	}
}

// As a Publisher, a Recorder keeps each message as it is sent, in an Inbox
// claim or not: a handler that fails after sending has sent it all the same.
func TestRecorderKeepsEachSendAtOnce(t *testing.T) {
	for _, cfg := range []func(*runtime.Config){func(*runtime.Config) {}, withInbox(&lilytest.Inbox{})} {
		var out lilytest.Recorder
		h := harness(t, forward(&out), cfg)
		bad := h.Deliver(order(t, "bad"))
		h.Deliver(order(t, "good"))
		sent := out.Sent()
		if len(sent) != 2 || sent[0].MessageId != "fwd-bad" || sent[1].MessageId != "fwd-good" || bad.Path != runtime.PathDeadLettered {
			t.Errorf("commit %q: sent %+v, bad went %s", bad.Commit, sent, bad.Path)
		}
	}
	var out lilytest.Recorder
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := out.Send(ctx, runtime.Message{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Send with a done context: %v", err)
	}
	// What a Publisher refuses before writing, the Recorder refuses too,
	// and keeps nothing of it.
	for why, m := range map[string]runtime.Message{
		"needs an exchange":               {},
		"expiration":                      {RoutingKey: "q", Publishing: runtime.Publishing{Expiration: "soon"}},
		"delivery_mode: 3":                {RoutingKey: "q", Publishing: runtime.Publishing{DeliveryMode: 3}},
		"headers: a name of 300 bytes":    {RoutingKey: "q", Publishing: runtime.Publishing{Headers: map[string]any{strings.Repeat("k", 300): "v"}}},
		"headers: n: value uint64":        {RoutingKey: "q", Publishing: runtime.Publishing{Headers: map[string]any{"n": uint64(1)}}},
		"more than the 131064 of a frame": {RoutingKey: "q", Publishing: runtime.Publishing{Headers: map[string]any{"big": strings.Repeat("x", 200_000)}}},
		// A Publisher refuses any user but its connection's, and a
		// Recorder has none: on the broker it would close the channel.
		`user_id "guest": the broker takes only the user`: {RoutingKey: "q", Publishing: runtime.Publishing{UserId: "guest"}},
		// Within a frame as it is, past it with the publish id.
		"131076 bytes, more than the 131064": {RoutingKey: "q", Publishing: runtime.Publishing{Headers: map[string]any{"big": strings.Repeat("x", 131_000)}}},
	} {
		if err := out.Send(context.Background(), m); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("Send of a message with %s: %v", why, err)
		}
	}
	if sent := out.Sent(); len(sent) != 0 {
		t.Errorf("kept %d refused messages", len(sent))
	}
	// What pgoutbox.Write refuses, an Outbox Recorder refuses too, where a
	// Publisher's would not.
	for why, m := range map[string]runtime.Message{
		"message_id: not valid UTF-8": {RoutingKey: "q", Publishing: runtime.Publishing{MessageId: "a\xffb"}},
		"type: holds a NUL byte":      {RoutingKey: "q", Publishing: runtime.Publishing{Type: "t\x00"}},
		"more than 121848":            {RoutingKey: "q", Publishing: runtime.Publishing{Headers: map[string]any{"big": strings.Repeat("x", 125_000)}}},
	} {
		if err := (&lilytest.Recorder{}).Send(context.Background(), m); err != nil {
			t.Errorf("a Publisher's Recorder refused a message with %s: %v", why, err)
		}
		if err := (&lilytest.Recorder{Outbox: true}).Send(context.Background(), m); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("an Outbox Recorder's Send of a message with %s: %v", why, err)
		}
	}
}

// A message that fits a frame with the Publisher's publish id, at its
// longest 26 bytes (12 hex digits, a '-' and a uint64 in base 36), the
// Publisher sends, and the Recorder keeps; one byte more it refuses.
func TestRecorderTakesAFullFrame(t *testing.T) {
	const longestID = 26
	p := runtime.Publishing{Headers: map[string]any{"big": "", envelope.HeaderHandoffID: strings.Repeat("i", longestID)}}
	p.Headers["big"] = strings.Repeat("x", frame.Size-frame.Overhead-frame.ContentHeader(p))
	delete(p.Headers, envelope.HeaderHandoffID)
	var out lilytest.Recorder
	if err := out.Send(context.Background(), runtime.Message{RoutingKey: "q", Publishing: p}); err != nil {
		t.Errorf("a full frame: %v", err)
	}
	p.Headers["big"] = p.Headers["big"].(string) + "x"
	if err := out.Send(context.Background(), runtime.Message{RoutingKey: "q", Publishing: p}); err == nil || !strings.Contains(err.Error(), "more than the 131064 of a frame") {
		t.Errorf("a byte past a frame: %v", err)
	}
}

// As an Outbox, a Recorder keeps a message sent in an Inbox claim only once
// the claim commits, as an outbox row is published; a handler that fails
// after sending rolls it back with the claim. Without a claim, as
// pgoutbox.Outbox without a transaction, the send fails, and so does the
// handler.
func TestOutboxRecorderKeepsWhatTheClaimCommits(t *testing.T) {
	out := &lilytest.Recorder{Outbox: true}
	h := harness(t, forward(out), withInbox(&lilytest.Inbox{}))
	h.Deliver(order(t, "bad"))
	if sent := out.Sent(); len(sent) != 0 {
		t.Errorf("after a rollback, sent %v", sent)
	}
	h.Deliver(order(t, "good"))
	sent := out.Sent()
	if len(sent) != 1 || sent[0].MessageId != "fwd-good" || sent[0].Exchange != "shop" || sent[0].RoutingKey != "forwarded" {
		t.Fatalf("sent %+v, want fwd-good", sent)
	}

	unclaimed := harness(t, forward(out))
	res := unclaimed.Deliver(order(t, "loose"))
	wantPath(t, res, runtime.PathRetried)
	if res.Err == nil || !strings.Contains(res.Err.Error(), "no Inbox claim in ctx") || len(out.Sent()) != 1 {
		t.Errorf("without a claim: Err %v, sent %+v", res.Err, out.Sent())
	}
}

// What a handler sends is what another consumer's handler can be handed:
// the message goes in as sent, through the exchange and key it was sent to.
func TestRecordedMessageDeliveredOnward(t *testing.T) {
	var out lilytest.Recorder
	up := harness(t, forward(&out))
	up.Deliver(order(t, "chain"))
	var exchange, key string
	down := harness(t, func(_ context.Context, _ *fixture.OrderPlacedV1, d runtime.RawDelivery) error {
		exchange, key = d.Exchange(), d.RoutingKey()
		return nil
	})
	m := out.Sent()[0]
	res := down.Deliver(m.Publishing, lilytest.Via(m.Exchange, m.RoutingKey))
	wantPath(t, res, runtime.PathAcked)
	if res.MessageID != "fwd-chain" || exchange != "shop" || key != "forwarded" {
		t.Errorf("result %+v; handler saw exchange %q key %q", res, exchange, key)
	}
}
