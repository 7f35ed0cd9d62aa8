package runtime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime/internal/decide"
	"github.com/lily-mq/lily/runtime/internal/step"
	"github.com/lily-mq/lily/runtime/internal/transport"
)

// validateURLs checks that every URL parses and that a TLS configuration has
// an amqps:// URL to apply to.
func (c Config) validateURLs() error {
	var errs []error
	for i, u := range c.withDefaults().URLs {
		uri, err := amqp.ParseURI(u)
		switch {
		case err != nil:
			// The parser's errors quote the URL, or the part of it they
			// stumbled on, which may be the password.
			errs = append(errs, fmt.Errorf("broker URL %d is not an amqp:// or amqps:// URL (percent-encode any / ? # @ or %% in its user name and password)", i+1))
		case c.TLS != nil && uri.Scheme != "amqps":
			errs = append(errs, fmt.Errorf("broker URL %q is not amqps://, so Config.TLS would not apply to it", redact(u)))
		}
	}
	return errors.Join(errs...)
}

// redact is a URL as errors may say it: without its password.
func redact(u string) string {
	uri, err := amqp.ParseURI(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return uri.Scheme + "://" + uri.Username + "@" + net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port)) + "/" + url.PathEscape(uri.Vhost)
}

// dialer opens connections to the broker for one consumer or publisher:
// each URL in turn, from the one that last answered.
type dialer struct {
	cfg Config // with defaults
	// name is what the broker's connection list shows for it.
	name string
	// node is the index in cfg.URLs of the URL a connection attempt tries
	// first: the last that answered, or the one after it when a connection
	// on that node was passed over or left.
	node atomic.Int32
}

// errCredentialsTimeout: Config.Credentials did not return within a step.
var errCredentialsTimeout = errors.New("not returned within the step timeout")

// dial opens one connection, for role "consume", "handoff" or "publish",
// and returns its socket too, and the index in cfg.URLs of its node. filter,
// when not nil, is what the client reads the socket through. It says why
// each URL failed. ctx ending stops it: Credentials' ctx ends, a socket
// being dialed is given up and no further URL is tried; an AMQP handshake
// under way goes on, within its step.
func (d *dialer) dial(ctx context.Context, role string, filter func(conn, socket net.Conn) net.Conn) (*amqp.Connection, net.Conn, int, error) {
	cfg := amqp.Config{
		Properties: amqp.Table{"connection_name": "lily " + d.name + " " + role},
		Dial: func(network, addr string) (net.Conn, error) {
			// As amqp.DefaultDial, but given up at ctx's end too.
			dctx, cancel := context.WithTimeout(ctx, d.cfg.StepTimeout)
			defer cancel()
			conn, err := (&net.Dialer{}).DialContext(dctx, network, addr)
			if err != nil {
				return nil, err
			}
			// The handshake's bound; the client clears it once open.
			if err := conn.SetDeadline(time.Now().Add(d.cfg.StepTimeout)); err != nil {
				_ = conn.Close()
				return nil, err
			}
			return conn, nil
		},
		FrameSize:       frameSize,
		TLSClientConfig: d.cfg.TLS,
	}
	if d.cfg.Credentials != nil {
		ctx, cancel := context.WithTimeout(ctx, d.cfg.StepTimeout)
		// Bounded here too: a function that ignores ctx must not hold the
		// attempt, and every Send waiting for a shared connection, for good.
		auth, err := step.Do(ctx, func() (*amqp.PlainAuth, error) {
			// A panic on its goroutine would end the process, every queue
			// in it: it fails this attempt instead.
			var user, password string
			var err error
			if p := recovered(func() { user, password, err = d.cfg.Credentials(ctx) }); p != nil {
				return nil, fmt.Errorf("panic: %s", sanitize.Text(fmt.Sprint(p), decide.MaxCause))
			}
			return &amqp.PlainAuth{Username: user, Password: password}, err
		})
		cancel()
		if errors.Is(err, step.ErrTimeout) {
			err = step.Described(err, errCredentialsTimeout)
		}
		if err != nil {
			return nil, nil, 0, fmt.Errorf("lily: connect (%s): credentials: %w", role, err)
		}
		cfg.SASL = []amqp.Authentication{auth}
	}
	urls := d.cfg.URLs
	first := int(d.node.Load())
	var errs []error
	for i := range urls {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		n := (first + i) % len(urls)
		conn, socket, err := transport.Dial(urls[n], cfg, filter)
		if err == nil {
			d.node.Store(int32(n))
			return conn, socket, n, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", redact(urls[n]), err))
	}
	return nil, nil, 0, fmt.Errorf("lily: connect (%s): %w", role, errors.Join(errs...))
}

// leave moves the next attempt on from node n, which took a connection and
// then could not serve it (links.passOver) or left it unanswered: the next
// dial tries it last. A dial that has answered from another node since, or
// another connection's leave, has moved on already, and stays: moving on
// from wherever the dialer stands would send the next dial back to n, or
// past a node not tried. Only the next dial is moved: a connection open on
// any node stays where it is.
func (d *dialer) leave(n int) {
	if len(d.cfg.URLs) > 1 {
		d.node.CompareAndSwap(int32(n), int32((n+1)%len(d.cfg.URLs)))
	}
}

// publishing opens a connection to publish on, for role "handoff" or
// "publish": its writes coalesced, so that publishes in flight together share
// system calls (each still bounded by the step timeout). silent leaves its
// node, for a connection abandoned because the broker left it unanswered.
func (d *dialer) publishing(role string) (conn *amqp.Connection, socket net.Conn, silent func(), err error) {
	conn, socket, n, err := d.dial(context.Background(), role, func(conn, socket net.Conn) net.Conn { return transport.Coalesce(conn, socket, d.cfg.StepTimeout) })
	return conn, socket, func() { d.leave(n) }, err
}
