package faults

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/queue"
)

// Broker-side faults. They use rabbitmqctl (which needs the right to run it)
// and an AMQP connection of their own, never the consumer's.

// ConnectionName is the name Lily gives its connection for queue in role
// "consume" or "handoff", as rabbitmqctl and Frame.Conn show it.
func ConnectionName(queue, role string) string { return "lily " + queue + " " + role }

// Rabbitmqctl runs rabbitmqctl with args and returns what it printed.
func Rabbitmqctl(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "rabbitmqctl", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("rabbitmqctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

var connName = regexp.MustCompile(`\{"connection_name","([^"]*)"\}`)

// CloseConnections has the broker close every connection whose
// client-provided name satisfies match (rabbitmqctl close_connection), as an
// operator or a failing node would. It returns the names it closed.
func CloseConnections(ctx context.Context, match func(name string) bool, reason string) ([]string, error) {
	return CloseConnectionsVia(ctx, Rabbitmqctl, match, reason)
}

// CloseConnectionsVia is CloseConnections with rabbitmqctl run by ctl: on a
// cluster's node, say, which the machine's rabbitmqctl does not reach.
func CloseConnectionsVia(ctx context.Context, ctl func(context.Context, ...string) (string, error), match func(name string) bool, reason string) ([]string, error) {
	out, err := ctl(ctx, "list_connections", "-q", "--no-table-headers", "pid", "client_properties")
	if err != nil {
		return nil, err
	}
	var closed []string
	var errs []error
	for line := range strings.Lines(out) {
		pid, props, ok := strings.Cut(strings.TrimSpace(line), "\t")
		m := connName.FindStringSubmatch(props)
		if !ok || m == nil || !match(m[1]) {
			continue
		}
		if _, err := ctl(ctx, "close_connection", pid, reason); err != nil {
			errs = append(errs, err)
			continue
		}
		closed = append(closed, m[1])
	}
	return closed, errors.Join(errs...)
}

// DeleteIfEmpty deletes queue only while it holds no message (queue.delete
// with if-empty), so that a mandatory publish to it is returned as
// unroutable and nothing that was in it is lost. It reports whether it
// deleted the queue; a queue holding messages is left alone.
func DeleteIfEmpty(brokerURL, queue string) (deleted bool, err error) {
	err = OnChannel(brokerURL, func(ch *amqp.Channel) error {
		_, err := ch.QueueDelete(queue, false, true, false)
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed {
			return nil // not empty: the broker refused, on this channel only
		}
		deleted = err == nil
		return err
	})
	return deleted, err
}

// Restore declares d as the runtime does: after DeleteIfEmpty,
// it brings the queue back.
func Restore(brokerURL string, d queue.Declaration) error {
	return OnChannel(brokerURL, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(d.Name, true, false, false, false, d.Args)
		return err
	})
}

// plainQueue is a queue of that name without arguments, for setting messages aside.
func plainQueue(name string) queue.Declaration {
	return queue.Declaration{Name: name, Args: map[string]any{}}
}

// OnChannel runs f on a channel of a connection of its own, closed after.
func OnChannel(brokerURL string, f func(*amqp.Channel) error) error {
	return OnConnection(brokerURL, func(conn *amqp.Connection) error {
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		return f(ch)
	})
}

// OnConnection runs f on a connection of its own, closed after.
func OnConnection(brokerURL string, f func(*amqp.Connection) error) error {
	conn, err := amqp.Dial(brokerURL)
	if err != nil {
		return err
	}
	defer conn.Close()
	return f(conn)
}

// RejectPublishes makes queue refuse every publish, so that a publisher in
// confirm mode is nacked: a policy of max-length 0 with overflow
// reject-publish. A policy, because the consumer redeclares its queues with
// its own arguments on every reconnect, and arguments that differ would be
// refused (406); a policy changes nothing of the declaration.
//
// Applying max-length 0 dead-letters what the queue held, so the policy
// sends it to a queue set aside for the fault (<queue>.faults-aside). heal
// clears the policy, moves every message from aside back to queue (publish
// confirmed, then ACK) and deletes aside: after heal the queue holds what it
// held, plus what was published since.
func RejectPublishes(ctx context.Context, brokerURL, queue string) (heal func(context.Context) error, err error) {
	aside := queue + ".faults-aside"
	policy := "lily-faults-reject-" + queue
	if err := Restore(brokerURL, plainQueue(aside)); err != nil {
		return nil, err
	}
	def := fmt.Sprintf(`{"max-length":0,"overflow":"reject-publish","dead-letter-exchange":"","dead-letter-routing-key":%q}`, aside)
	if _, err := Rabbitmqctl(ctx, "set_policy", "--apply-to", "queues", "--priority", "900", policy, "^"+regexp.QuoteMeta(queue)+"$", def); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		if _, err := Rabbitmqctl(ctx, "clear_policy", policy); err != nil {
			return err
		}
		return Move(brokerURL, aside, queue, true)
	}, nil
}

// Move takes every message out of from and publishes it, unchanged, to to
// (confirmed before the original is ACKed: a crash in between duplicates, it
// never loses). With deleteFrom, from is deleted once empty. A publish not
// confirmed within 5 s ends the move with an error; the message stays in
// from (or, if its confirm was only late, is in both).
func Move(brokerURL, from, to string, deleteFrom bool) error {
	conn, err := amqp.Dial(brokerURL)
	if err != nil {
		return err
	}
	defer conn.Close()
	get, err := conn.Channel()
	if err != nil {
		return err
	}
	pub, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := pub.Confirm(false); err != nil {
		return err
	}
	for {
		d, ok, err := get.Get(from, false)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		dc, err := pub.PublishWithDeferredConfirm("", to, true, false, amqp.Publishing{
			Headers: d.Headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
			DeliveryMode: d.DeliveryMode, Priority: d.Priority, CorrelationId: d.CorrelationId,
			ReplyTo: d.ReplyTo, MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type,
			AppId: d.AppId, Body: d.Body,
		})
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		acked, err := dc.WaitContext(ctx)
		cancel()
		switch {
		case err != nil:
			return fmt.Errorf("faults: moving %s to %s: no confirm in 5s (it stays in %s)", d.MessageId, to, from)
		case !acked:
			return fmt.Errorf("faults: moving %s to %s: the broker refused the publish (it stays in %s)", d.MessageId, to, from)
		}
		if err := d.Ack(false); err != nil {
			return err
		}
	}
	if deleteFrom {
		_, err = get.QueueDelete(from, false, true, false)
	}
	return err
}

// RestartBroker stops the RabbitMQ application, waits down, and starts it
// again (rabbitmqctl stop_app, start_app, await_startup). Every connection
// to the broker is closed, every client's: only for a broker no other test
// is using at the time (the soak command offers it; `go test ./...` never
// does). Durable queues and persistent messages survive it.
func RestartBroker(ctx context.Context, down time.Duration) error {
	if _, err := Rabbitmqctl(ctx, "stop_app"); err != nil {
		return err
	}
	t := time.NewTimer(down)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	// Started even when ctx ended: a broker left stopped would fail everyone.
	start := context.WithoutCancel(ctx)
	if _, err := Rabbitmqctl(start, "start_app"); err != nil {
		return err
	}
	_, err := Rabbitmqctl(start, "await_startup")
	return err
}

// ErrNotEmpty: Unroute could not catch the queue empty.
var ErrNotEmpty = errors.New("faults: the queue kept receiving messages; it was not deleted")

// Unroute deletes queue d so that a mandatory publish to it is returned as
// unroutable, without losing what it held: the messages are moved to
// <queue>.faults-aside, and the queue is deleted only while empty (if-empty),
// tried up to tries times while publishes keep arriving. heal declares d again
// and moves the messages back (a message's time in the queue, and so a
// retry bucket's TTL, starts again). When the queue cannot be caught empty,
// Unroute moves the messages back itself and returns ErrNotEmpty.
//
// A publish racing the delete is lost: RabbitMQ confirms (ack) a message
// routed to a queue that is then deleted before it enqueued it. To keep the
// fault loss-free, hold the publishers back around the call (Proxy.Stall
// ToBroker, and a pause for what is already on its way).
func Unroute(brokerURL string, d queue.Declaration, tries int) (heal func() error, err error) {
	aside := d.Name + ".faults-aside"
	if err := Restore(brokerURL, plainQueue(aside)); err != nil {
		return nil, err
	}
	heal = func() error {
		if err := Restore(brokerURL, d); err != nil {
			return err
		}
		return Move(brokerURL, aside, d.Name, true)
	}
	for range tries {
		if err := Move(brokerURL, d.Name, aside, false); err != nil {
			return nil, errors.Join(err, heal())
		}
		gone, err := DeleteIfEmpty(brokerURL, d.Name)
		if err != nil {
			return nil, errors.Join(err, heal())
		}
		if gone {
			return heal, nil
		}
	}
	return nil, errors.Join(ErrNotEmpty, heal())
}
