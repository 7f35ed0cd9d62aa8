// Package mongoinbox is Lily's transactional inbox on MongoDB (driver v2),
// in a Go module of its own so that services without MongoDB never have the
// driver in their module graph.
//
// A claim takes two steps. First a lease: a document in the lease collection,
// written outside any transaction so other workers see it, holds the message
// for Options.Lease and is renewed while the handler runs, up to the
// transaction's lifetime; a worker meeting a live lease defers (or answers
// duplicate when a majority holds the marker), and one meeting an expired
// lease takes it over. Then a marker: inside the
// transaction that carries the handler's writes, a document keyed by
// (consumer, message id) is inserted in the marker collection. The marker
// commits exactly when the business writes do, and its unique _id is the
// fence: of two workers that both got past the lease, only one transaction
// can commit it. A marker already committed means duplicate.
// docs/inbox.md tells the whole contract.
package mongoinbox

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/lily-mq/lily/internal/reserve"
	"github.com/lily-mq/lily/runtime"
)

// Options tune an Inbox. The zero value takes the defaults.
type Options struct {
	// Lease is how long a claim holds the message off other workers without
	// being renewed. Default 30s.
	Lease time.Duration
	// RenewEvery is how often the lease is extended while the claim's
	// transaction is open, up to TransactionLifetime. Default Lease/3; New
	// refuses one that is not shorter than Lease.
	RenewEvery time.Duration
	// TransactionLifetime is how long after the claim its lease may last:
	// the server's transactionLifetimeLimitSeconds, after which it aborts
	// the claim's transaction and nothing can commit it. Renewal stops
	// there, so that a handler that never returns (abandoned at its
	// timeout) does not hold the message off for ever. Default 60s, the
	// server's default; set the server's value where it was changed.
	TransactionLifetime time.Duration
	// RetryEvery is the pause before retrying a claim that met a transient
	// transaction error, or a commit whose result is unknown. Default 100ms.
	RetryEvery time.Duration
	// ClaimRetries bounds the retries of a claim's transaction after a
	// transient error (a write conflict, a failover); then the claim defers.
	// Default 5.
	ClaimRetries int
	// Markers and Leases name the two collections. Defaults "lily_inbox"
	// and "lily_inbox_leases".
	Markers, Leases string
}

// The defaults of Options.
const (
	DefaultLease               = 30 * time.Second
	DefaultTransactionLifetime = 60 * time.Second
	DefaultRetryEvery          = 100 * time.Millisecond
	DefaultClaimRetries        = 5
	DefaultMarkers             = "lily_inbox"
	DefaultLeases              = "lily_inbox_leases"
)

// Inbox implements runtime.Inbox on one MongoDB database of a replica set
// or sharded cluster (transactions need one).
type Inbox struct {
	client  *mongo.Client
	markers *mongo.Collection
	// majority reads the markers a majority holds, from the primary.
	majority *mongo.Collection
	leases   *mongo.Collection
	opts     Options
}

var _ runtime.Inbox = (*Inbox)(nil)

// New returns an inbox keeping its collections in db, or an error when opts
// do not make sense.
func New(db *mongo.Database, opts Options) (*Inbox, error) {
	if opts.Lease <= 0 {
		opts.Lease = DefaultLease
	}
	if opts.RenewEvery <= 0 {
		opts.RenewEvery = opts.Lease / 3
	}
	if opts.RenewEvery >= opts.Lease {
		// The lease would run out before its renewal: another worker could
		// take it over while the handler runs, every time.
		return nil, fmt.Errorf("mongoinbox: Options.RenewEvery %s is not shorter than Lease %s", opts.RenewEvery, opts.Lease)
	}
	if opts.TransactionLifetime <= 0 {
		opts.TransactionLifetime = DefaultTransactionLifetime
	}
	if opts.RetryEvery <= 0 {
		opts.RetryEvery = DefaultRetryEvery
	}
	if opts.ClaimRetries <= 0 {
		opts.ClaimRetries = DefaultClaimRetries
	}
	if opts.Markers == "" {
		opts.Markers = DefaultMarkers
	}
	if opts.Leases == "" {
		opts.Leases = DefaultLeases
	}
	markers := db.Collection(opts.Markers)
	majority := markers.Clone(options.Collection().
		SetReadConcern(readconcern.Majority()).
		SetReadPreference(readpref.Primary()))
	return &Inbox{client: db.Client(), markers: markers, majority: majority, leases: db.Collection(opts.Leases), opts: opts}, nil
}

// Migrate checks that the server is a replica set member or a mongos
// (MongoDB has transactions nowhere else), creates the two collections if
// they are missing (MongoDB before 4.4 cannot create a collection inside a
// transaction) and a TTL index that removes leases abandoned by workers that
// died. Safe to call at every start.
func (in *Inbox) Migrate(ctx context.Context) error {
	// On a standalone server every claim would take its lease, fail at the
	// marker and defer: the queue would make no progress, quietly. Say so
	// at start instead.
	var hello helloReply
	err := in.markers.Database().RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello)
	if hasCode(err, codeCommandNotFound) {
		// hello came in 4.4.2; the driver still speaks to 4.4.0.
		err = in.markers.Database().RunCommand(ctx, bson.D{{Key: "isMaster", Value: 1}}).Decode(&hello)
	}
	if err != nil {
		return failed("hello", err)
	}
	if err := hello.check(); err != nil {
		return err
	}
	for _, c := range []*mongo.Collection{in.markers, in.leases} {
		err := c.Database().CreateCollection(ctx, c.Name())
		var cmdErr mongo.CommandError
		if err != nil && !(errors.As(err, &cmdErr) && cmdErr.Name == "NamespaceExists") {
			return failed("create "+c.Name(), err)
		}
	}
	_, err = in.leases.Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: "claimed_until", Value: 1}},
		Options: options.Index().SetExpireAfterSeconds(0),
	})
	if err != nil {
		return failed("lease TTL index", err)
	}
	return nil
}

// helloReply is what Migrate reads of the hello command's answer.
type helloReply struct {
	SetName string `bson:"setName"` // set on a replica set member
	Msg     string `bson:"msg"`     // "isdbgrid" on a mongos
}

// check refuses a server on which no transaction can run.
func (h helloReply) check() error {
	if h.SetName != "" || h.Msg == "isdbgrid" {
		return nil
	}
	return errors.New("mongoinbox: the inbox is misconfigured: the server is neither a replica set member nor a mongos, and MongoDB has transactions nowhere else (a single server can run as a one-member replica set)")
}

// Server error codes.
const (
	codeUnauthorized     = 13
	codeIllegalOperation = 20 // among others: a transaction on a standalone server
	codeCommandNotFound  = 59
)

func hasCode(err error, code int) bool {
	var s mongo.ServerError
	return errors.As(err, &s) && s.HasErrorCode(code)
}

// misconfigured tells a failure that no redelivery mends: Unauthorized (the
// user may not read or write a collection of the inbox's) or
// IllegalOperation (among others, "Transaction numbers are only allowed on
// a replica set member or mongos": a standalone server).
func misconfigured(err error) bool {
	return hasCode(err, codeUnauthorized) || hasCode(err, codeIllegalOperation)
}

// errMisconfigured is Begin's error for a misconfigured inbox. The runtime
// defers the claim as it defers any other, and will defer the next: the
// error says that only mending the deployment ends it, for the deferral's
// record and log line to show.
func errMisconfigured(err error) error {
	return fmt.Errorf("mongoinbox: the inbox is misconfigured, every claim defers until it is mended: %w", err)
}

// failed is Begin's error for a step that failed: misconfigured, said so,
// or named by the step.
func failed(step string, err error) error {
	if misconfigured(err) {
		return errMisconfigured(err)
	}
	return fmt.Errorf("mongoinbox: %s: %w", step, err)
}

// Session returns the claim's session that InboxTx.Bind put in ctx. The
// handler needs it rarely: any operation given that ctx already runs in the
// claim's transaction. The inbox commits or aborts it, never the handler:
// Commit refuses a transaction that lost the claim's marker (one the handler
// aborted, then started anew), and reports it failed; when the handler ended
// the transaction, Commit answers by whether the marker committed.
func Session(ctx context.Context) (*mongo.Session, bool) {
	s := mongo.SessionFromContext(ctx)
	return s, s != nil
}

func key(consumer, messageID string) bson.D {
	return bson.D{{Key: "c", Value: consumer}, {Key: "m", Value: messageID}}
}

// Begin takes the lease, then inserts the marker in a new transaction. Its
// error says when the inbox is misconfigured (a standalone server, a user
// without the privileges it needs).
func (in *Inbox) Begin(ctx context.Context, consumer, messageID string) (runtime.InboxTx, error) {
	id := key(consumer, messageID)
	owner := rand.Text()
	now := time.Now()
	end := now.Add(in.opts.TransactionLifetime)
	// Matches a missing or expired lease; a live one makes the upsert's
	// insert collide on _id.
	_, err := in.leases.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: id}, {Key: "claimed_until", Value: bson.D{{Key: "$lte", Value: now}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "owner", Value: owner}, {Key: "claimed_until", Value: leaseUntil(now, in.opts.Lease, end)}}}},
		options.UpdateOne().SetUpsert(true))
	if mongo.IsDuplicateKeyError(err) {
		return in.byMarker(ctx, id, "another worker holds the lease, and reading the marker failed", errLeaseHeld)
	}
	if err != nil {
		return nil, failed("lease", err)
	}
	c := &claimTx{in: in, id: id, owner: owner}
	for try := 0; ; try++ {
		err := c.start(ctx, now)
		if err == nil {
			c.renew(end)
			return c, nil
		}
		c.abort(ctx)
		switch {
		case mongo.IsDuplicateKeyError(err):
			c.release()
			return in.byMarker(ctx, id, "read the marker", errUndecided)
		case hasLabel(err, "TransientTransactionError") && try < in.opts.ClaimRetries && pause(ctx, in.opts.RetryEvery):
			continue
		case hasLabel(err, "TransientTransactionError"):
			// Most often another worker's open transaction holds the marker:
			// its lease expired while its handler still ran.
			c.release()
			return nil, fmt.Errorf("mongoinbox: transient transaction error, retries spent: %w", err)
		default:
			c.release()
			return nil, failed("claim", err)
		}
	}
}

// byMarker answers a claim that met another's hold on its message: a
// marker insert that collided, or a live lease. The marker the insert met
// may be on the primary alone (another worker's commit whose majority never
// confirmed it, its lease since expired): a failover would undo it. And a
// lease can outlive its claim's commit (the worker died between the commit
// and the lease's release, or an ambiguous commit landed, its lease kept on
// purpose), where waiting for it to expire would defer every redelivery for
// up to Lease. So a majority read on the primary decides: the marker found
// is a duplicate; else the claim defers, as absent says; a failed read is
// the step's failure.
func (in *Inbox) byMarker(ctx context.Context, id bson.D, step string, absent error) (runtime.InboxTx, error) {
	found, err := in.committed(ctx, bson.D{{Key: "_id", Value: id}})
	switch {
	case err != nil:
		return nil, failed(step, err)
	case found:
		return nil, errAlreadyCommitted
	default:
		return nil, absent
	}
}

var (
	errAlreadyCommitted = fmt.Errorf("mongoinbox: already committed for this consumer: %w", runtime.ErrDuplicate)
	errUndecided        = errors.New("mongoinbox: the marker is not majority-committed yet: another worker's commit is undecided")
	errLeaseHeld        = errors.New("mongoinbox: another worker holds the lease")
)

// committed reports whether a majority holds a marker matching filter: a
// marker there survives any failover. It reads from the primary, whatever
// the client's read preference: a lagging secondary would not have it yet.
func (in *Inbox) committed(ctx context.Context, filter bson.D) (bool, error) {
	err := in.majority.FindOne(ctx, filter).Err()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return false, nil
	}
	return err == nil, err
}

// pause waits d, or reports false when ctx ends first.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func hasLabel(err error, label string) bool {
	var l mongo.LabeledError
	return errors.As(err, &l) && l.HasErrorLabel(label)
}

type claimTx struct {
	in    *Inbox
	id    bson.D
	owner string
	sess  *mongo.Session

	stopRenew func()
	// ended: a Commit or Rollback has ended the claim. A Commit that panics
	// leaves it open, for the Rollback the runtime calls after it.
	ended atomic.Bool
}

// start opens a session and a transaction and inserts the marker in it.
func (c *claimTx) start(ctx context.Context, now time.Time) error {
	sess, err := c.in.client.StartSession()
	if err != nil {
		return err
	}
	c.sess = sess
	err = sess.StartTransaction(txOptions())
	if err != nil {
		return err
	}
	_, err = c.in.markers.InsertOne(mongo.NewSessionContext(ctx, sess),
		bson.D{{Key: "_id", Value: c.id}, {Key: "owner", Value: c.owner}, {Key: "claimed_at", Value: now}})
	return err
}

// txOptions are the claim's transaction's. Read preference primary: a
// transaction reads from the primary alone, and would otherwise take the
// client's, with which (secondaryPreferred, say) every read in it fails
// ("read preference in a transaction must be primary").
func txOptions() *options.TransactionOptionsBuilder {
	return options.Transaction().
		SetReadConcern(readconcern.Snapshot()).
		SetWriteConcern(writeconcern.Majority()).
		SetReadPreference(readpref.Primary())
}

// abort ends the transaction and the session, if any.
func (c *claimTx) abort(ctx context.Context) {
	if c.sess == nil {
		return
	}
	// An abort that fails leaves the server to abort the transaction when
	// its lifetime limit passes; the marker is not committed either way.
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	_ = c.sess.AbortTransaction(ctx)
	c.sess.EndSession(ctx)
	c.sess = nil
}

// cleanupContext bounds the steps that end a claim: they run even when the
// delivery's ctx has ended, since leaving them undone only costs waiting.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
}

// renew extends the lease every RenewEvery until stopRenew is called, or
// until end, the transaction's lifetime, past which no commit can land. The
// renewal runs outside the claim's transaction, so the lease stays visible
// to other workers.
func (c *claimTx) renew(end time.Time) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		keepLease(ctx, c.in.opts.RenewEvery, c.in.opts.Lease, end, func(ctx context.Context, until time.Time) {
			// A failed or lost renewal is not fatal: the marker, not the
			// lease, keeps two commits apart. It only lets a second worker
			// start the handler, whose claim then defers or fails to commit.
			_, _ = c.in.leases.UpdateOne(ctx,
				bson.D{{Key: "_id", Value: c.id}, {Key: "owner", Value: c.owner}},
				bson.D{{Key: "$set", Value: bson.D{{Key: "claimed_until", Value: until}}}})
		})
	}()
	c.stopRenew = func() { cancel(); <-done }
}

// keepLease calls extend every `every` with the lease's new end, until ctx
// ends or the lease has been extended to end.
func keepLease(ctx context.Context, every, lease time.Duration, end time.Time, extend func(context.Context, time.Time)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		until := leaseUntil(time.Now(), lease, end)
		extend(ctx, until)
		if until.Equal(end) {
			return
		}
	}
}

// leaseUntil is the end of a lease taken or renewed at now: lease later,
// but never past end.
func leaseUntil(now time.Time, lease time.Duration, end time.Time) time.Time {
	if until := now.Add(lease); until.Before(end) {
		return until
	}
	return end
}

// release deletes our lease so the next delivery need not wait for it.
func (c *claimTx) release() {
	ctx, cancel := cleanupContext(context.Background())
	defer cancel()
	// A lease left behind expires on its own.
	_, _ = c.in.leases.DeleteOne(ctx, bson.D{{Key: "_id", Value: c.id}, {Key: "owner", Value: c.owner}})
}

func (c *claimTx) Bind(ctx context.Context) context.Context {
	return mongo.NewSessionContext(ctx, c.sess)
}

func (c *claimTx) Rollback(ctx context.Context) {
	if c.ended.Swap(true) {
		return
	}
	c.stopRenew()
	c.abort(ctx)
	c.release()
}

// Commit commits, retrying while the result is unknown, within ctx, once it
// has found the marker in the transaction it commits. When the handler ended
// the transaction itself, Commit answers by whether the marker committed.
func (c *claimTx) Commit(ctx context.Context) error {
	if c.ended.Swap(true) {
		return errors.New("mongoinbox: already committed or rolled back")
	}
	returned := false
	defer func() {
		if !returned {
			c.ended.Store(false) // panicked: the Rollback after it ends the session
		}
	}()
	c.stopRenew()
	var err error
	if c.sess.TransactionRunning() {
		err = c.markerInTransaction(ctx)
		if err == nil {
			err = commitWithRetry(ctx, c.sess.CommitTransaction, c.in.opts.RetryEvery)
		}
	} else {
		err = c.endedByHandler(ctx)
	}
	end, cancel := cleanupContext(ctx)
	defer cancel()
	c.sess.EndSession(end)
	// An ambiguous commit keeps its lease until it expires, so that a
	// redelivery defers instead of racing a commit that may yet land.
	if !errors.Is(err, runtime.ErrCommitAmbiguous) {
		c.release()
	}
	returned = true
	return err
}

// markerInTransaction checks that the open transaction holds the claim's
// marker. The handler has the session (Session, or the driver's
// SessionFromContext): one that aborted the claim's transaction and started
// another, as MongoDB's retry advice leads authors to do, lost the marker with
// the first, and committing the second would commit business writes with no
// marker to make a redelivery a duplicate. The driver tells no transaction
// from the next (the transaction number is not in its API), so the check
// reads the marker in the transaction: one round trip per commit. A
// transaction started with no operation since (the handler aborted the
// claim's and started another) begins on this read, and does not hold the
// marker either.
func (c *claimTx) markerInTransaction(ctx context.Context) error {
	// Under the commit's earlier deadline: the answer, failed, must reach
	// the runtime within its step.
	ctx, cancel := reserve.Before(ctx)
	defer cancel()
	err := c.in.markers.FindOne(mongo.NewSessionContext(ctx, c.sess),
		bson.D{{Key: "_id", Value: c.id}, {Key: "owner", Value: c.owner}}).Err()
	return markerVerdict(err)
}

// endedByHandler answers Commit when no transaction is running: the
// handler ended one itself, and the driver's state does not tell which, nor
// how. A commit that landed turns the state to none at the next operation,
// when CommitTransaction fails; a commit right after a StartTransaction sends
// nothing and succeeds, though the claim's transaction was aborted. So the
// server answers: the marker, with our owner, committed or not.
func (c *claimTx) endedByHandler(ctx context.Context) error {
	// Under the commit's earlier deadline, as markerInTransaction.
	ctx, cancel := reserve.Before(ctx)
	defer cancel()
	found, err := c.in.committed(ctx, bson.D{{Key: "_id", Value: c.id}, {Key: "owner", Value: c.owner}})
	switch {
	case err != nil:
		// The handler may have committed the marker: unknown.
		return fmt.Errorf("mongoinbox: the handler ended the claim's transaction, and reading its marker failed: %w: %w", err, runtime.ErrCommitAmbiguous)
	case found:
		return nil
	default:
		return errors.New("mongoinbox: commit failed: the handler ended the claim's transaction, and the claim's marker is not committed")
	}
}

// markerVerdict is Commit's answer to the marker's lookup in the transaction
// about to be committed: nil to commit it, or, with no commitTransaction sent
// and the transaction left to be aborted, a failure, for certain.
func markerVerdict(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, mongo.ErrNoDocuments):
		return errors.New("mongoinbox: commit refused: the claim's marker is not in the transaction, so the handler ended the claim's transaction and started another; nothing was committed")
	default:
		return failed("commit: look the marker up", err)
	}
}

// commitWithRetry calls commit until it succeeds or fails for certain, or
// ctx ends while the result is still unknown.
//
// The attempts run under an earlier deadline than ctx's (package reserve), and
// only those after it under ctx: an attempt cut off at that deadline is then
// retried in the time kept back, and commitTransaction retried answers for
// it (committed, or the transaction gone). An attempt cut at ctx's own
// deadline could not be, nor could any answer after it reach the runtime.
//
// Once one attempt's result was unknown, a later failure proves nothing about
// it (a connection error, an unsatisfiable write concern), so only a
// TransientTransactionError (the transaction is gone) is still a failure.
func commitWithRetry(ctx context.Context, commit func(context.Context) error, every time.Duration) error {
	first, cancel := reserve.Before(ctx)
	defer cancel()
	unknown := false
	for {
		attempt := first
		if first.Err() != nil {
			attempt = ctx
		}
		err := commit(attempt)
		switch {
		case err == nil:
			return nil
		case unknown && !hasLabel(err, "TransientTransactionError") && !unknownResult(attempt, err):
			return fmt.Errorf("mongoinbox: an earlier commit attempt's result is unknown, and this one failed: %w: %w", err, runtime.ErrCommitAmbiguous)
		case !unknownResult(attempt, err):
			// Among these, TransientTransactionError: the transaction is gone
			// (aborted by the server, a failover) and only a new run of the
			// handler can redo it.
			return fmt.Errorf("mongoinbox: commit: %w", err)
		case !pause(ctx, every):
			return fmt.Errorf("mongoinbox: commit result unknown by the deadline: %w: %w", err, runtime.ErrCommitAmbiguous)
		}
		unknown = true
	}
}

// unknownResult tells an error after which the transaction may have
// committed: the driver's label for it, or a deadline that cut the commit
// off (the driver then leaves the transaction open for a retry).
func unknownResult(ctx context.Context, err error) bool {
	return hasLabel(err, "UnknownTransactionCommitResult") || mongo.IsTimeout(err) || ctx.Err() != nil
}
