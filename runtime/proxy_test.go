package runtime_test

import (
	"testing"

	"github.com/lily-mq/lily/internal/faults"
	"github.com/lily-mq/lily/runtime"
)

// proxy stands between a consumer and RabbitMQ (internal/faults' frame-aware
// proxy) so a test can break the transport at an exact moment: freeze drops
// every frame the client sends from then on (an ACK written but never
// received), freezeReplies every frame the broker sends (a confirm that never
// arrives), cut closes every connection and lets new ones flow.
type proxy struct {
	*faults.Proxy
	addr string // the broker's URL through the proxy
}

func newProxy(t *testing.T) *proxy {
	t.Helper()
	p, url, err := faults.ListenFor(brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return &proxy{Proxy: p, addr: url}
}

// url is the broker's URL through the proxy.
func (p *proxy) url() string { return p.addr }

// connected reports whether a connection runs through the proxy.
func (p *proxy) connected() bool { return len(p.Conns()) > 0 }

func (p *proxy) freeze() { p.drop(faults.ToBroker) }

func (p *proxy) freezeReplies() { p.drop(faults.ToClient) }

func (p *proxy) drop(dir faults.Direction) {
	p.Intercept(func(f faults.Frame) faults.Action {
		if f.Dir == dir {
			return faults.Drop
		}
		return faults.Forward
	})
}

// cut closes the connections first, so that nothing frozen slips through,
// then lets the new ones flow.
func (p *proxy) cut() {
	p.Cut()
	p.Intercept(nil)
}

// behindProxy declares a queue of the test schema (tweaked), publishes one
// order with message id id to it, and returns a proxy for the consumer.
func behindProxy(t *testing.T, id string, tweaks ...func(*runtime.QueueSpec)) (runtime.QueueSpec, *proxy) {
	t.Helper()
	q := brokerSpec(t, tweaks...)
	declareTopology(t, q)
	publish(t, q.Name, order(t, id))
	return q, newProxy(t)
}
