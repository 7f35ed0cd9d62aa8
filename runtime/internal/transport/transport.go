// Package transport opens Lily's connections to the broker: amqp091-go's own
// dial, which also hands back the socket beneath the connection (for a
// watchdog to close, and to ask when it last sent: Sent), and which can put
// a filter between that socket and the client. Under amqps:// the filter
// must read AMQP frames, not ciphertext, so TLS is then terminated beneath
// it, as amqp091-go would have done it. The
// consumer's filter is the quarantine; publishing connections coalesce their
// writes (Coalesce).
package transport

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Dial connects to the broker at rawURL with cfg, as amqp.DialConfig does,
// and returns the socket too. When filter is not nil the client reads and
// writes through what filter makes of conn, the (decrypted) connection;
// socket is the TCP connection beneath it, the same under amqp://, which
// says when it last sent (Sent).
func Dial(rawURL string, cfg amqp.Config, filter func(conn, socket net.Conn) net.Conn) (*amqp.Connection, net.Conn, error) {
	if cfg.TLSClientConfig != nil {
		// amqp091-go sets an empty ServerName to the URL's host on the
		// configuration it is given: each dial, to each node, gets a copy.
		cfg.TLSClientConfig = cfg.TLSClientConfig.Clone()
	}
	dial := cfg.Dial
	if dial == nil {
		dial = amqp.DefaultDial(30 * time.Second)
	}
	var tlsConfig *tls.Config
	if filter != nil {
		var err error
		if rawURL, tlsConfig, err = beneath(rawURL, cfg.TLSClientConfig); err != nil {
			return nil, nil, err
		}
	}
	var socket net.Conn
	cfg.Dial = func(network, addr string) (net.Conn, error) {
		s, err := dial(network, addr)
		if err != nil {
			return nil, err
		}
		s = &sending{Conn: s}
		socket = s
		conn := s
		if tlsConfig != nil {
			tc := tls.Client(s, tlsConfig)
			if err := tc.Handshake(); err != nil {
				_ = s.Close()
				return nil, err
			}
			conn = tc
		}
		if filter != nil {
			conn = filter(conn, s)
		}
		return conn, nil
	}
	conn, err := amqp.DialConfig(rawURL, cfg)
	return conn, socket, err
}

// sending is a socket that keeps when it last sent.
type sending struct {
	net.Conn
	// at is when a write that sent bytes last ended, in nanoseconds since
	// the Unix epoch.
	at atomic.Int64
}

func (s *sending) Write(p []byte) (int, error) {
	n, err := s.Conn.Write(p)
	if n > 0 {
		s.at.Store(time.Now().UnixNano())
	}
	return n, err
}

// Sent is when socket, one Dial returned, last sent bytes: when a write
// that sent some ended. Zero for another socket, and for one that has sent
// nothing. A watchdog on a write queued behind others asks it to tell a
// link that is slow, whose bytes keep going out, from a peer that stopped
// reading. Each write is as long as the client's frames, or Coalesce's
// queue: a write the link takes a step to carry fails anyway, at
// Coalesce's deadline.
func Sent(socket net.Conn) time.Time {
	if s, ok := socket.(*sending); ok {
		if at := s.at.Load(); at != 0 {
			return time.Unix(0, at)
		}
	}
	return time.Time{}
}

// beneath turns an amqps:// URL into the amqp:// URL of the same broker and
// port, and the TLS configuration the client would have used: the one given,
// or one built from the URL's cacertfile, certfile, keyfile and
// server_name_indication. Another URL comes back as it is.
func beneath(rawURL string, given *tls.Config) (string, *tls.Config, error) {
	uri, err := amqp.ParseURI(rawURL)
	if err != nil || uri.Scheme != "amqps" {
		return rawURL, nil, err
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", nil, err
	}
	u.Scheme = "amqp"
	u.Host = net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port))
	cfg := given
	if cfg == nil {
		if cfg, err = fromURI(uri); err != nil {
			return "", nil, err
		}
	}
	cfg = cfg.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName = uri.Host
	}
	return u.String(), cfg, nil
}

// fromURI builds a TLS configuration from an amqps URI's parameters.
func fromURI(uri amqp.URI) (*tls.Config, error) {
	cfg := &tls.Config{ServerName: uri.ServerName, MinVersion: tls.VersionTLS12}
	if uri.CACertFile != "" {
		pem, err := os.ReadFile(uri.CACertFile)
		if err != nil {
			return nil, fmt.Errorf("read CA certificate: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		cfg.RootCAs.AppendCertsFromPEM(pem)
	}
	if uri.CertFile != "" && uri.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(uri.CertFile, uri.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
