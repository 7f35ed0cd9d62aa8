package main

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
)

// selection is which copies a re-drive moves: those that match every
// criterion given.
type selection struct {
	ids            idList
	reason         string // exact
	reasonContains string // substring
	typ            string
	since, until   timeFlag
	all            bool
	// found are the ids of ids some copy read carried.
	found map[string]bool
}

// newSelection is a selection whose -since and -until count back from now.
func newSelection() *selection {
	return &selection{since: timeFlag{now: time.Now}, until: timeFlag{now: time.Now}}
}

// criteriaFlags adds the criteria other than -id and -all to fs: those
// redrive chooses copies by and purge narrows its -id with. verb is what the
// command does to a chosen copy.
func criteriaFlags(fs *flag.FlagSet, sel *selection, verb string) {
	fs.StringVar(&sel.reason, "reason", "", verb+" copies whose failure reason is exactly this (as sent, or as list prints it uncut)")
	fs.StringVar(&sel.reasonContains, "reason-contains", "", verb+" copies whose failure reason contains this")
	fs.StringVar(&sel.typ, "type", "", verb+" copies of this message type (as sent, or as list prints it uncut): the AMQP type, or the type the runtime read (x-lily-failure-type)")
	fs.Var(&sel.since, "since", verb+" copies that failed at or after this time (RFC 3339, or a duration before now: 2h)")
	fs.Var(&sel.until, "until", verb+" copies that failed before this time (RFC 3339, or a duration before now)")
}

// narrowed reports whether a criterion other than -id and -all was given.
func (s *selection) narrowed() bool {
	return s.reason != "" || s.reasonContains != "" || s.typ != "" || s.since.set || s.until.set
}

// empty reports whether no criterion was given: a re-drive needs one, or
// -all.
func (s *selection) empty() bool {
	return !s.all && len(s.ids) == 0 && !s.narrowed()
}

// match reports whether the copy d with facts f is chosen, a type by its
// AMQP type or the one the runtime read. Ids, types and reasons match by
// their whole value, as sent or escaped as list prints it but never cut:
// list cuts a long reason, and two reasons alike up to the cut are not the
// same reason. (The whole value is bounded by the frame the
// copy came in.) A time window matches only copies that carry a failure
// time.
func (s *selection) match(d *amqp.Delivery, f facts) bool {
	switch {
	case len(s.ids) > 0 && !s.ids[d.MessageId] && !s.ids[escape(d.MessageId)]:
		return false
	case s.reason != "" && !whole(f.FullReason, s.reason):
		return false
	case s.reasonContains != "" && !strings.Contains(f.FullReason, s.reasonContains) &&
		// The escaped form only for a needle written in it: else "80" would
		// find every reason with an escaped byte \x80.
		!(strings.Contains(s.reasonContains, `\x`) && strings.Contains(escape(f.FullReason), s.reasonContains)):
		return false
	case s.typ != "" && !whole(d.Type, s.typ) && !s.readType(d):
		return false
	case s.since.set && (f.Time.IsZero() || f.Time.Before(s.since.t)):
		return false
	case s.until.set && (f.Time.IsZero() || !f.Time.Before(s.until.t)):
		return false
	}
	return true
}

// readType reports whether -type is the type the runtime read of the copy d
// (x-lily-failure-type): a message in another envelope profile carries its
// own in headers lilydlq does not know.
func (s *selection) readType(d *amqp.Delivery) bool {
	t, ok := d.Headers[envelope.HeaderFailureType].(string)
	return ok && whole(t, s.typ)
}

// whole reports whether value is want, as sent or escaped as list prints it
// uncut.
func whole(value, want string) bool { return value == want || escape(value) == want }

// see records which of the -id ids the copy d carries, whether or not the
// other criteria choose it.
func (s *selection) see(d *amqp.Delivery) {
	for _, id := range s.carried(d) {
		if s.found == nil {
			s.found = map[string]bool{}
		}
		s.found[id] = true
	}
}

// carried are the -id ids the copy d carries: its id as sent, or escaped.
func (s *selection) carried(d *amqp.Delivery) []string {
	var out []string
	for _, id := range []string{d.MessageId, escape(d.MessageId)} {
		if s.ids[id] && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// missing are the -id ids no copy read carried, sorted.
func (s *selection) missing() []string {
	var out []string
	for id := range s.ids {
		if !s.found[id] {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// idList is -id: repeatable, each one message id as given. Ids may hold
// commas and spaces (envelope.IDText allows them; a foreign producer's may
// have anything), so none is split or trimmed.
type idList map[string]bool

func (l *idList) String() string {
	ids := slices.Sorted(maps.Keys(*l))
	return strings.Join(ids, " ")
}

func (l *idList) Set(v string) error {
	if v == "" {
		return errors.New("want a message id")
	}
	if *l == nil {
		*l = idList{}
	}
	(*l)[v] = true
	return nil
}

// timeFlag is -since or -until: an RFC 3339 time, or a duration before now.
type timeFlag struct {
	t   time.Time
	set bool
	now func() time.Time
}

func (f *timeFlag) String() string {
	if !f.set {
		return ""
	}
	return f.t.Format(time.RFC3339)
}

func (f *timeFlag) Set(v string) error {
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		f.t, f.set = f.now().Add(-d), true
		return nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return fmt.Errorf("want an RFC 3339 time (2024-05-01T12:00:00Z) or a duration before now (90m)")
	}
	f.t, f.set = t, true
	return nil
}
