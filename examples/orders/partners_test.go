package main

import (
	"crypto/rand"
	"encoding/hex"
	"io"
	"testing"
	"time"

	"github.com/lily-mq/lily/examples/orders/ordersmsg"
	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/internal/services"
	_ "github.com/lily-mq/lily/internal/update"
)

// A consumer that cannot connect ends the partners' part of the demo with
// its error: the wait for the messages stops when Run does, and does not
// outlast its deadline.
func TestPartnersEndsWithRunsError(t *testing.T) {
	url := services.RabbitMQ(t)
	spec := ordersmsg.OrdersPartnersQueueSpec()
	var b [3]byte
	_, _ = rand.Read(b[:])
	spec.Name = "lilytest.partners." + hex.EncodeToString(b[:])
	spec.Topology.DeadLetterQueue = spec.Name + ".dlq"
	t.Cleanup(func() { _ = deleteQueues(url, spec, io.Discard) })
	proxy, proxyURL, err := faults.ListenFor(url)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	// The demo's own connections (declare, purge, publish) pass; every
	// connection the consumer opens is closed as it logs in.
	consumer := faults.ConnectionName(spec.Name, "consume")
	proxy.Intercept(func(f faults.Frame) faults.Action {
		if f.Conn == consumer {
			return faults.CutBefore
		}
		return faults.Forward
	})
	done := make(chan error, 1)
	go func() { done <- runPartners(proxyURL, spec) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("runPartners returned no error, though its consumer never connected")
		}
		t.Logf("runPartners: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("runPartners did not return: it waits on for deliveries that cannot come")
	}
}
