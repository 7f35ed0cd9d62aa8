package lilytest_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/runtime"
	"github.com/lily-mq/lily/runtime/internal/fixture"
	"github.com/lily-mq/lily/runtime/internal/guard"
	"github.com/lily-mq/lily/runtime/lilytest"
)

// A message whose x-death RabbitMQ's dead-lettering cannot read, which a
// Publisher refuses but another producer sends, is quarantined as the
// consumer connection's filter quarantines it on the broker
// (TestBrokerForeignBrokenXDeathCopy): poison for a reason that names the
// quarantine, and a DLQ copy built from the filter's stand-in header table,
// so without the CloudEvent's identity headers; lilytest.RawDelivery
// refuses it in the same words. The harness handed the guard the headers
// as sent: the reason lacked "quarantined: ", and the copy carried
// cloudEvents_id, _source, _specversion and _type. On an ordered queue the
// same; the harness dereferenced the reading a quarantined delivery never
// gets, and panicked.
func TestBrokenXDeathIsQuarantinedAsOnTheBroker(t *testing.T) {
	var calls int
	unordered, _ := foreignHarness(t, &calls)
	spec := fixture.LilytestForeignQueueSpec()
	spec.OrderKey = func(map[string]any, []byte) string { return "one" }
	ordered, err := lilytest.New(spec, fixture.LilytestForeignRoutes(foreign{calls: &calls}), runtime.Config{Logger: quiet, Inbox: &lilytest.Inbox{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ordered.Close)
	p, err := fixture.NewPaymentAuthorizedV1("pa-xd", &fixture.PaymentAuthorizedV1{PaymentID: "pa-xd"})
	if err != nil {
		t.Fatal(err)
	}
	p.Headers["x-death"] = []any{"junk"}
	const why = "quarantined: header x-death: entry 0 is a string, not a table: RabbitMQ's dead-lettering cannot read it"
	for _, h := range []struct {
		name string
		h    *lilytest.Harness
	}{{"unordered", unordered}, {"ordered", ordered}} {
		res := h.h.Deliver(p)
		wantPath(t, res, runtime.PathDeadLettered)
		if res.Rejection != "poison" || res.Reason != "poison envelope: "+why || calls != 0 {
			t.Errorf("%s: rejection %q, reason %q, %d calls; want poison before any handler: poison envelope: %s", h.name, res.Rejection, res.Reason, calls, why)
		}
		c := res.Copy
		if reason := c.Headers[guard.HeaderFailureReason]; reason != "poison envelope: "+why || c.Headers[envelope.HeaderPoisonCopy] != true {
			t.Errorf("%s: copy's reason %q, headers %v", h.name, reason, c.Headers)
		}
		for k := range c.Headers {
			if strings.HasPrefix(k, "cloudEvents") || k == "x-death" {
				t.Errorf("%s: the copy carries %s: %v; the stand-in table has none", h.name, k, c.Headers[k])
			}
		}
		if string(c.Body) != string(p.Body) || c.Type != p.Type || c.MessageId != p.MessageId {
			t.Errorf("%s: copy %q, type %q, id %q; want the original's body and properties", h.name, c.Body, c.Type, c.MessageId)
		}
	}
	_, err = lilytest.RawDelivery(fixture.LilytestForeignQueueSpec(), fixture.LilytestForeignRoutes(foreign{calls: &calls}), p)
	if !errors.Is(err, lilytest.ErrRejected) || !strings.HasSuffix(err.Error(), "as poison: "+why) {
		t.Errorf("RawDelivery: %v", err)
	}
}
