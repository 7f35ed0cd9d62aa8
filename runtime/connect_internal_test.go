package runtime

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// No error says a URL's password.
func TestURLErrorsHidePasswords(t *testing.T) {
	if got := redact("amqp://app:s3cret@node-1:5672/billing"); got != "amqp://app@node-1:5672/billing" || strings.Contains(got, "s3cret") {
		t.Errorf("redact = %q", got)
	}
	for _, u := range []string{"amqp://app:s3cret@node 1:5672/", "amqp://app:s3cr/et@node-1/", "amqp://app:s3c#ret@node-1/", "amqp://app:%zzs3cret@node-1/"} {
		err := Config{URLs: []string{u}}.validateURLs()
		if err == nil || strings.Contains(err.Error(), "s3c") {
			t.Errorf("validateURLs(%q) = %v", u, err)
		}
	}
}

// What the first connection and a reconnect make of connect's joined
// errors is the last attempt's: a node passed over before (its connection
// forced closed in a rolling restart) does not hide the 404 of a queue
// whose node is down, nor a refusal.
func TestLastAttemptDecides(t *testing.T) {
	forced := fmt.Errorf("lily: declare: %w", &amqp.Error{Code: amqp.ConnectionForced, Reason: "CONNECTION_FORCED - shutdown", Server: true})
	down := fmt.Errorf("lily: declare queue q: %w", &amqp.Error{Code: amqp.NotFound, Reason: "NOT_FOUND - home node 'rabbit@b' of durable queue 'q' in vhost '/' is down or inaccessible", Server: true, Recover: true})
	mismatch := fmt.Errorf("lily: declare queue q: %w", &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - inequivalent arg", Server: true, Recover: true})
	if !unavailable(lastAttempt(errors.Join(forced, down))) || unavailable(lastAttempt(errors.Join(down, forced))) {
		t.Error("the 404 of a node down, after another node's 320, is not taken for the queue out of reach")
	}
	if !refused(lastAttempt(errors.Join(forced, mismatch))) {
		t.Error("a 406 after another node's 320 is not taken for a refusal")
	}
	if !unavailable(lastAttempt(down)) {
		t.Error("a lone 404 of a node down")
	}
}

// A node left for its silence moves the next dial on by one URL, once
// however often its connection is abandoned; a node another dial has
// answered from since is not moved off.
func TestLeaveMovesOnlyFromTheSilentNode(t *testing.T) {
	d := &dialer{cfg: Config{URLs: []string{"amqp://a/", "amqp://b/", "amqp://c/"}}}
	d.leave(0)
	d.leave(0)
	if n := d.node.Load(); n != 1 {
		t.Errorf("after node 0 went silent: node %d, want 1", n)
	}
	d.node.Store(2) // a dial answered from node 2 since
	d.leave(1)
	if n := d.node.Load(); n != 2 {
		t.Errorf("after node 1 went silent, node 2 having answered since: node %d, want 2", n)
	}
	d.leave(2)
	if n := d.node.Load(); n != 0 {
		t.Errorf("after node 2 went silent: node %d, want 0", n)
	}
	one := &dialer{cfg: Config{URLs: []string{"amqp://a/"}}}
	one.leave(0)
	if n := one.node.Load(); n != 0 {
		t.Errorf("a single URL left: node %d, want 0", n)
	}
}
