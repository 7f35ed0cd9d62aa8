// Package faults is Lily's fault harness for tests and the soak command: a TCP
// proxy between a consumer and RabbitMQ that reads the AMQP frames passing
// through it, so that a connection can be cut, stalled in one direction or
// delayed, at once or at the moment a chosen frame passes (a client's
// basic.ack, a broker's publisher confirm); and broker-side, database-side and
// handler faults: connections closed by name, a queue deleted so that a
// mandatory publish is returned, a queue made to refuse publishes so that the
// publisher is nacked, the broker application stopped and started, a
// PostgreSQL backend killed during its COMMIT, and handlers that panic or hang.
//
// Every fault is undone by the harness itself (heal, Resume, Restore) and
// none of them loses a message that was in a queue (Unroute needs the
// publishers held back; it says how).
package faults

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Direction is the way a frame travels through the proxy.
type Direction int

// The two directions.
const (
	ToBroker Direction = iota + 1 // from the client to RabbitMQ
	ToClient                      // from RabbitMQ to the client
)

// Method names an AMQP 0-9-1 method by class and method id.
type Method struct{ Class, ID uint16 }

// Methods a fault is usually timed on.
var (
	ConnectionStartOk = Method{10, 11}
	ConnectionClose   = Method{10, 50}
	ChannelClose      = Method{20, 40}
	ChannelCloseOk    = Method{20, 41}
	BasicQos          = Method{60, 10}
	BasicConsume      = Method{60, 20}
	BasicConsumeOk    = Method{60, 21}
	BasicCancel       = Method{60, 30}
	BasicCancelOk     = Method{60, 31}
	BasicPublish      = Method{60, 40}
	BasicReturn       = Method{60, 50}
	BasicDeliver      = Method{60, 60}
	// BasicAck from the client settles a delivery; from the broker it is a
	// publisher confirm.
	BasicAck  = Method{60, 80}
	BasicNack = Method{60, 120}
)

// Frame is what an Interceptor sees of one AMQP frame.
type Frame struct {
	// Conn is the connection_name the client announced (Lily's are
	// "lily <queue> consume" and "lily <queue> handoff"); empty before it did.
	Conn    string
	Dir     Direction
	Type    byte // 1 method, 2 content header, 3 body, 8 heartbeat
	Channel uint16
	// Method is set on method frames only.
	Method Method
}

// Is reports whether f is a method frame of m.
func (f Frame) Is(m Method) bool { return f.Type == 1 && f.Method == m }

// Action is an Interceptor's verdict on one frame.
type Action int

// The verdicts.
const (
	// Forward passes the frame on (after any delay or stall).
	Forward Action = iota
	// Drop discards the frame: the peer never sees it. The stream stays
	// well-formed only if the peer can live without it (an ACK can).
	Drop
	// CutBefore closes the frame's connection without passing the frame on:
	// the frames read before it still pass (after any delay or stall), and
	// it and all that follows it are lost.
	CutBefore
	// CutAfter passes the frame on, then closes its connection: the frames
	// read after it are lost.
	CutAfter
)

// Interceptor decides what happens to each frame. It runs on the goroutine
// reading that connection's direction: keep it quick, and never call the
// proxy's Intercept from it.
type Interceptor func(Frame) Action

// Rewriter returns the bytes to forward in place of a frame (raw is the whole
// frame, header and end octet included): raw itself, or any bytes at all.
// It runs after the interceptor, on the same goroutine.
type Rewriter func(f Frame, raw []byte) []byte

// Proxy forwards TCP connections to a broker, frame by frame.
type Proxy struct {
	ln     net.Listener
	target string

	intercept atomic.Pointer[Interceptor]
	rewrite   atomic.Pointer[Rewriter]
	delay     atomic.Int64    // nanoseconds added to every frame
	limit     [3]atomic.Int64 // per direction: bytes a second each connection reads, 0 for no limit
	held      atomic.Int64    // frames a delay or a stall held back

	mu     sync.Mutex
	conns  map[*pconn]struct{}
	gates  [3]chan struct{} // per direction: closed while frames flow
	closed bool
}

// Listen starts a proxy on a free port of 127.0.0.1 that forwards to target
// (host:port).
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[*pconn]struct{}{}}
	for i := range p.gates {
		p.gates[i] = openGate()
	}
	go p.accept()
	return p, nil
}

// ListenFor starts a proxy to the broker of an amqp:// URL and returns the
// proxy and the URL that reaches the broker through it.
func ListenFor(brokerURL string) (*Proxy, string, error) {
	u, err := url.Parse(brokerURL)
	if err != nil {
		return nil, "", err
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5672")
	}
	p, err := Listen(target)
	if err != nil {
		return nil, "", err
	}
	u.Host = p.Addr()
	return p, u.String(), nil
}

func openGate() chan struct{} {
	g := make(chan struct{})
	close(g)
	return g
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Intercept sets the interceptor every later frame is shown to; nil forwards
// every frame.
func (p *Proxy) Intercept(f Interceptor) {
	if f == nil {
		p.intercept.Store(nil)
		return
	}
	p.intercept.Store(&f)
}

// Rewrite sets the rewriter every later forwarded frame is shown to; nil
// forwards frames as they are.
func (p *Proxy) Rewrite(f Rewriter) {
	if f == nil {
		p.rewrite.Store(nil)
		return
	}
	p.rewrite.Store(&f)
}

// Delay holds every frame for d before it is passed on, in both directions,
// from now on: latency without loss (but for a Cut). Zero removes the delay.
func (p *Proxy) Delay(d time.Duration) { p.delay.Store(int64(d)) }

// Limit paces each connection's frames in direction dir (ToBroker or
// ToClient) to rate bytes a second from now on, where the proxy reads them,
// its socket's receive buffer kept small: a slow link, which the sender
// feels once its own send buffer fills. Zero removes the limit.
func (p *Proxy) Limit(dir Direction, rate int) { p.limit[dir].Store(int64(rate)) }

// Held counts the frames a Delay or a Stall has held back so far, both
// directions together: one that found no frame to hold leaves it as it was.
func (p *Proxy) Held() int64 { return p.held.Load() }

// Stall stops passing frames in direction dir (ToBroker, ToClient, or 0 for
// both) until Resume: nothing is lost (but for a Cut), frames wait in the
// proxy and then in the kernel's buffers. A stall longer than the heartbeat
// timeout ends in the peers closing the connection.
func (p *Proxy) Stall(dir Direction) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range dirs(dir) {
		if isOpen(p.gates[d]) {
			p.gates[d] = make(chan struct{})
		}
	}
}

// Resume lets stalled frames flow again, in order.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range dirs(0) {
		if !isOpen(p.gates[d]) {
			close(p.gates[d])
		}
	}
}

func dirs(dir Direction) []Direction {
	if dir == 0 {
		return []Direction{ToBroker, ToClient}
	}
	return []Direction{dir}
}

func isOpen(g chan struct{}) bool {
	select {
	case <-g:
		return true
	default:
		return false
	}
}

func (p *Proxy) gate(dir Direction) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gates[dir]
}

// Cut closes every connection through the proxy now and returns how many it
// closed; new connections flow. As on a network cut, what was in flight is
// lost: the frames the proxy held back (delayed, stalled, or read and not yet
// written) go with the connection.
func (p *Proxy) Cut() int { return p.CutConns(func(string) bool { return true }) }

// CutConns closes the connections whose announced name satisfies match.
func (p *Proxy) CutConns(match func(name string) bool) int {
	victims := p.matching(match)
	for _, c := range victims {
		c.close()
	}
	return len(victims)
}

// matching lists the connections whose announced name satisfies match.
func (p *Proxy) matching(match func(name string) bool) []*pconn {
	p.mu.Lock()
	defer p.mu.Unlock()
	var found []*pconn
	for c := range p.conns {
		if match(c.name()) {
			found = append(found, c)
		}
	}
	return found
}

// Conns lists the names of the connections through the proxy.
func (p *Proxy) Conns() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var names []string
	for c := range p.conns {
		names = append(names, c.name())
	}
	return names
}

// Close stops accepting, cuts every connection and resumes nothing.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Cut()
	return err
}

func (p *Proxy) accept() {
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
		c := &pconn{
			p: p, client: client, broker: broker, done: make(chan struct{}),
			consumers: map[consumer]struct{}{}, cancelled: map[consumer]struct{}{},
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.close()
			return
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		go c.pipe(ToBroker, client, broker)
		go c.pipe(ToClient, broker, client)
	}
}

// pconn is one client connection and its broker connection.
type pconn struct {
	p              *Proxy
	client, broker net.Conn
	connName       atomic.Pointer[string]
	done           chan struct{}
	once           sync.Once

	mu        sync.Mutex
	toClient  chan<- out            // the queue of frames on their way to the client
	consumers map[consumer]struct{} // the client's, from the broker's consume-ok to a cancel or the channel's close
	cancelled map[consumer]struct{} // cancelled by CancelConsumers, the client's cancel-ok not yet dropped
}

func (c *pconn) name() string {
	if n := c.connName.Load(); n != nil {
		return *n
	}
	return ""
}

func (c *pconn) close() {
	c.once.Do(func() {
		close(c.done)
		_ = c.client.Close()
		_ = c.broker.Close()
		c.p.mu.Lock()
		delete(c.p.conns, c)
		c.p.mu.Unlock()
	})
}

// out is a frame on its way to the writer, or without bytes a cut alone.
type out struct {
	bytes []byte
	due   time.Time
	cut   bool // close the connection once bytes are written
}

// pipe reads frames from src, shows each to the interceptor and hands those
// to forward to a writer, which honours the delay and the stall.
func (c *pconn) pipe(dir Direction, src, dst net.Conn) {
	defer c.close()
	queue := make(chan out, 256)
	if dir == ToClient {
		c.mu.Lock()
		c.toClient = queue
		c.mu.Unlock()
	}
	go c.write(dir, dst, queue)
	r := bufio.NewReaderSize(src, 64<<10)
	if dir == ToBroker {
		// The protocol header: "AMQP" 0 0 9 1.
		hdr := make([]byte, 8)
		if _, err := io.ReadFull(r, hdr); err != nil {
			return
		}
		if !c.send(queue, out{bytes: hdr, due: c.due()}) {
			return
		}
	}
	var paced time.Time // when the frames read so far have crossed the limited link
	for {
		raw, f, err := readFrame(r)
		if err != nil {
			return
		}
		if !c.pace(dir, src, &paced, len(raw)) {
			return
		}
		f.Dir = dir
		if f.Is(ConnectionStartOk) {
			if n, ok := connectionName(raw); ok {
				c.connName.Store(&n)
			}
		}
		f.Conn = c.name()
		if c.track(f, raw) {
			continue
		}
		act := Forward
		if ic := c.p.intercept.Load(); ic != nil {
			act = (*ic)(f)
		}
		switch act {
		case Drop:
			continue
		case CutBefore:
			// The writer passes on what came before f, then closes.
			if c.send(queue, out{due: time.Now(), cut: true}) {
				<-c.done
			}
			return
		}
		if rw := c.p.rewrite.Load(); rw != nil {
			raw = (*rw)(f, raw)
		}
		if !c.send(queue, out{bytes: raw, due: c.due(), cut: act == CutAfter}) {
			return
		}
	}
}

// pace waits until n more bytes read from src have crossed dir's limited
// link, after the bytes before them (*paced), and reports whether the
// connection is open.
func (c *pconn) pace(dir Direction, src net.Conn, paced *time.Time, n int) bool {
	rate := c.p.limit[dir].Load()
	if rate <= 0 {
		return true
	}
	now := time.Now()
	if paced.IsZero() {
		// The kernel would grow src's buffer to megabytes the link then
		// takes seconds to pass, which a slow link's sender does not have:
		// it would take a write that filled it for one that crossed.
		if tc, ok := src.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(64 << 10)
		}
	}
	if paced.Before(now) {
		*paced = now
	}
	*paced = paced.Add(time.Duration(int64(n) * int64(time.Second) / rate))
	t := time.NewTimer(time.Until(*paced))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.done:
		return false
	}
}

func (c *pconn) due() time.Time { return time.Now().Add(time.Duration(c.p.delay.Load())) }

func (c *pconn) send(queue chan<- out, o out) bool {
	select {
	case queue <- o:
		return true
	case <-c.done:
		return false
	}
}

func (c *pconn) write(dir Direction, dst net.Conn, queue <-chan out) {
	for {
		var o out
		select {
		case o = <-queue:
		case <-c.done:
			return
		}
		// A cut alone follows the frames read before it, which have
		// passed: it waits for no stall.
		if len(o.bytes) > 0 && !c.pass(dir, dst, o) {
			return
		}
		if o.cut {
			c.close()
			return
		}
	}
}

// pass writes o's bytes to dst once they are due and dir flows, and reports
// whether it did.
func (c *pconn) pass(dir Direction, dst net.Conn, o out) bool {
	wait, gate := time.Until(o.due), c.p.gate(dir)
	if wait > 0 || !isOpen(gate) {
		c.p.held.Add(1)
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-c.done:
			t.Stop()
			return false
		}
	}
	select {
	case <-c.p.gate(dir):
	case <-c.done:
		return false
	}
	if _, err := dst.Write(o.bytes); err != nil {
		c.close()
		return false
	}
	return true
}

// frameEnd closes every AMQP frame.
const frameEnd = 0xCE

// readFrame reads one whole frame: type, channel, size, payload, frame end.
func readFrame(r *bufio.Reader) ([]byte, Frame, error) {
	var f Frame
	head, err := r.Peek(7)
	if err != nil {
		return nil, f, err
	}
	size := binary.BigEndian.Uint32(head[3:7])
	if size > 64<<20 {
		return nil, f, errors.New("faults: frame larger than 64 MiB")
	}
	raw := make([]byte, 7+int(size)+1)
	if _, err := io.ReadFull(r, raw); err != nil {
		return nil, f, err
	}
	if raw[len(raw)-1] != frameEnd {
		return nil, f, errors.New("faults: frame without its end octet")
	}
	f.Type = raw[0]
	f.Channel = binary.BigEndian.Uint16(raw[1:3])
	if f.Type == 1 && size >= 4 {
		f.Method = Method{binary.BigEndian.Uint16(raw[7:9]), binary.BigEndian.Uint16(raw[9:11])}
	}
	return raw, f, nil
}

// connectionName finds the connection_name long string in a start-ok frame's
// client properties.
func connectionName(raw []byte) (string, bool) {
	key := []byte("\x0fconnection_nameS")
	i := bytes.Index(raw, key)
	if i < 0 || i+len(key)+4 > len(raw) {
		return "", false
	}
	i += len(key)
	n := int(binary.BigEndian.Uint32(raw[i : i+4]))
	if i+4+n > len(raw) {
		return "", false
	}
	return string(raw[i+4 : i+4+n]), true
}
