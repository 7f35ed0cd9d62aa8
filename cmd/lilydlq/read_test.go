package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestReadEndsOnceItsCopiesAreBack: a quorum queue hands a closed channel's
// copies back after the close-ok, and counts its consumers until then. Each
// show returns only once that is done: a passive declare at once after it
// finds every copy ready and no consumer (without the wait, 21 of 30 found
// one here), and the copies in their order.
func TestReadEndsOnceItsCopiesAreBack(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq := b.queue("dlq", amqp.Table{"x-queue-type": "quorum"})
	const copies = 10
	var msgs []amqp.Publishing
	var want []string
	for i := range copies {
		id := fmt.Sprintf("m-%d", i)
		msgs = append(msgs, amqp.Publishing{MessageId: id})
		want = append(want, id)
	}
	b.publish(dlq, msgs...)
	// Counted on a channel already open: a command would dial first, which
	// may hide the lag here and not on a slower machine.
	ch := b.channel()
	defer ch.Close()
	for i := range 5 {
		r := b.lilydlq("show", dlq, "-id", "m-1", "-window", "2")
		q, err := ch.QueueDeclarePassive(dlq, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.code != exitOK || q.Messages != copies || q.Consumers != 0 {
			t.Errorf("show %d: exit %d, then %d ready, %d consumer(s); want %d, %d ready, none\n%s", i, r.code, q.Messages, q.Consumers, exitOK, copies, r.stderr)
		}
	}
	b.assertCounts(dlq, copies)
	if got := ids(b.take(dlq)); !slices.Equal(got, want) {
		t.Errorf("the DLQ holds %v, want %v", got, want)
	}
}

// TestReadSaysWhenConsumersLinger: a consumer that began on a quorum DLQ
// during a read still counts after it; the read waits for it -wait at most,
// and its note says so.
func TestReadSaysWhenConsumersLinger(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dlq := b.queue("dlq", amqp.Table{"x-queue-type": "quorum"})
	b.publish(dlq, amqp.Publishing{MessageId: "a"}, amqp.Publishing{MessageId: "b"})
	other := b.channel()
	defer other.Close()
	o := readOptions{window: 64, idle: time.Second}
	res, err := readQueue(context.Background(), b.url, dlq, "list", o, func(d *amqp.Delivery, _ string) (verdict, error) {
		if d.MessageId == "a" {
			if _, err := other.Consume(dlq, "", false, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
		}
		return keep, nil
	})
	if err != nil || res.Read != 2 || res.Lingering != 1 {
		t.Fatalf("read: %+v, %v; want 2 read, 1 lingering", res, err)
	}
	var stderr bytes.Buffer
	(&env{stderr: &stderr, read: o}).readNote("list", res, 0)
	if !strings.Contains(stderr.String(), "lilydlq list: note: -wait after the read, the DLQ still counted 1 consumer(s) more than before it") {
		t.Errorf("the note: %s", stderr.String())
	}
}

// TestClosedWhy: the reading channel's end is told by who ended it. The
// client's own timeout on a half-open connection is not the broker's close
// (before, both said "the broker closed the reading channel"): the broker
// still held the copies then.
func TestClosedWhy(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		e         *amqp.Error
		want, not string
	}{
		{&amqp.Error{Code: amqp.FrameError, Reason: "read tcp 127.0.0.1:5000->127.0.0.1:5672: i/o timeout"},
			"the client lost its connection to the broker (read tcp 127.0.0.1:5000->127.0.0.1:5672: i/o timeout): every copy the read held returns to the DLQ once the broker sees the connection gone", "the broker closed"},
		{&amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out", Server: true},
			"the broker closed the reading channel (every copy it held returns to the DLQ): Exception (406) Reason: \"PRECONDITION_FAILED - delivery acknowledgement", "client"},
	} {
		closed := make(chan *amqp.Error, 1)
		closed <- c.e
		got := readError(closed, errors.New("channel/connection is not open")).Error()
		if !strings.Contains(got, c.want) || strings.Contains(got, c.not) {
			t.Errorf("readError(%+v) = %q; want %q", c.e, got, c.want)
		}
	}
}

// TestReadNoteSaysACopyMayStillBeArriving: -wait measures the arrival of a
// whole copy, so over a slow link a large body can outlast it: a read that
// stopped at -wait says a copy may still have been arriving, and how to wait
// for it, besides taken or expired.
func TestReadNoteSaysACopyMayStillBeArriving(t *testing.T) {
	t.Parallel()
	var errs bytes.Buffer
	e := &env{stderr: &errs}
	e.readNote("list", readResult{Ready: 3, Read: 1, Idle: true}, 0)
	want := "lilydlq list: note: 1 of 3 ready copies came within -wait; the others were taken or expired meanwhile, or were still arriving (raise -wait for large bodies on a slow link)\n"
	if errs.String() != want {
		t.Errorf("the note:\n%s\nwant:\n%s", errs.String(), want)
	}
}
