package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/internal/quarantine"
)

// deepCopy is a Lily DLQ copy with a header nested 33 tables deep: RabbitMQ
// takes and delivers it, amqp091-go refuses to decode it and closes its
// connection.
func deepCopy(id, source string) amqp.Publishing {
	p := lilyCopy(id, "order.placed", "permanent failure", "permanent", source, 1, time.Now())
	deep := amqp.Table{"leaf": "x"}
	for range 32 {
		deep = amqp.Table{"n": deep}
	}
	p.Headers["deep"] = deep
	return p
}

// refusedByTheClient fails the test unless amqp091-go, reading without the
// filter, fails on p: else the tests below would prove nothing.
func (b *broker) refusedByTheClient(p amqp.Publishing) {
	b.t.Helper()
	q := b.queue("probe", nil)
	b.publish(q, p)
	conn, err := amqp.Dial(b.url)
	if err != nil {
		b.t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		b.t.Fatal(err)
	}
	if _, ok, err := ch.Get(q, false); err == nil {
		b.t.Fatalf("the client decoded the hostile copy (got %v): the test proves nothing", ok)
	}
}

// TestQuarantinedCopy: a copy whose headers the client cannot decode no
// longer stops lilydlq. list, show and export read past it and say it is
// quarantined and why (export then exits 1: its headers are not in the
// file); redrive moves the copies around it, and leaves it in the DLQ,
// reported, with exit 1.
func TestQuarantinedCopy(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq, src := b.queue("dlq", nil), b.queue("src", nil)
	b.refusedByTheClient(deepCopy("probe", src))
	b.publish(dlq,
		lilyCopy("before", "t", "permanent failure", "permanent", src, 1, time.Now()),
		deepCopy("deep-1", src),
		lilyCopy("after", "t", "permanent failure", "permanent", src, 1, time.Now()),
	)
	const why = "quarantined: header tables or arrays nested deeper than 32"

	r := b.lilydlq("list", dlq)
	if r.code != exitOK {
		t.Fatalf("list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"3 copies read (3 ready when the read began), 2 reasons", why + " (1)", "deep-1", " quarantined ", "permanent failure (2)"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("list lacks %q:\n%s", want, r.stdout)
		}
	}
	b.assertCounts(dlq, 3)

	r = b.lilydlq("show", dlq, "-id", "deep-1")
	if r.code != exitOK {
		t.Fatalf("show: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"reason:        " + why, "kind:          quarantined", "quarantined:   the client cannot read its headers as they are", "headers (1)", quarantine.Header + ":", `body (15 bytes)` + "\n  " + `{"id":"deep-1"}`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show lacks %q:\n%s", want, r.stdout)
		}
	}

	// Every copy is written, but the quarantined one's headers live only in
	// the DLQ: export says so and fails, so no one purges on its strength.
	b.assertCounts(dlq, 3) // the show's copies are back
	r = b.lilydlq("export", dlq)
	if r.code != exitFailure || !strings.Contains(r.stderr, "incomplete: 3 copies written, 1 of them quarantined, their headers not exported (do not purge)") {
		t.Fatalf("export: exit %d, want %d\n%s", r.code, exitFailure, r.stderr)
	}
	lines := exportLines(t, r.stdout)
	if len(lines) != 3 {
		t.Fatalf("export wrote %d copies, want 3", len(lines))
	}
	if x := lines[1]; x.Facts.ID != "deep-1" || x.Facts.Kind != kindQuarantined || !strings.HasPrefix(x.Facts.Quarantined, "header tables") ||
		len(x.Headers) != 1 || x.Headers[quarantine.Header].Type != "string" || string(x.Body) != `{"id":"deep-1"}` {
		t.Errorf("the quarantined copy exported as %+v", x)
	}
	if lines[0].Facts.Quarantined != "" || lines[2].Facts.Quarantined != "" {
		t.Errorf("a copy around it exported as quarantined: %+v %+v", lines[0].Facts, lines[2].Facts)
	}
	b.assertCounts(dlq, 3)

	r = b.lilydlq("redrive", dlq, "-all")
	if r.code != exitFailure {
		t.Errorf("redrive: exit %d, want %d\n%s%s", r.code, exitFailure, r.stdout, r.stderr)
	}
	for _, want := range []string{"not moved deep-1 (order.placed): its headers cannot be read as they are (header tables", "it stays in the DLQ", "moved before (t) -> " + src, "moved after (t) -> " + src, "moved 2 of 3 chosen", "1 not moved"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("redrive lacks %q:\n%s", want, r.stdout)
		}
	}
	b.assertCounts(dlq, 1)
	b.assertCounts(src, 2)
	if got := ids(b.take(src)); !slices.Equal(got, []string{"before", "after"}) {
		t.Errorf("source holds %v", got)
	}
	// The copy left is the quarantined one, still undecodable: its headers
	// were never rewritten.
	r = b.lilydlq("export", dlq)
	if lines := exportLines(t, r.stdout); r.code != exitFailure || len(lines) != 1 || lines[0].Facts.ID != "deep-1" || lines[0].Facts.Kind != kindQuarantined {
		t.Errorf("the DLQ after the re-drive: exit %d, %+v", r.code, lines)
	}
	b.assertCounts(dlq, 1)
}

// TestRepeatedHeaderName: a copy whose header table names an entry twice,
// which RabbitMQ stores and delivers and the client decodes keeping one
// value, is quarantined as one it cannot decode: list and show say why,
// export says it is incomplete (do not purge), and redrive leaves it in the
// DLQ; the copy beside it moves.
func TestRepeatedHeaderName(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq, src, probe := b.queue("dlq", nil), b.queue("src", nil), b.queue("probe", nil)
	twice := lilyCopy("dup-1", "t", "permanent failure", "permanent", src, 1, time.Now())
	twice.Headers["zzdupA"] = "first value"
	twice.Headers["zzdupB"] = "second value"
	// Written as zzdupA twice on the wire (in the order of a map's walk):
	// the bare client keeps either value, not both.
	b.publishRewritten(probe, twice, "zzdupB", "zzdupA")
	if got := b.take(probe); len(got) != 1 || got[0].Headers["zzdupA"] == nil || got[0].Headers["zzdupB"] != nil {
		t.Fatalf("the client read no name twice: %v", got)
	}
	b.publishRewritten(dlq, twice, "zzdupB", "zzdupA")
	b.publish(dlq, lilyCopy("after", "t", "permanent failure", "permanent", src, 1, time.Now()))
	const why = `quarantined: a header table that names "zzdupA" twice (the client keeps one value)`

	r := b.lilydlq("list", dlq)
	if r.code != exitOK || !strings.Contains(r.stdout, why+" (1)") || !strings.Contains(r.stdout, "dup-1") {
		t.Errorf("list: exit %d, lacks %q\n%s%s", r.code, why, r.stdout, r.stderr)
	}
	r = b.lilydlq("show", dlq, "-id", "dup-1")
	if r.code != exitOK || !strings.Contains(r.stdout, "quarantined:   the client cannot read its headers as they are (a header table that names") || strings.Contains(r.stdout, "value (string)") {
		t.Errorf("show: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	b.assertCounts(dlq, 2)
	r = b.lilydlq("export", dlq)
	if r.code != exitFailure || !strings.Contains(r.stderr, "incomplete: 2 copies written, 1 of them quarantined, their headers not exported (do not purge)") {
		t.Errorf("export: exit %d, want %d\n%s", r.code, exitFailure, r.stderr)
	}
	if lines := exportLines(t, r.stdout); len(lines) != 2 || lines[0].Facts.Kind != kindQuarantined || len(lines[0].Headers) != 1 || lines[1].Facts.Quarantined != "" {
		t.Errorf("export wrote %+v", lines)
	}
	b.assertCounts(dlq, 2)
	r = b.lilydlq("redrive", dlq, "-all")
	for _, want := range []string{"not moved dup-1 (t): its headers cannot be read as they are (a header table that names", "moved after (t) -> " + src, "moved 1 of 2 chosen"} {
		if r.code != exitFailure || !strings.Contains(r.stdout, want) {
			t.Errorf("redrive: exit %d, lacks %q\n%s%s", r.code, want, r.stdout, r.stderr)
		}
	}
	b.assertCounts(dlq, 1)
	b.assertCounts(src, 1)
}

// publishRewritten publishes m to queue, confirmed, through a connection
// that writes to in place of from (as long) wherever its frames hold it: a
// message no client would write, such as one whose table names an entry
// twice.
func (b *broker) publishRewritten(queue string, m amqp.Publishing, from, to string) {
	b.t.Helper()
	if len(from) != len(to) {
		b.t.Fatal("a rewrite must keep the frames' lengths")
	}
	conn, err := amqp.DialConfig(b.url, amqp.Config{Dial: func(network, addr string) (net.Conn, error) {
		c, err := net.Dial(network, addr)
		if err != nil {
			return nil, err
		}
		return rewriting{c, []byte(from), []byte(to)}, nil
	}})
	if err != nil {
		b.t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		b.t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		b.t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirm("", queue, true, false, m)
	if err != nil {
		b.t.Fatal(err)
	}
	if ok, err := dc.WaitContext(b.t.Context()); !ok || err != nil {
		b.t.Fatalf("publish to %s: not confirmed (%v)", queue, err)
	}
}

// rewriting is a connection that writes to in place of from.
type rewriting struct {
	net.Conn
	from, to []byte
}

func (c rewriting) Write(p []byte) (int, error) {
	return c.Conn.Write(bytes.ReplaceAll(p, c.from, c.to))
}

// TestQuarantinedCopyOverTLS: under amqps the filter reads beneath TLS, so
// it sees frames and quarantines as it does in the clear.
func TestQuarantinedCopyOverTLS(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq := b.queue("dlq", nil)
	b.publish(dlq, deepCopy("deep-1", "src"), lilyCopy("plain", "t", "permanent failure", "permanent", "src", 1, time.Now()))
	server, ca := selfSigned(t)
	r := newRelay(t, b.url, server, false)
	var out, errs bytes.Buffer
	url := "amqps://guest:guest@127.0.0.1:" + r.port() + "/?cacertfile=" + ca
	if code := run(context.Background(), []string{"list", dlq, "-url", url}, &out, &errs); code != exitOK {
		t.Fatalf("list over TLS: exit %d\n%s%s", code, out.String(), errs.String())
	}
	for _, want := range []string{"2 copies read", "quarantined: header tables or arrays nested deeper than 32 (1)", "permanent failure (1)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("list over TLS lacks %q:\n%s", want, out.String())
		}
	}
	b.assertCounts(dlq, 2)
}

// exportLines decodes export's output.
func exportLines(t *testing.T, out string) []exported {
	t.Helper()
	var lines []exported
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var x exported
		if err := json.Unmarshal(sc.Bytes(), &x); err != nil {
			t.Fatalf("export line %d: %v", len(lines)+1, err)
		}
		lines = append(lines, x)
	}
	return lines
}
