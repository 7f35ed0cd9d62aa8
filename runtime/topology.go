package runtime

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/topology"
)

// DeclareTopology declares q's topology on conn, as the consumer does when it
// connects: its exchanges, then its DLQ, retry buckets and main queue, all
// durable and of q's type (an external main queue is checked first), then its
// bindings. Lily's own queues are routed through the default exchange by queue
// name. An owned exchange or queue that exists with other arguments is refused
// by the broker (406), which DeclareTopology returns, as it returns the 404 of
// an external exchange or queue that does not exist. A DLQ that exists keeps
// its own type, classic or quorum (a DLQ shared by a classic and a quorum queue
// is of whichever declared it first), and a quorum DLQ its own "no delivery
// limit" (written by the broker's version); any other argument or value of its
// own (a delivery limit, a stream) is refused so. Names and routes NewConsumer
// would refuse (a name over 255 bytes, which would close conn, a binding of
// Lily's into an external exchange) are refused before anything is declared.
func DeclareTopology(conn *amqp.Connection, q QueueSpec) error {
	if err := q.names(); err != nil {
		return err
	}
	d := declarer{conn: conn}
	return d.topology(q)
}

// topology declares q's topology on d's connection, as DeclareTopology
// does. Unless d.goOn is set, the first failure stops it and is returned.
// With goOn, a failure it takes stops only the declare refused: as when a
// consuming session declares its topology again (drift.go), each refusal (a
// 406, a 403, the 404 of something external that does not exist, or of a
// bind), or as when a session opens after the run has consumed
// (Consumer.open), an external exchange found missing alone. It is added to
// d.refusals, and the rest is declared, on a new channel when the refusal
// closed the one in use, so that one exchange deleted by its owner or one
// queue declared with other arguments keeps no other binding from coming
// back. A binding from or into an external exchange, or to an external
// queue, found not to exist is not sent: its 404 would only say so again. Any other failure (no
// answer, the connection ending, a classic queue's node down) stops it and
// is returned. Each channel after the first follows a refusal that closed
// the one before, so a declare opens at most one more channel than the
// broker refused declares (a DLQ's that yield on its type or limit,
// dlqdeclare.go, count among them).
func (d *declarer) topology(q QueueSpec) error {
	if err := d.open(); err != nil {
		return err
	}
	defer func() { _ = d.ch.Close() }()
	t := q.topology(brokerMajor(d.conn))
	// gone are the external exchanges whose passive check found they do
	// not exist; queueGone says it of an external queue.
	gone := map[string]bool{}
	queueGone := false
	for _, x := range t.Exchanges {
		if err := d.exchange(x); err != nil {
			err = fmt.Errorf("declare exchange %s: %w", x.Name, missing(x.External, err))
			if errors.Is(err, errExternalMissing) {
				err = exchangeMissing{err}
			}
			if err := d.stopAt(err); err != nil {
				return err
			}
			// No binding from an external exchange found missing is sent:
			// its 404 would only say so again. One of Lily's own refused
			// (a 403 once the permission to configure it is taken away)
			// may still exist: its bindings are sent, and the 404 of one
			// whose exchange is gone is told as a refusal (unbound).
			if errors.Is(err, errExternalMissing) {
				gone[x.Name] = true
			}
		}
	}
	for _, decl := range queue.Declarations(t) {
		if err := d.queue(decl); err != nil {
			err = fmt.Errorf("declare queue %s: %w", decl.Name, missing(decl.Passive, err))
			if !decl.Passive && !decl.KeepTypeAndLimit && isCode(err, amqp.PreconditionFailed) {
				err = inequivalentQueue{err}
			}
			if err := d.stopAt(err); err != nil {
				return err
			}
			if decl.Name == q.Name && errors.Is(err, errExternalMissing) {
				queueGone = true
			}
		}
	}
	for _, b := range t.Bindings {
		if b.External {
			continue // AMQP has no passive bind: another team's binding is trusted
		}
		if gone[b.Source] || gone[b.Exchange] || b.Exchange == "" && queueGone {
			continue
		}
		if err := d.bind(q.Name, b); err != nil {
			err = fmt.Errorf("bind %s to exchange %s: %w", destination(q.Name, b), b.Source, err)
			if isCode(err, amqp.NotFound) && !strings.Contains(err.Error(), "down or inaccessible") {
				err = unbound{err}
			}
			if err := d.stopAt(err); err != nil {
				return err
			}
		}
	}
	return nil
}

// errExternalMissing marks the 404 of an external exchange or queue: its
// owner has not declared it, and no retry of ours can. Other 404s during a
// declare (a classic queue whose node is down) pass.
var errExternalMissing = errors.New("an external exchange or queue does not exist")

// exchangeMissing is the errExternalMissing of an external exchange, told
// apart from an external queue's; its text is the error's own.
type exchangeMissing struct{ error }

func (e exchangeMissing) Unwrap() error { return e.error }

// exchangeGone reports whether err is the 404 of the passive check of an
// external exchange that does not exist: its owner deleted it, and only
// what it would route to the queue is missing meanwhile. A session that
// opens after the run has consumed goes on past it (Consumer.open).
func exchangeGone(err error) bool { return errors.As(err, new(exchangeMissing)) }

// inequivalentQueue is the 406 of a queue of Lily's own, its main queue or a
// retry bucket, that exists with other arguments. RabbitMQ names only the
// first argument that differs, so mending that one may only bring the next
// 406: its text says to compare them all. (The DLQ's says what it keeps,
// dlqdeclare.go.)
type inequivalentQueue struct{ error }

func (e inequivalentQueue) Error() string {
	return e.error.Error() + "; RabbitMQ names only the first argument that differs: compare them all," +
		" the type included (rabbitmqctl list_queues name type arguments)"
}

func (e inequivalentQueue) Unwrap() error { return e.error }

// unbound is the 404 of a bind: what it binds does not exist (deleted
// since it was declared, or its declare refused). Declared again while
// consuming, the topology goes on past it as past a refusal
// (pastRefusals); its text is the error's own.
type unbound struct{ error }

func (e unbound) Unwrap() error { return e.error }

// missing marks err as errExternalMissing when it is the 404 of the passive
// check of something external that does not exist. RabbitMQ answers a
// durable classic queue whose home node is down with a 404 as well ("home
// node ... is down or inaccessible"); that one passes, to be tried again
// once the node is back.
func missing(external bool, err error) error {
	var ae *amqp.Error
	if external && errors.As(err, &ae) && ae.Code == amqp.NotFound && !strings.Contains(ae.Reason, "down or inaccessible") {
		return fmt.Errorf("%w: %w", errExternalMissing, err)
	}
	return err
}

// declarer declares on one channel, opening another after a 404 or a 406
// closed it.
type declarer struct {
	conn *amqp.Connection
	ch   *amqp.Channel
	// goOn says which failures the declare goes on past (refused, or
	// exchangeGone), each noted in refusals; nil: none.
	goOn     func(error) bool
	refusals []error
	// opened counts the channels opened.
	opened int
}

func (d *declarer) open() error {
	ch, err := d.conn.Channel()
	if err != nil {
		return fmt.Errorf("open a channel to declare on: %w", err)
	}
	d.ch = ch
	d.opened++
	return nil
}

// stopAt returns err, a failed declare, when the declare stops at it; or,
// when d goes on past err, nil, having noted it and opened a new channel in
// place of the one it closed.
func (d *declarer) stopAt(err error) error {
	if d.goOn == nil || !d.goOn(err) {
		return err
	}
	d.refusals = append(d.refusals, err)
	if d.ch.IsClosed() {
		// amqp091 marks the channel closed as it reads the broker's
		// channel.close, before it hands the call its error.
		return d.open()
	}
	return nil
}

func (d *declarer) exchange(x topology.Exchange) error {
	if x.External {
		return d.ch.ExchangeDeclarePassive(x.Name, x.Type, x.Durable, false, x.Internal, false, nil)
	}
	var args amqp.Table
	if x.AlternateExchange != "" {
		args = amqp.Table{"alternate-exchange": x.AlternateExchange}
	}
	return d.ch.ExchangeDeclare(x.Name, x.Type, x.Durable, false, x.Internal, false, args)
}

func (d *declarer) queue(decl queue.Declaration) error {
	if decl.Passive {
		_, err := d.ch.QueueDeclarePassive(decl.Name, true, false, false, false, nil)
		return err
	}
	if decl.KeepTypeAndLimit {
		return d.deadLetterQueue(decl)
	}
	_, err := d.ch.QueueDeclare(decl.Name, true, false, false, false, decl.Args)
	return err
}

// exists reports whether the queue name exists, by a passive declare. Its
// 404 closes the channel, so another is opened.
func (d *declarer) exists(name string) (bool, error) {
	_, err := d.ch.QueueDeclarePassive(name, true, false, false, false, nil)
	if !isCode(err, amqp.NotFound) {
		return err == nil, err
	}
	return false, d.open()
}

// isCode reports whether err is the broker's refusal with code.
func isCode(err error, code int) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == code
}

func (d *declarer) bind(queueName string, b topology.Binding) error {
	if b.Exchange != "" {
		return d.ch.ExchangeBind(b.Exchange, b.RoutingKey, b.Source, false, b.Arguments)
	}
	return d.ch.QueueBind(queueName, b.RoutingKey, b.Source, false, b.Arguments)
}

// destination names where b routes to, for errors.
func destination(queueName string, b topology.Binding) string {
	if b.Exchange != "" {
		return "exchange " + b.Exchange
	}
	return "queue " + queueName
}

// validateRoutes checks that t's exchanges and bindings can be declared:
// known exchange types, and bindings between exchanges t names, none of
// them Lily's own into an external exchange, which Lily only checks.
func validateRoutes(queueName string, t topology.Queue) error {
	var errs []error
	names := map[string]bool{}
	external := map[string]bool{}
	for _, x := range t.Exchanges {
		switch {
		case x.Name == "" || strings.HasPrefix(x.Name, "amq.") && !x.External:
			errs = append(errs, fmt.Errorf("queue %s: exchange %q cannot be declared: the default exchange and amq.* belong to the broker", queueName, x.Name))
		case !isName(x.Name):
			errs = append(errs, fmt.Errorf("queue %s: exchange name %q is longer than 255 bytes or holds control characters", queueName, x.Name))
		}
		if x.AlternateExchange != "" && !isName(x.AlternateExchange) {
			errs = append(errs, fmt.Errorf("queue %s: exchange %s: alternate exchange %q is longer than 255 bytes or holds control characters", queueName, x.Name, x.AlternateExchange))
		}
		if !slices.Contains([]string{topology.Direct, topology.Topic, topology.Fanout, topology.Headers}, x.Type) {
			errs = append(errs, fmt.Errorf("queue %s: exchange %s has unknown type %q", queueName, x.Name, x.Type))
		}
		names[x.Name] = true
		external[x.Name] = x.External
	}
	for _, b := range t.Bindings {
		if !names[b.Source] || b.Exchange != "" && !names[b.Exchange] {
			errs = append(errs, fmt.Errorf("queue %s: a binding from %q to %s names an exchange the topology does not list", queueName, b.Source, destination(queueName, b)))
		}
		// The empty key is a fanout's or a headers binding's, and a direct
		// or topic exchange's own key like any other.
		if len(b.RoutingKey) > maxShortstr || strings.ContainsFunc(b.RoutingKey, isControl) {
			errs = append(errs, fmt.Errorf("queue %s: a binding from %q has a routing key %q longer than 255 bytes or holding control characters", queueName, b.Source, b.RoutingKey))
		}
		if k, ok := longKey(b.Arguments); ok {
			errs = append(errs, fmt.Errorf("queue %s: a binding from %q has an argument %q longer than 255 bytes", queueName, b.Source, k))
		}
		if b.Exchange != "" && external[b.Exchange] && !b.External {
			errs = append(errs, fmt.Errorf("queue %s: the binding from %q into external exchange %s is Lily's own: Lily never declares into another team's exchange (mark the binding External)", queueName, b.Source, b.Exchange))
		}
	}
	return errors.Join(errs...)
}

// brokerMajor reads the broker's major version from the properties it sent
// when the connection opened ("3.10.8" → 3). A broker that does not say is
// taken for one older than 4, which never reads -1 as "no delivery limit":
// declared there, it would dead-letter at the first return.
func brokerMajor(conn *amqp.Connection) int {
	v, _ := conn.Properties["version"].(string)
	major, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(major)
	if err != nil {
		return 3
	}
	return n
}
