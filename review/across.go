package review

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/schema"
	"github.com/lily-mq/lily/schema/rules"
	"github.com/lily-mq/lily/topology"
)

// Revision is one schema of a run, as the older revision had it and as it
// is now. A schema new since has an Old that holds nothing, and one gone
// since a New that holds nothing, each with the other's Package and Output.
type Revision struct{ Old, New *schema.File }

// Move is a queue, exchange or message (Kind) that one schema of a run held
// in the older revision and another holds now: From and To are the Names of
// the two files. Name is a queue's or exchange's name, a message's Go name
// in From; a message is followed by its wire type.
type Move struct{ Kind, Name, From, To string }

func (m Move) String() string {
	what := fmt.Sprintf("%s %q", m.Kind, m.Name)
	if m.Kind == "message" {
		what = "message " + m.Name
	}
	return fmt.Sprintf("%s moved from %s to %s", what, m.From, m.To)
}

// BreakingAcross lists the breaking changes of the schemas of a run, each
// compared with its older revision as Breaking does, and what moved from
// one schema to another. A queue or exchange that a schema no longer
// holds, and another newly does under its name, is compared with what it
// was, and so is a message by its wire type; each of its findings says
// where it moved from (Note), and a move that changes nothing is no
// finding. Removing it would otherwise be reported, and what changed as it
// moved not at all.
func BreakingAcross(revs []Revision) ([]Finding, []Move) {
	r := newRun(revs)
	var found []Finding
	for i := range revs {
		found = append(found, r.breaker(i).compare()...)
	}
	return found, r.moves
}

// run is the revisions of a run's schemas, and what moved between them.
type run struct {
	revs []Revision
	// moved holds, for each entity of an older revision that moved, the
	// index of the revision whose new file holds it now; arrived the
	// messages of the new files that came so, and arrivals, by revision,
	// what came to its new file.
	moved    map[entity]int
	arrived  map[*schema.Message]bool
	arrivals map[int][]entity
	moves    []Move
	// holders lists, by kind and name, the revisions whose old or new file
	// holds each queue and exchange, in the run's order.
	holders map[[2]string][]int
	// newFrom is the bindings of each new file by where they go and the
	// exchange they come from, gathered when first asked for.
	newFrom map[int]map[[3]string][]route
}

// entity is a queue, exchange or message (by Go name) of the older
// revision of revs[at].
type entity struct {
	at         int
	kind, name string
}

func newRun(revs []Revision) *run {
	r := &run{revs: revs, moved: map[entity]int{}, arrived: map[*schema.Message]bool{}, arrivals: map[int][]entity{}, newFrom: map[int]map[[3]string][]route{}, holders: map[[2]string][]int{}}
	// The first new file of the run that holds each, and the wire types
	// each file has: searching every file for each would take time of the
	// square of their number.
	queues, exchanges, messages := map[string]int{}, map[string]int{}, map[string]int{}
	oldTypes, newTypes := make([]map[string]bool, len(revs)), make([]map[string]bool, len(revs))
	hold := func(kind, name string, i int) {
		k := [2]string{kind, name}
		if at := r.holders[k]; len(at) == 0 || at[len(at)-1] != i {
			r.holders[k] = append(at, i)
		}
	}
	for i, rv := range revs {
		for _, f := range []*schema.File{rv.Old, rv.New} {
			for _, q := range f.Queues {
				hold("queue", q.Name, i)
			}
			for _, x := range f.Exchanges {
				hold("exchange", x.Name, i)
			}
		}
		oldTypes[i], newTypes[i] = map[string]bool{}, map[string]bool{}
		for _, m := range rv.Old.Messages {
			oldTypes[i][m.Type] = true
		}
		for _, m := range rv.New.Messages {
			newTypes[i][m.Type] = true
			if _, ok := messages[m.Type]; !ok {
				messages[m.Type] = i
			}
		}
		for _, q := range rv.New.Queues {
			if _, ok := queues[q.Name]; !ok {
				queues[q.Name] = i
			}
		}
		for _, x := range rv.New.Exchanges {
			if _, ok := exchanges[x.Name]; !ok {
				exchanges[x.Name] = i
			}
		}
	}
	// Moved: gone from its own file, and new in another's, which did not
	// hold it before (one that did holds its own, and a queue that two
	// schemas held and one keeps was not moved).
	for i, rv := range revs {
		for _, oq := range rv.Old.Queues {
			if j, ok := queues[oq.Name]; ok && rv.New.Queue(oq.Name) == nil && revs[j].Old.Queue(oq.Name) == nil {
				r.move(entity{i, "queue", oq.Name}, j)
			}
		}
		for _, ox := range rv.Old.Exchanges {
			if j, ok := exchanges[ox.Name]; ok && rv.New.Exchange(ox.Name) == nil && revs[j].Old.Exchange(ox.Name) == nil {
				r.move(entity{i, "exchange", ox.Name}, j)
			}
		}
		for _, om := range rv.Old.Messages {
			if j, ok := messages[om.Type]; ok && !newTypes[i][om.Type] && rv.New.Message(om.Name) == nil && !oldTypes[j][om.Type] {
				r.move(entity{i, "message", om.Name}, j)
				r.arrived[ofTypeIn(revs[j].New, om.Type)] = true
			}
		}
	}
	return r
}

func (r *run) move(e entity, to int) {
	r.moved[e] = to
	r.arrivals[to] = append(r.arrivals[to], e)
	r.moves = append(r.moves, Move{Kind: e.kind, Name: e.name, From: r.revs[e.at].Old.Name, To: r.revs[to].New.Name})
}

// breaker compares the revisions of revs[i].
func (r *run) breaker(i int) *breaker {
	old, new := r.revs[i].Old, r.revs[i].New
	b := &breaker{old: old, new: new, top: schema.Pos{File: new.Name, Line: 1, Column: 1}, types: map[string]*schema.Field{}, run: r, at: i}
	for _, nm := range new.Messages {
		// One that came from another file is compared there.
		if old.Message(nm.Name) == nil && !r.arrived[nm] {
			b.added = append(b.added, nm)
		}
	}
	for _, t := range new.Types {
		b.types[t.Named] = t
	}
	return b
}

// moved is a breaker of what moved from b.old, the queue, exchange or
// message (kind) of name, to the new file that holds it now; nil when it
// did not move.
func (b *breaker) moved(kind, name string) *breaker {
	e := entity{b.at, kind, name}
	j, ok := b.run.moved[e]
	if !ok {
		return nil
	}
	s := b.run.breaker(j)
	s.old = b.old
	s.note = Move{Kind: kind, Name: name, From: b.old.Name, To: s.new.Name}.String()
	return s
}

// adopt takes what s, a breaker of what moved, found.
func (b *breaker) adopt(s *breaker) { b.out = append(b.out, s.out...) }

// newRoutes is the bindings of b.new by where they go and the exchange
// they come from.
func (b *breaker) newRoutes() map[[3]string][]route {
	from, ok := b.run.newFrom[b.at]
	if !ok {
		from = bySource(routes(b.new))
		b.run.newFrom[b.at] = from
	}
	return from
}

// arrivedRoutes lists the bindings of the older revisions to the queues
// and exchanges that came to b.new from other files.
func (b *breaker) arrivedRoutes() []route {
	var out []route
	for _, e := range b.run.arrivals[b.at] {
		for _, r := range routes(b.run.revs[e.at].Old) {
			if r.kind == e.kind && r.name == e.name {
				out = append(out, r)
			}
		}
	}
	return out
}

// ofTypeIn is the message of f of wire type t, nil when it has none.
func ofTypeIn(f *schema.File, t string) *schema.Message {
	if i := slices.IndexFunc(f.Messages, ofType(t)); i >= 0 {
		return f.Messages[i]
	}
	return nil
}

// alongside compares each queue and owned exchange new to b.new with the one
// of its name another schema of the run holds. Neither is older than the
// other, but both are declared: RabbitMQ refuses whichever comes second if
// they differ, and the consumers of both schemas share a queue's
// deliveries.
func (b *breaker) alongside() {
	for _, nq := range b.new.Queues {
		if b.old.Queue(nq.Name) == nil {
			for _, f := range b.others("queue", nq.Name) {
				b.sharedQueue(nq, f, f.Queue(nq.Name))
			}
		}
	}
	for _, nx := range b.new.Exchanges {
		if !nx.External && b.old.Exchange(nx.Name) == nil {
			for _, f := range b.others("exchange", nx.Name) {
				b.sharedExchange(nx, f, f.Exchange(nx.Name))
			}
		}
	}
}

// others lists the files of the other schemas of the run that hold the
// queue or exchange (kind) of name, new to b.new: each one's new revision,
// or its old one, live until deployed, when only that holds it. What moved
// is compared where it is now, with what it was. Of two schemas it is new
// to, the later one compares them.
func (b *breaker) others(kind, name string) []*schema.File {
	var out []*schema.File
	for _, k := range b.run.holders[[2]string{kind, name}] {
		rv := b.run.revs[k]
		if _, moved := b.run.moved[entity{k, kind, name}]; k == b.at || moved {
			continue
		}
		switch {
		case !holds(rv.New, kind, name):
			out = append(out, rv.Old)
		case holds(rv.Old, kind, name) || k < b.at:
			out = append(out, rv.New)
		}
	}
	return out
}

// sharedQueue compares nq, new to b.new, with oq, the queue of its name f
// holds: their declarations, as lilygen topology does, and what they
// consume.
func (b *breaker) sharedQueue(nq *schema.Queue, f *schema.File, oq *schema.Queue) {
	w := definer{vhost: "/", brokerMajor: 4, seen: map[string]int{}}
	_ = w.queue(oq.Name, queue.Topology{Name: oq.Name, Queue: oq.Topology(), BrokerMajor: 4})
	if err := w.queue(nq.Name, queue.Topology{Name: nq.Name, Queue: nq.Topology(), BrokerMajor: 4}); err != nil {
		b.add(rules.DeclaredDifferently, subjectOf("queue", nq.Name), nq.Pos,
			fmt.Sprintf("queue %q is new here, and %s declares it too, differently (%s): RabbitMQ refuses whichever declaration comes second (406)", nq.Name, f.Name, strings.ReplaceAll(err.Error(), "\n", "; ")),
			"declare it as the other schema does (lilygen topology, given both schemas, compares them), or consume a queue under a new name")
	}
	// By wire type and version, as VERSION-UNCONSUMED: what each dispatches.
	var differ []string
	for _, q := range []*schema.Queue{nq, oq} {
		other, where := oq, "here"
		if q == oq {
			other, where = nq, "there"
		}
		for _, c := range q.Consumes {
			for _, v := range c.Versions {
				if !consumes(other, ofType(c.Message.Type), v.Number) {
					differ = append(differ, fmt.Sprintf("%s version %d only %s", c.Message.Name, v.Number, where))
				}
			}
		}
	}
	for _, nc := range nq.Consumes {
		i := slices.IndexFunc(oq.Consumes, func(oc schema.Consume) bool { return oc.Message.Type == nc.Message.Type })
		if oc := oq.Consumes; i >= 0 && !sameReading(oc[i].Envelope.Profile, nc.Envelope.Profile) {
			differ = append(differ, fmt.Sprintf("%s by envelope %s here, %s there", nc.Message.Name, nc.Envelope.Name, oc[i].Envelope.Name))
		}
	}
	if len(differ) > 0 {
		b.add(rules.QueueShared, subjectOf("queue", nq.Name), nq.Pos,
			fmt.Sprintf("queue %q is new here, and %s consumes it too, differently (%s): each consumer takes deliveries meant for the other's, fails them at dispatch and sends them to the DLQ", nq.Name, f.Name, listed(differ, 0)),
			"consume a queue under a new name, or the same messages, versions and envelopes as the other schema")
	}
}

// sharedExchange compares nx, an owned exchange new to b.new, with ox, the
// exchange of its name f holds: as lilygen topology does when f owns it
// too, else by the type f says its owner declares.
func (b *breaker) sharedExchange(nx *schema.Exchange, f *schema.File, ox *schema.Exchange) {
	var differ string
	if ox.External {
		if ox.Type != nx.Type {
			differ = fmt.Sprintf("as its owner's, of type %s, not %s", ox.Type, nx.Type)
		}
	} else {
		w := definer{vhost: "/", seen: map[string]int{}}
		_ = w.exchange(declared(ox))
		if err := w.exchange(declared(nx)); err != nil {
			differ = err.Error()
		}
	}
	if differ != "" {
		b.add(rules.DeclaredDifferently, subjectOf("exchange", nx.Name), nx.Pos,
			fmt.Sprintf("exchange %q is new here, and %s declares it too, differently (%s): RabbitMQ refuses whichever declaration comes second (406)", nx.Name, f.Name, differ),
			"declare it as the other schema does, or declare an exchange under a new name")
	}
}

// declared is what the runtime declares for x, an owned exchange, as
// schema.File.QueueTopology says it.
func declared(x *schema.Exchange) topology.Exchange {
	return topology.Exchange{Name: x.Name, Type: x.Type, Durable: x.Durable, Internal: x.Internal, AlternateExchange: x.AlternateExchange}
}
