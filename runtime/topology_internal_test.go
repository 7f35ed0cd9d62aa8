package runtime

import (
	"errors"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Only the 404 of something external that does not exist is a refusal,
// which waits for its owner. A durable classic queue whose home node is
// down answers a passive check with a 404 too, for as long as the node is
// away: that is a lost connection, not a refusal.
func TestMissingIsOnlyTheExternalObjectsAbsence(t *testing.T) {
	gone := &amqp.Error{Code: amqp.NotFound, Reason: "NOT_FOUND - no queue 'legacy' in vhost '/'"}
	away := &amqp.Error{Code: amqp.NotFound, Reason: "NOT_FOUND - home node 'rabbit@node-2' of durable queue 'legacy' in vhost '/' is down or inaccessible"}
	for _, c := range []struct {
		name     string
		external bool
		err      error
		refused  bool
	}{
		{"an external queue that does not exist", true, gone, true},
		{"an external queue whose node is down", true, away, false},
		{"an owned queue whose node is down", false, away, false},
		{"an owned queue's 404", false, gone, false},
	} {
		if got := refused(missing(c.external, c.err)); got != c.refused {
			t.Errorf("%s: refused = %t, want %t", c.name, got, c.refused)
		}
		if !errors.Is(missing(c.external, c.err), c.err) {
			t.Errorf("%s: the broker's error is lost", c.name)
		}
	}
}
