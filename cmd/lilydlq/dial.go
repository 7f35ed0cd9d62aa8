package main

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"os"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/frame"
	"github.com/lily-mq/lily/internal/quarantine"
	"github.com/lily-mq/lily/internal/sanitize"
)

// dial connects to the broker, naming the connection after the command so
// that the management UI and rabbitmqctl show who holds the copies. The
// client reads its socket through the quarantine filter, as the runtime's
// consumers do: a DLQ holds the very copies the client cannot decode (the
// runtime dead-letters them intact), and one such copy would otherwise close
// the connection at every read, so no command could get past it. The filter
// puts a marker in place of such a copy's headers and remembers it. Unlike
// the runtime's, lilydlq's filter also quarantines a copy whose tables name
// an entry twice: the client would hand on one value of the name, and an
// export or a re-drive of what it kept would lose the other for good.
func dial(url, name string) (*amqp.Connection, *quarantine.Conn, error) {
	// A URL's parse error quotes the URL, password and all: say less.
	uri, err := amqp.ParseURI(url)
	if err != nil {
		return nil, nil, errors.New("connect to the broker: the URL (-url or LILY_AMQP_URL) does not parse")
	}
	url, tlsConfig, err := beneath(url, uri)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to the broker: %s", sanitize.Text(err.Error(), maxReason))
	}
	timeout := 30 * time.Second
	if uri.ConnectionTimeout > 0 {
		timeout = time.Duration(uri.ConnectionTimeout) * time.Millisecond
	}
	var filter *quarantine.Conn
	tcp := amqp.DefaultDial(timeout)
	cfg := amqp.Config{Properties: amqp.NewConnectionProperties(), FrameSize: frame.Size}
	cfg.Properties.SetClientConnectionName("lilydlq " + name)
	cfg.Dial = func(network, addr string) (net.Conn, error) {
		socket, err := tcp(network, addr)
		if err != nil {
			return nil, err
		}
		if tlsConfig != nil {
			tc := tls.Client(socket, tlsConfig)
			if err := tc.Handshake(); err != nil {
				_ = socket.Close()
				return nil, err
			}
			socket = tc
		}
		filter = quarantine.New(socket, frame.Size)
		filter.RepeatedNames()
		return filter, nil
	}
	conn, err := amqp.DialConfig(url, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to the broker: %s", sanitize.Text(err.Error(), maxReason))
	}
	return conn, filter, nil
}

// beneath turns an amqps URL into the amqp URL of the same broker and port,
// and the TLS configuration amqp091-go would have built from its parameters
// (cacertfile, certfile, keyfile, server_name_indication): the filter reads
// AMQP frames, so TLS must end beneath it, not above as amqp091-go would put
// it. runtime/internal/transport does the same for the runtime's consumers.
// Another URL comes back as it is.
func beneath(url string, uri amqp.URI) (string, *tls.Config, error) {
	if uri.Scheme != "amqps" {
		return url, nil, nil
	}
	cfg := &tls.Config{ServerName: cmp.Or(uri.ServerName, uri.Host), MinVersion: tls.VersionTLS12}
	if uri.CACertFile != "" {
		pem, err := os.ReadFile(uri.CACertFile)
		if err != nil {
			return "", nil, fmt.Errorf("read CA certificate: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		cfg.RootCAs.AppendCertsFromPEM(pem)
	}
	if uri.CertFile != "" && uri.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(uri.CertFile, uri.KeyFile)
		if err != nil {
			return "", nil, fmt.Errorf("load client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	u, err := neturl.Parse(url)
	if err != nil {
		return "", nil, errors.New("the URL does not parse")
	}
	u.Scheme = "amqp"
	u.Host = net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port))
	return u.String(), cfg, nil
}
