package runtime_test

import (
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// proxy stands between a consumer and RabbitMQ so a test can break the
// transport at an exact moment: freeze drops every byte the client sends from
// then on (an ACK written but never received), freezeReplies every byte the
// broker sends (a confirm that never arrives), cut closes every connection.
type proxy struct {
	ln            net.Listener
	target        string
	frozen        atomic.Bool
	repliesFrozen atomic.Bool
	mu            sync.Mutex
	conns         []net.Conn
}

func newProxy(t *testing.T) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := strings.TrimPrefix(strings.TrimSuffix(brokerURL(), "/"), "amqp://guest:guest@")
	p := &proxy{ln: ln, target: target}
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
	})
	return p
}

// url is the broker's URL through the proxy.
func (p *proxy) url() string { return "amqp://guest:guest@" + p.ln.Addr().String() + "/" }

func (p *proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		broker, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, broker)
		p.mu.Unlock()
		go p.pipe(broker, client, true)
		go p.pipe(client, broker, false)
	}
}

// pipe copies src to dst; bytes from the client are dropped while frozen.
func (p *proxy) pipe(dst, src net.Conn, fromClient bool) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		dropped := fromClient && p.frozen.Load() || !fromClient && p.repliesFrozen.Load()
		if n > 0 && !dropped {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				_ = src.Close()
			}
			return
		}
	}
}

// connected reports whether a connection runs through the proxy.
func (p *proxy) connected() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) > 0
}

func (p *proxy) freeze() { p.frozen.Store(true) }

func (p *proxy) freezeReplies() { p.repliesFrozen.Store(true) }

// cut closes every connection through the proxy and lets new ones flow.
func (p *proxy) cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	p.frozen.Store(false)
	p.repliesFrozen.Store(false)
}
