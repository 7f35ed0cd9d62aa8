package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// relay is a TCP relay in front of the test's broker. Over TLS when it is
// given a configuration; with hold, once a client sends a basic.publish on a
// connection, the relay passes nothing more the broker sends on that
// connection (its confirm, first): the publisher waits for a confirm that
// does not come, until cut.
type relay struct {
	ln        net.Listener
	broker    string
	hold      bool
	published chan struct{} // closed at the first basic.publish
	once      sync.Once
	done      chan struct{} // closed by cut
	cutOnce   sync.Once
	mu        sync.Mutex
	conns     []net.Conn
}

func newRelay(t *testing.T, brokerURL string, tlsConfig *tls.Config, hold bool) *relay {
	t.Helper()
	uri, err := amqp.ParseURI(brokerURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if tlsConfig != nil {
		ln = tls.NewListener(ln, tlsConfig)
	}
	r := &relay{
		ln: ln, broker: net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port)), hold: hold,
		published: make(chan struct{}), done: make(chan struct{}),
	}
	go r.accept()
	t.Cleanup(r.cut)
	return r
}

// port is the relay's port.
func (r *relay) port() string {
	_, port, _ := net.SplitHostPort(r.ln.Addr().String())
	return port
}

// cut closes the relay and every connection through it.
func (r *relay) cut() {
	r.cutOnce.Do(func() {
		close(r.done)
		_ = r.ln.Close()
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, c := range r.conns {
			_ = c.Close()
		}
	})
}

func (r *relay) accept() {
	for {
		client, err := r.ln.Accept()
		if err != nil {
			return
		}
		broker, err := net.Dial("tcp", r.broker)
		if err != nil {
			_ = client.Close()
			continue
		}
		r.mu.Lock()
		r.conns = append(r.conns, client, broker)
		r.mu.Unlock()
		if !r.hold {
			go func() { _, _ = io.Copy(broker, client) }()
			go func() { _, _ = io.Copy(client, broker) }()
			continue
		}
		var held atomic.Bool
		go r.toBroker(client, broker, &held)
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := broker.Read(buf)
				if held.Load() {
					<-r.done
					return
				}
				if _, werr := client.Write(buf[:n]); err != nil || werr != nil {
					return
				}
			}
		}()
	}
}

// toBroker passes the client's frames on, one at a time, and holds back the
// broker's side of the connection before it passes a basic.publish: the
// broker cannot answer it before the hold is in place.
func (r *relay) toBroker(client, broker net.Conn, held *atomic.Bool) {
	in := bufio.NewReader(client)
	protocol := make([]byte, 8)
	if _, err := io.ReadFull(in, protocol); err != nil {
		return
	}
	if _, err := broker.Write(protocol); err != nil {
		return
	}
	for {
		head := make([]byte, 7)
		if _, err := io.ReadFull(in, head); err != nil {
			return
		}
		frame := append(head, make([]byte, binary.BigEndian.Uint32(head[3:7])+1)...)
		if _, err := io.ReadFull(in, frame[7:]); err != nil {
			return
		}
		const method, basic, publish = 1, 60, 40
		if frame[0] == method && len(frame) >= 11 && binary.BigEndian.Uint16(frame[7:9]) == basic && binary.BigEndian.Uint16(frame[9:11]) == publish {
			held.Store(true)
			r.once.Do(func() { close(r.published) })
		}
		if _, err := broker.Write(frame); err != nil {
			return
		}
	}
}

// selfSigned is a server certificate for 127.0.0.1 that is its own CA, and
// the file its PEM is in, for an amqps URL's cacertfile.
func selfSigned(t *testing.T) (*tls.Config, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lilydlq test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:        true, BasicConstraintsValid: true,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, file
}
