package mongoinbox

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/lily-mq/lily/runtime"
)

// These run without a server: the answers to a commit, by the error the
// driver returns.
func TestCommitWithRetry(t *testing.T) {
	unknown := mongo.CommandError{Name: "HostUnreachable", Labels: []string{"UnknownTransactionCommitResult"}}
	transient := mongo.CommandError{Name: "NoSuchTransaction", Labels: []string{"TransientTransactionError"}}
	cases := []struct {
		name    string
		errs    []error // what each call returns; nil past the end
		timeout time.Duration
		want    string // committed, failed or ambiguous
		calls   int
	}{
		{"committed", nil, time.Second, "committed", 1},
		{"unknown, retried, committed", []error{unknown, unknown}, time.Second, "committed", 3},
		{"transient: the transaction is gone", []error{transient}, time.Second, "failed", 1},
		{"a plain server error", []error{mongo.CommandError{Name: "WriteConflict"}}, time.Second, "failed", 1},
		{"unknown until the deadline", repeat(unknown, 1000), 150 * time.Millisecond, "ambiguous", 0},
		{"the deadline cuts the commit", repeat(context.DeadlineExceeded, 1000), 150 * time.Millisecond, "ambiguous", 0},
		{"unknown, then a plain error: the first may have landed", []error{unknown, mongo.CommandError{Name: "UnsatisfiableWriteConcern"}}, time.Second, "ambiguous", 2},
		{"unknown, then transient: the transaction is gone", []error{unknown, transient}, time.Second, "failed", 2},
		// A commit slower than the step is cut while time is kept back, and
		// retried: commitTransaction again answers for the first.
		{"the first attempt hangs; its retry commits", []error{errHang}, time.Second, "committed", 2},
		{"the first attempt hangs; its retry finds the transaction gone", []error{errHang, transient}, time.Second, "failed", 2},
		{"every attempt hangs", repeat(errHang, 1000), time.Second, "ambiguous", 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			calls := 0
			commit := func(ctx context.Context) error {
				calls++
				if calls > len(tc.errs) {
					return nil
				}
				if tc.errs[calls-1] == errHang {
					<-ctx.Done()
					return ctx.Err()
				}
				return tc.errs[calls-1]
			}
			err := commitWithRetry(ctx, commit, 20*time.Millisecond)
			if got := said(err); got != tc.want {
				t.Fatalf("commitWithRetry = %s (%v), want %s", got, err, tc.want)
			}
			if tc.want != "ambiguous" && ctx.Err() != nil {
				t.Errorf("answered %s after the deadline: the runtime takes that for ambiguous", tc.want)
			}
			if tc.calls > 0 && calls != tc.calls {
				t.Errorf("%d commit calls, want %d", calls, tc.calls)
			}
			if tc.calls == 0 && calls < 2 {
				t.Errorf("%d commit calls before giving up, want retries", calls)
			}

		})
	}
}

// errHang is a commit attempt that answers only when its context ends.
var errHang = errors.New("hang")

// said names a commit's answer as the runtime reads it.
func said(err error) string {
	switch {
	case err == nil:
		return "committed"
	case errors.Is(err, runtime.ErrCommitAmbiguous):
		return "ambiguous"
	}
	return "failed"
}

func repeat(err error, n int) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

func TestHasLabelSeesWrappedErrors(t *testing.T) {
	err := errors.Join(errors.New("context"), mongo.CommandError{Labels: []string{"TransientTransactionError"}})
	if !hasLabel(err, "TransientTransactionError") || hasLabel(err, "UnknownTransactionCommitResult") {
		t.Fatal("hasLabel misread the labels of a wrapped CommandError")
	}
}

// A Commit that panics is followed by the runtime's Rollback (runtime.InboxTx),
// which must still end the claim: it had done nothing once the Commit had
// used up a sync.Once. No server is needed: the session is missing, so
// committing panics, and the lease's deletion fails quickly.
func TestRollbackAfterAPanickingCommitEndsTheClaim(t *testing.T) {
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=50"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	in, err := New(client.Database("lily_inbox_panic"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	stops := 0
	c := &claimTx{in: in, stopRenew: func() { stops++ }}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("Commit without a session did not panic")
			}
		}()
		_ = c.Commit(context.Background())
	}()
	c.Rollback(context.Background())
	if stops != 2 {
		t.Fatalf("the claim's renewal was stopped %d times, want 2: the Rollback after the panic did nothing", stops)
	}
	c.Rollback(context.Background())
	if err := c.Commit(context.Background()); err == nil || stops != 2 {
		t.Fatalf("after the Rollback: Commit = %v, renewal stopped %d times; want an error and 2", err, stops)
	}
}
