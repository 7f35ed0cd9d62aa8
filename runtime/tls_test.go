package runtime_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	neturl "net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
	file string // its certificate, PEM-encoded
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lily test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, pool: x509.NewCertPool(), file: filepath.Join(t.TempDir(), "ca.pem")}
	ca.pool.AddCert(cert)
	if err := os.WriteFile(ca.file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return ca
}

// issue signs a certificate for name: a server's for localhost, or a
// client's.
func (ca *testCA) issue(t *testing.T, name string, usage x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// front is a TLS listener in front of the broker, as a broker's own TLS
// port would be.
type front struct {
	// url reaches the broker through the front, naming the CA and the
	// server name in its query, as amqp091-go reads them.
	url string
	// bare is the same URL with no query: TLS comes from Config.TLS.
	bare string
	// clients counts the connections whose client certificate it verified.
	clients atomic.Int32
}

// tlsFront listens for TLS on a port of its own, with a certificate for
// localhost that ca signed, and forwards each connection's plain bytes to
// the broker. With requireClient it accepts only clients presenting a
// certificate ca signed.
func tlsFront(t *testing.T, ca *testCA, requireClient bool) *front {
	t.Helper()
	cfg := &tls.Config{Certificates: []tls.Certificate{ca.issue(t, "localhost", x509.ExtKeyUsageServerAuth)}}
	if requireClient {
		cfg.ClientAuth, cfg.ClientCAs = tls.RequireAndVerifyClientCert, ca.pool
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	broker, err := neturl.Parse(brokerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	f := &front{}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go f.forward(conn.(*tls.Conn), broker.Host)
		}
	}()
	u := *broker
	u.Scheme = "amqps"
	u.Host = "localhost:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	f.bare = u.String()
	u.RawQuery = neturl.Values{"cacertfile": {ca.file}, "server_name_indication": {"localhost"}}.Encode()
	f.url = u.String()
	return f
}

func (f *front) forward(conn *tls.Conn, broker string) {
	if err := conn.Handshake(); err != nil {
		_ = conn.Close()
		return
	}
	if len(conn.ConnectionState().VerifiedChains) > 0 {
		f.clients.Add(1)
	}
	back, err := net.Dial("tcp", broker)
	if err != nil {
		_ = conn.Close()
		return
	}
	go func() { _, _ = io.Copy(back, conn); _ = back.Close() }()
	go func() { _, _ = io.Copy(conn, back); _ = conn.Close() }()
}
