package ledger

import (
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/topology"
)

// Every copy drained at the end is the message the ledger published, and a
// handoff's copy carries its attempt and its failure facts as the envelope
// names them: a missing or mistyped header is a problem, not attempt 1.
func TestTheDrainChecksEveryCopysHeaders(t *testing.T) {
	r := newRun(Config{N: 1}, spec("q", topology.Classic))
	r.assign()
	id := r.ids[0]
	original := func() amqp.Delivery {
		return amqp.Delivery{MessageId: id, Type: messageTyp, ContentType: "application/json", Body: bodyOf(0),
			Headers: amqp.Table{envelope.HeaderVersion: int64(1)}}
	}
	retry := func() amqp.Delivery { return retriedOnce(original()) }
	for _, c := range []struct {
		name  string
		fate  Fate
		d     func() amqp.Delivery
		wrong string // "" when the copy is as it should be
	}{
		{"the original", InMain, original, ""},
		{"a retry copy", InBucket, retry, ""},
		{"a retry copy back in the queue", InMain, retry, ""},
		{"a retry copy without its kind", InBucket, func() amqp.Delivery { d := retry(); delete(d.Headers, envelope.HeaderFailureKind); return d }, "of attempt 2 carries no x-lily-failure-kind"},
		{"an attempt of int32", InBucket, func() amqp.Delivery { d := retry(); d.Headers[envelope.HeaderAttempt] = int32(2); return d }, "carries x-lily-attempt 2, a int32, not an int64"},
		{"no attempt", InDLQ, func() amqp.Delivery { d := retry(); delete(d.Headers, envelope.HeaderAttempt); return d }, "carries no x-lily-attempt"},
		{"another queue", InBucket, func() amqp.Delivery { d := retry(); d.Headers[envelope.HeaderFailureQueue] = "p"; return d }, `carries x-lily-failure-queue "p", not the run's queue`},
		{"the wrong failed attempt", InDLQ, retry, "of attempt 2 carries x-lily-failure-attempt 1, not the int64 2"},
		{"no reason", InBucket, func() amqp.Delivery { d := retry(); delete(d.Headers, envelope.HeaderFailureReason); return d }, "carries x-lily-failure-reason <nil>, not a reason"},
		{"another body", InBucket, func() amqp.Delivery { d := retry(); d.Body = []byte(`{}`); return d }, `has the body "{}", not the "{\"n\":0}" published`},
		{"another content type", InMain, func() amqp.Delivery { d := original(); d.ContentType = "text/plain"; return d }, `content type "text/plain"`},
		{"an original of attempt 2", InMain, func() amqp.Delivery { d := original(); d.Headers[envelope.HeaderAttempt] = int64(2); return d }, "of attempt 2 carries no x-lily-failure-kind"},
	} {
		d := c.d()
		_, f, wrong := r.copyFacts(&d, c.fate, 0)
		switch {
		case c.wrong == "" && wrong != "":
			t.Errorf("%s: %s", c.name, wrong)
		case !strings.Contains(wrong, c.wrong):
			t.Errorf("%s: %q, want %q", c.name, wrong, c.wrong)
		case c.name == "a retry copy back in the queue" && (f.fate != InBucket || f.kind != "retryable" || f.attempt != 1):
			t.Errorf("%s: facts %+v", c.name, f)
		}
	}
}

// A copy's failure kind is how the ledger's handler ended the failed
// attempt, and the kind fits where the copy was made for.
func TestAccountHoldsACopysFailureToTheHandler(t *testing.T) {
	e := oneMessage(Refused)
	e.ended[ending{workKey{"m1", 1}, "permanent"}] = true
	e.failures = []failure{{id: "m1", fate: InDLQ, kind: "retryable", attempt: 1}}
	wantProblem(t, account(e), `m1 (permanent) has a DLQ copy from attempt 1 of 3, retries left, whose failure kind is "retryable"`)
	e.failures = []failure{{id: "m1", fate: InBucket, kind: "permanent", attempt: 1}}
	wantProblem(t, account(e), `m1 (permanent) has a copy for a retry bucket from attempt 1 whose failure kind is "permanent"`)
	e.failures = []failure{{id: "m1", fate: InDLQ, kind: "permanent", attempt: 1}}
	noKindProblem(t, account(e))

	e = oneMessage(Panics)
	e.ended[ending{workKey{"m1", 3}, "panicked"}] = true
	e.failures = []failure{{id: "m1", fate: InDLQ, kind: "permanent", attempt: 3}}
	wantProblem(t, account(e), `m1 (panic) has a copy whose failure kind is "permanent" on attempt 3, and the ledger's runs of it ended "panicked"`)
	e.failures = []failure{{id: "m1", fate: InDLQ, kind: "retryable", attempt: 3}}
	noKindProblem(t, account(e))

	e.badCopies = []string{"m1: a copy in q.dlq carries no x-lily-attempt"}
	wantProblem(t, account(e), "m1: a copy in q.dlq carries no x-lily-attempt")
}

// noKindProblem fails t if res has a problem with a copy's failure kind
// (the copies are made up alone, without the records of their journeys).
func noKindProblem(t *testing.T, res *Result) {
	t.Helper()
	for _, p := range res.Problems {
		if strings.Contains(p, "failure kind") {
			t.Errorf("problem %q", p)
		}
	}
}

// A copy the broker dead-lettered from the run's queue at its delivery
// limit is held as it was there, even after a fault set the DLQ's
// messages aside and moved them back: that death, the newest, is of the
// DLQ for another reason.
func TestTheDrainFindsADeliveryLimitBehindAFaultsDeath(t *testing.T) {
	r := newRun(Config{N: 1}, spec("q", topology.Quorum))
	r.assign()
	limit := amqp.Table{"queue": "q", "reason": "delivery_limit", "count": int64(1)}
	aside := amqp.Table{"queue": "q.dlq", "reason": "maxlen", "count": int64(1)}
	original := func(deaths ...any) amqp.Delivery {
		return amqp.Delivery{MessageId: r.ids[0], Type: messageTyp, ContentType: "application/json", Body: bodyOf(0),
			Headers: amqp.Table{envelope.HeaderVersion: int64(1), "x-death": deaths}}
	}
	retried := func(deaths ...any) amqp.Delivery { return retriedOnce(original(deaths...)) }
	for _, d := range []amqp.Delivery{original(limit), original(aside, limit), retried(limit), retried(aside, limit)} {
		if _, _, wrong := r.copyFacts(&d, InDLQ, 0); wrong != "" {
			t.Errorf("a copy at the delivery limit, deaths %v: %s", d.Headers["x-death"], wrong)
		}
	}
	// The control: set aside alone, it is a DLQ copy, and the original's
	// carries no attempt.
	d := original(aside)
	if _, _, wrong := r.copyFacts(&d, InDLQ, 0); wrong != "carries no x-lily-attempt" {
		t.Errorf("the original set aside from the DLQ: %q", wrong)
	}
}

// retriedOnce is d as a retry bucket hands it back at attempt 2 of queue q,
// its first attempt failed retryably.
func retriedOnce(d amqp.Delivery) amqp.Delivery {
	d.Headers[envelope.HeaderAttempt] = int64(2)
	d.Headers[envelope.HeaderFailureKind] = "retryable"
	d.Headers[envelope.HeaderFailureAttempt] = int64(1)
	d.Headers[envelope.HeaderFailureQueue] = "q"
	d.Headers[envelope.HeaderFailureReason] = "retryable failure on attempt 1 of 3: flaky"
	d.Headers[envelope.HeaderFailureTime] = time.Now()
	return d
}
