package pgoutbox_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// The outbox ledger's accounting: from what the writers committed, what the
// queue holds, what each relay logged and the table's lease trail, it finds
// every lost message, every message that should not exist, every key out of
// order, and an explanation for every extra copy. It reads its evidence
// alone, so that its verdicts are tested on evidence made up for the purpose
// (TestOutboxLedgerAccounting).

// The explanations of an extra copy: why the row survived a publish that
// may have put its message in the queue, so that a relay published it again.
const (
	copyUnconfirmed   = "unconfirmed (no confirm came: the connection was cut)"
	copyKilledLeased  = "leased by a relay killed before it logged an answer"
	copyKilledDelete  = "confirmed, the relay killed before its delete"
	copyDeleteFailed  = "confirmed, its delete failed (the database connection was killed)"
	copyDeletedLate   = "confirmed, deleted only after its lease had ended"
	maxLedgerProblems = 30
)

// outboxEvidence is what the accounting reads.
type outboxEvidence struct {
	// committed holds every message of a committed transaction (the
	// business rows say which), by message id.
	committed map[string]committedMessage
	// rolledBack lists the ids of the transactions the writers rolled back.
	rolledBack []string
	// arrived is the destination queue's content, in queue order.
	arrived []arrival
	// relays are the relays' trails, one per relay process or in-process relay.
	relays []relayTrail
	// leases is the table's lease trail (a trigger's), in lease order.
	leases []lease
}

// committedMessage is where a committed message stands in its key: seq
// counts from 1 within the key, in commit order, which the writers made the
// write order by locking the key. An unkeyed message has key "" and seq 0.
type committedMessage struct {
	key string
	seq int
}

// arrival is a message taken from the queue, with the key and seq its
// headers carry.
type arrival struct {
	id, key string
	seq     int
}

// relayTrail is what one relay logged: its owner (the lease_owner it
// writes), each publish answer and each failed record of answers.
type relayTrail struct {
	name, owner string
	// killed is when the relay's process was killed; zero if it was not.
	killed         time.Time
	answers        []answer
	recordFailures []time.Time
	// leaseLost are the confirmed rows no longer its own at their delete.
	leaseLost []string
}

// answer is the broker's answer to one publish, as the relay logged it.
type answer struct {
	id, path string
	at       time.Time
}

// lease is one row of the lease trail: a relay took the row of a message.
type lease struct {
	id, owner string
	at        time.Time
}

// outboxLedger is the accounting's verdict.
type outboxLedger struct {
	messages, arrivals int
	// lost counts committed messages not in the queue; strays, arrivals of
	// messages never committed.
	lost, strays int
	// copies counts the extra copies (arrivals beyond the first) by
	// explanation; unexplained is in problems too.
	copies      map[string]int
	unexplained int
	// answers counts the relays' publish answers by path.
	answers  map[string]int
	problems []string
}

// attempt is one lease of a message's row and what came of it.
type attempt struct {
	lease  lease
	relay  *relayTrail
	answer *answer // nil: the relay logged none
}

// writes reports whether the attempt may have put the message in the queue.
func (a attempt) writes() bool {
	if a.answer == nil {
		return !a.relay.killed.IsZero() // a killed relay may have published it unanswered
	}
	return a.answer.path == "published" || a.answer.path == "unconfirmed"
}

func accountOutbox(ev outboxEvidence) outboxLedger {
	res := outboxLedger{messages: len(ev.committed), arrivals: len(ev.arrived), copies: map[string]int{}, answers: map[string]int{}}
	problem := func(format string, args ...any) { res.problems = append(res.problems, fmt.Sprintf(format, args...)) }

	arrivals := map[string]int{}
	for _, a := range ev.arrived {
		arrivals[a.id]++
	}
	rolledBack := map[string]bool{}
	for _, id := range ev.rolledBack {
		rolledBack[id] = true
	}
	for _, id := range slices.Sorted(maps.Keys(arrivals)) {
		if _, ok := ev.committed[id]; !ok {
			res.strays += arrivals[id]
			why := "never written"
			if rolledBack[id] {
				why = "rolled back"
			}
			problem("%s is in the queue %d times, but was never committed (%s)", id, arrivals[id], why)
		}
	}

	// Each relay's answers per message, in log order, to pair with its leases.
	byOwner := map[string]*relayTrail{}
	pending := map[string]map[string][]*answer{} // owner → message id → answers not yet paired
	for i := range ev.relays {
		r := &ev.relays[i]
		if r.owner == "" {
			if len(r.answers) > 0 {
				problem("relay %s logged answers but no owner", r.name)
			}
			continue
		}
		byOwner[r.owner] = r
		pending[r.owner] = map[string][]*answer{}
		for j := range r.answers {
			a := &r.answers[j]
			res.answers[a.path]++
			pending[r.owner][a.id] = append(pending[r.owner][a.id], a)
		}
	}
	leasesOf := map[string][]lease{}
	for _, l := range ev.leases {
		leasesOf[l.id] = append(leasesOf[l.id], l)
	}

	for _, id := range slices.Sorted(maps.Keys(ev.committed)) {
		var attempts []attempt
		for _, l := range leasesOf[id] {
			r := byOwner[l.owner]
			if r == nil {
				problem("%s was leased by %q, which no relay's log names", id, l.owner)
				continue
			}
			a := attempt{lease: l, relay: r}
			if q := pending[l.owner][id]; len(q) > 0 {
				a.answer, pending[l.owner][id] = q[0], q[1:]
			}
			attempts = append(attempts, a)
		}
		n := arrivals[id]
		if n == 0 {
			res.lost++
			problem("%s is lost: committed, not in the queue; %s", id, timeline(attempts))
			continue
		}
		confirmed := 0
		var writes []int // the attempts that may have written the message
		for i, a := range attempts {
			if a.writes() {
				writes = append(writes, i)
			}
			if a.answer != nil && a.answer.path == "published" {
				confirmed++
			}
		}
		if n < confirmed {
			problem("%s was confirmed %d times but is in the queue %d times: a confirmed publish is missing; %s", id, confirmed, n, timeline(attempts))
		}
		// Each copy needs a publish that may have written the message and
		// left its row for a later one: every writing attempt but the last.
		// The confirmed ones surely made their copy: they explain first.
		var sure, maybe []string
		for _, i := range writes[:max(len(writes)-1, 0)] {
			switch a := attempts[i]; {
			case a.answer == nil:
				maybe = append(maybe, copyKilledLeased)
			case a.answer.path == "unconfirmed":
				maybe = append(maybe, copyUnconfirmed)
			default:
				sure = append(sure, whyNotDeleted(a, attempts[i+1].lease))
			}
		}
		because := append(sure, maybe...)
		copies := n - 1
		for _, why := range because[:min(copies, len(because))] {
			res.copies[why]++
		}
		if copies > len(because) {
			res.unexplained += copies - len(because)
			problem("%s is in the queue %d times, %d of its copies unexplained; %s", id, n, copies-len(because), timeline(attempts))
		}
	}
	for _, owner := range slices.Sorted(maps.Keys(pending)) {
		for _, id := range slices.Sorted(maps.Keys(pending[owner])) {
			if q := pending[owner][id]; len(q) > 0 {
				problem("relay %s answered %d publishes of %s beyond its leases of it", byOwner[owner].name, len(q), id)
			}
		}
	}
	res.problems = append(res.problems, orderProblems(ev)...)
	return res
}

// whyNotDeleted says why a confirmed publish's row was still there to be
// leased again at next: the relay was killed first, or it logged a failed
// record of its answers after the confirm (a record that began before the
// next lease may end after it, within a lease), or neither: the delete came
// after the lease had ended.
func whyNotDeleted(a attempt, next lease) string {
	for _, f := range a.relay.recordFailures {
		if !f.Before(a.answer.at) && !f.After(next.at.Add(ledgerLease)) {
			return copyDeleteFailed
		}
	}
	if k := a.relay.killed; !k.IsZero() && k.Before(next.at) {
		return copyKilledDelete
	}
	return copyDeletedLate
}

// orderProblems checks each key's order: taking the queue in order and
// keeping only the first arrival of each message id, the messages of a key
// are exactly those committed with it, in write order (seq 1, 2, 3...).
// A later copy of a message may arrive anywhere after its first.
func orderProblems(ev outboxEvidence) []string {
	var problems []string
	seen := map[string]bool{}
	first := map[string][]int{} // key → seqs of its first arrivals, in queue order
	for _, a := range ev.arrived {
		c, ok := ev.committed[a.id]
		if !ok {
			continue // reported as never committed
		}
		if a.key != c.key || a.seq != c.seq {
			problems = append(problems, fmt.Sprintf("%s arrived as key %q seq %d, committed as key %q seq %d", a.id, a.key, a.seq, c.key, c.seq))
		}
		if seen[a.id] {
			continue
		}
		seen[a.id] = true
		if c.key != "" {
			first[c.key] = append(first[c.key], c.seq)
		}
	}
	want := map[string]int{}
	for _, c := range ev.committed {
		if c.key != "" {
			want[c.key]++
		}
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		got := first[k]
		for i := range want[k] {
			if i >= len(got) || got[i] != i+1 {
				problems = append(problems, fmt.Sprintf("key %s: first arrivals out of write order at position %d: %s", k, i+1, around(got, i)))
				break
			}
		}
		if len(got) > want[k] {
			problems = append(problems, fmt.Sprintf("key %s: %d first arrivals, %d committed", k, len(got), want[k]))
		}
	}
	return problems
}

// around shows the seqs near position i.
func around(seqs []int, i int) string {
	lo, hi := max(i-3, 0), min(i+4, len(seqs))
	return fmt.Sprintf("seqs [%d:%d] = %v of %d", lo, hi, seqs[lo:hi], len(seqs))
}

// timeline tells a message's leases and answers, for a problem's line.
func timeline(attempts []attempt) string {
	if len(attempts) == 0 {
		return "never leased"
	}
	var parts []string
	for _, a := range attempts {
		s := "leased by " + a.relay.name
		if !a.relay.killed.IsZero() {
			s += " (killed)"
		}
		if a.answer != nil {
			s += ", " + a.answer.path
		} else {
			s += ", no answer"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// The accounting's verdicts, on evidence made up for each.
func TestOutboxLedgerAccounting(t *testing.T) {
	at := func(ms int) time.Time {
		return time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(ms) * time.Millisecond)
	}
	killedAt := at(150)
	relays := func() []relayTrail {
		return []relayTrail{{name: "a", owner: "A"}, {name: "b", owner: "B"}, {name: "p1", owner: "P", killed: killedAt}}
	}
	// m1 and m2 unkeyed; k1 and k2 the first two of key k.
	committed := map[string]committedMessage{"m1": {}, "m2": {}, "k1": {"k", 1}, "k2": {"k", 2}}
	once := func(ev *outboxEvidence, ids ...string) {
		for _, id := range ids {
			ev.leases = append(ev.leases, lease{id, "A", at(0)})
			ev.relays[0].answers = append(ev.relays[0].answers, answer{id, "published", at(10)})
			c := committed[id]
			ev.arrived = append(ev.arrived, arrival{id, c.key, c.seq})
		}
	}
	cases := []struct {
		name    string
		make    func(ev *outboxEvidence)
		copies  map[string]int
		lost    int
		problem string // a problem that contains this; "" for none
	}{
		{name: "every message once", make: func(ev *outboxEvidence) { once(ev, "m1", "m2", "k1", "k2") }},
		{
			name: "unconfirmed, published again",
			make: func(ev *outboxEvidence) {
				once(ev, "m2", "k1", "k2")
				ev.leases = append(ev.leases, lease{"m1", "A", at(0)}, lease{"m1", "B", at(2000)})
				ev.relays[0].answers = append(ev.relays[0].answers, answer{"m1", "unconfirmed", at(10)})
				ev.relays[1].answers = append(ev.relays[1].answers, answer{"m1", "published", at(2010)})
				ev.arrived = append(ev.arrived, arrival{id: "m1"}, arrival{id: "m1"})
			},
			copies: map[string]int{copyUnconfirmed: 1},
		},
		{
			name: "unconfirmed and not written: one arrival, no copy",
			make: func(ev *outboxEvidence) {
				once(ev, "m2", "k1", "k2")
				ev.leases = append(ev.leases, lease{"m1", "A", at(0)}, lease{"m1", "B", at(2000)})
				ev.relays[0].answers = append(ev.relays[0].answers, answer{"m1", "unconfirmed", at(10)})
				ev.relays[1].answers = append(ev.relays[1].answers, answer{"m1", "published", at(2010)})
				ev.arrived = append(ev.arrived, arrival{id: "m1"})
			},
		},
		{
			name: "leased by the killed relay, no answer logged",
			make: func(ev *outboxEvidence) {
				once(ev, "m2", "k1", "k2")
				ev.leases = append(ev.leases, lease{"m1", "P", at(100)}, lease{"m1", "A", at(2100)})
				ev.relays[0].answers = append(ev.relays[0].answers, answer{"m1", "published", at(2110)})
				ev.arrived = append(ev.arrived, arrival{id: "m1"}, arrival{id: "m1"})
			},
			copies: map[string]int{copyKilledLeased: 1},
		},
		{
			name: "confirmed: killed before the delete, delete failed, deleted late",
			make: func(ev *outboxEvidence) {
				once(ev, "k1", "k2")
				ev.leases = append(ev.leases, lease{"m1", "P", at(100)}, lease{"m1", "B", at(2100)},
					lease{"m2", "A", at(0)}, lease{"m2", "B", at(2000)}, lease{"m2", "A", at(4000)})
				ev.relays[2].answers = append(ev.relays[2].answers, answer{"m1", "published", at(120)})
				ev.relays[0].answers = append(ev.relays[0].answers, answer{"m2", "published", at(10)}, answer{"m2", "published", at(4010)})
				ev.relays[0].recordFailures = []time.Time{at(300)}
				ev.relays[1].answers = append(ev.relays[1].answers, answer{"m1", "published", at(2110)}, answer{"m2", "published", at(2010)})
				ev.arrived = append(ev.arrived, arrival{id: "m1"}, arrival{id: "m2"}, arrival{id: "m1"}, arrival{id: "m2"}, arrival{id: "m2"})
			},
			copies: map[string]int{copyKilledDelete: 1, copyDeleteFailed: 1, copyDeletedLate: 1},
		},
		{
			name: "a copy with no second publish",
			make: func(ev *outboxEvidence) {
				once(ev, "m1", "m2", "k1", "k2")
				ev.arrived = append(ev.arrived, arrival{id: "m1"})
			},
			problem: "m1 is in the queue 2 times, 1 of its copies unexplained",
		},
		{
			name:    "lost",
			make:    func(ev *outboxEvidence) { once(ev, "m2", "k1", "k2") },
			lost:    1,
			problem: "m1 is lost: committed, not in the queue; never leased",
		},
		{
			name: "confirmed, missing from the queue",
			make: func(ev *outboxEvidence) {
				once(ev, "m2", "k1", "k2")
				ev.leases = append(ev.leases, lease{"m1", "A", at(0)}, lease{"m1", "B", at(2000)})
				ev.relays[0].answers = append(ev.relays[0].answers, answer{"m1", "published", at(10)})
				ev.relays[1].answers = append(ev.relays[1].answers, answer{"m1", "published", at(2010)})
				ev.arrived = append(ev.arrived, arrival{id: "m1"})
			},
			problem: "m1 was confirmed 2 times but is in the queue 1 times",
		},
		{
			name: "a rolled-back message arrived",
			make: func(ev *outboxEvidence) {
				once(ev, "m1", "m2", "k1", "k2")
				ev.rolledBack = []string{"rb"}
				ev.arrived = append(ev.arrived, arrival{id: "rb"})
			},
			problem: "rb is in the queue 1 times, but was never committed (rolled back)",
		},
		{
			name:    "a key out of write order",
			make:    func(ev *outboxEvidence) { once(ev, "m1", "m2", "k2", "k1") },
			problem: "key k: first arrivals out of write order at position 1",
		},
		{
			name: "a key's earlier message arriving again later is in order",
			make: func(ev *outboxEvidence) {
				once(ev, "m1", "m2", "k1")
				ev.leases = append(ev.leases, lease{"k1", "B", at(2000)})
				ev.relays[0].answers[2].path = "unconfirmed"
				ev.relays[1].answers = append(ev.relays[1].answers, answer{"k1", "published", at(2010)})
				once(ev, "k2")
				ev.arrived = append(ev.arrived, arrival{"k1", "k", 1})
			},
			copies: map[string]int{copyUnconfirmed: 1},
		},
		{
			name: "an answer without a lease",
			make: func(ev *outboxEvidence) {
				once(ev, "m1", "m2", "k1", "k2")
				ev.relays[1].answers = append(ev.relays[1].answers, answer{"m1", "unconfirmed", at(10)})
			},
			problem: "relay b answered 1 publishes of m1 beyond its leases of it",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev := outboxEvidence{committed: committed, relays: relays()}
			c.make(&ev)
			res := accountOutbox(ev)
			if c.copies == nil {
				c.copies = map[string]int{}
			}
			if !maps.Equal(res.copies, c.copies) || res.lost != c.lost {
				t.Errorf("copies %v, lost %d; want %v, %d", res.copies, res.lost, c.copies, c.lost)
			}
			found := slices.ContainsFunc(res.problems, func(p string) bool { return c.problem != "" && strings.Contains(p, c.problem) })
			if c.problem == "" && len(res.problems) > 0 || c.problem != "" && !found {
				t.Errorf("problems %q; want one with %q", res.problems, c.problem)
			}
		})
	}
}
