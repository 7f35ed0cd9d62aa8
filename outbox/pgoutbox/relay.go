package pgoutbox

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lily-mq/lily/internal/backoff"
	"github.com/lily-mq/lily/internal/connectnote"
	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/internal/writegate"
	"github.com/lily-mq/lily/runtime"
)

// Options tune a Relay. The zero value takes the defaults.
type Options struct {
	// Poll is the pause before the next look for due rows after a look
	// that leased fewer rows than it had room for (Batch less the rows in
	// flight) and bodies under its room in MaxBytes, and marked no row held
	// behind its key: it found all that was due. After any other look the
	// relay looks again at once, once it has room (half a Batch, or none in
	// flight, and bodies under MaxBytes); and at once too after it deletes
	// a keyed row, or its sweep clears a mark, which makes a key's next row
	// due. Default 200ms.
	Poll time.Duration
	// Lease is how long a relay holds the rows it leased: no other relay
	// publishes them before it ends. Each send's deadline is four fifths of
	// it, and a publish whose write the broker does not read may still take
	// one step (the publisher's StepTimeout) past its deadline before it
	// gives up: keep Lease above five times StepTimeout, or a send may
	// outlive its lease while another relay publishes the row too, and
	// then the next row of its key, before the late write lands. The
	// relay does not check it: the publisher does not say its
	// StepTimeout. The rows of a relay that dies wait this long. A row
	// whose message a look left to its send to read (past the look's
	// 2 MiB) has its lease and its send's deadline extended by that read's
	// bound: 10s and a second per MiB of body. Default 30s (the default
	// step is 5s).
	Lease time.Duration
	// Batch is the most rows a relay leases at a time, and has in flight.
	// Default 100.
	Batch int
	// MaxBytes bounds the bodies a relay holds in flight: it leases no more
	// rows once they take MaxBytes, and of the rows a look finds, those
	// after the one that reaches it wait for a later look. That one is
	// leased whatever its size, beside the others, so the bodies in flight
	// take less than MaxBytes plus the largest body (and reading a body
	// takes about twice its size for a moment). Default 64 MiB.
	//
	// A look returns 2 MiB of messages at most, so that a slow link to
	// PostgreSQL reads it well within its bound; the sends of the rows past
	// that read their messages apart, two at a time.
	MaxBytes int
	// MaxBackoff caps the wait before a row whose publish failed is tried
	// again; the wait starts at 1s and doubles with each failure.
	// Default 1m.
	MaxBackoff time.Duration
	// Logger receives the relay's failures and its start and stop, and at
	// debug level each confirmed publish; slog.Default() when nil.
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Poll <= 0 {
		o.Poll = 200 * time.Millisecond
	}
	if o.Lease <= 0 {
		o.Lease = 30 * time.Second
	}
	if o.Batch <= 0 {
		o.Batch = 100
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 64 << 20
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// The paths of a relay's Report: what the broker said of each publish.
const (
	pathPublished   runtime.Path = "published"   // confirmed; the row is deleted
	pathReturned    runtime.Path = "returned"    // routed to no queue; the row stays for a retry
	pathNacked      runtime.Path = "nacked"      // refused; retried, maybe a copy
	pathUnconfirmed runtime.Path = "unconfirmed" // written, no confirm; retried, maybe a copy
	pathFailed      runtime.Path = "failed"      // not written, or the row unreadable; retried
)

const (
	// firstBackoff is the wait before a failed row's first retry.
	firstBackoff = time.Second
	// maxDBBackoff caps the pause after a database error: the relay goes on
	// soon after the database is back.
	maxDBBackoff = 5 * time.Second
	// dbStep bounds each statement of the relay's. Statements do not end
	// with Run's context: a lease cut short may have committed, and its rows
	// would wait for the lease's end.
	dbStep = 10 * time.Second
	// stopTimeout bounds the recording of the last answers as the relay
	// stops, its retries when the database fails included.
	stopTimeout = 5 * time.Second
	// stopWait bounds the stop's wait for the sends in flight. A healthy
	// broker answers in milliseconds; a send that waits to be written (a
	// connection blocked by a resource alarm, a full window, a dial) would
	// wait out its lease, four fifths of it, past Serve's 25 s. It writes
	// nothing once the stop has begun (send), so no write begun in the
	// wait holds the stop a step past it.
	stopWait = 5 * time.Second
	// maxCopies bounds the possible copies a report lists.
	maxCopies = 1000
	// maxIDText bounds a message id the relay logs and reports; maxName an
	// exchange's or a routing key's name, as AMQP does.
	maxIDText = 128
	maxName   = 255
	// maxTableName bounds the table's schema-qualified name the relay logs
	// and reports: a schema's name of 63 bytes (PostgreSQL's limit), each
	// byte escaped in four, in quotes, and the table's.
	maxTableName = 4*63 + len(`"".lily_outbox`)
	// maxLastError bounds a row's last_error, and the error text the relay
	// logs and reports.
	maxLastError = 500
	// inlineBytes bounds the properties and bodies a look returns, so that
	// a link of 1 MiB/s carries its answer in a fifth of its bound; the
	// rest of the rows it leases are read by their sends (fetchSQL).
	inlineBytes = 2 << 20
	// minReadRate is the slowest rate, in bytes a second, at which a
	// send's read of its row is bound to finish (readBudget): a row read
	// slower fails, with its attempts and why, as a publish does.
	minReadRate = 1 << 20
	// maxFetches bounds the reads of rows a relay runs at a time.
	maxFetches = 2
)

// Relay publishes the rows of lily_outbox and deletes each after its
// confirm. Several relays may run on one table, in one process or many:
// leases keep them off each other's rows. A Relay implements
// runtime.Service, and runs once.
type Relay struct {
	pool      *pgxpool.Pool
	publisher *runtime.Publisher
	opts      Options
	// owner names this relay in lease_owner: random, so that a restarted
	// process never mistakes its predecessor's leases for its own.
	owner     string
	ran       atomic.Bool
	health    atomic.Pointer[relayHealth] // the Run's, for Health; nil before it
	forceNow  chan struct{}
	forceOnce sync.Once
}

var _ runtime.Service = (*Relay)(nil)

// NewRelay returns a relay that reads lily_outbox through pool and publishes
// through publisher. It does not close the publisher.
func NewRelay(pool *pgxpool.Pool, publisher *runtime.Publisher, opts Options) *Relay {
	host, _ := os.Hostname()
	return &Relay{
		pool: pool, publisher: publisher, opts: opts.withDefaults(),
		owner:    fmt.Sprintf("%s/%d/%s", sanitize.Text(host, 64), os.Getpid(), crand.Text()[:12]),
		forceNow: make(chan struct{}),
	}
}

// Force asks a stopping relay not to wait for its sends in flight: they give
// up at once. The rows of those not yet written are released for any relay
// to take; those written are retried later, by this relay's successor or
// another relay, and such a publish may still reach its queue, so the retry
// may make a copy. As a Consumer's, a Force
// before Run does nothing: a Run begun later lets its sends end.
func (r *Relay) Force() {
	if r.ran.Load() {
		r.forceOnce.Do(func() { close(r.forceNow) })
	}
}

// Run publishes due rows until ctx is done. Then it leases no more rows and
// begins no write: a send not yet written (reading its row, waiting for a
// connection, a slot in the publisher's window, or while the broker blocks
// publishers) writes nothing, however soon it could, and has its row
// released for any relay to take at once. It lets the sends written wait
// for their confirms for 5s at most (at once after Force), then gives them
// up as Force does: those unconfirmed are possible copies. It deletes the
// confirmed rows, records the failed ones (within 5s), and returns its
// report: Queue is "outbox " and the table, and Counts counts the publishes
// by what the broker said: "published", "returned", "nacked", "unconfirmed"
// and "failed" (not written, or a row it could not read); a send given up
// unwritten at the stop is no publish, and is not counted.
// PossibleCopies lists unconfirmed and nacked publishes, and confirmed ones
// whose row it could not delete; each will be published again. It lists too,
// with a warning, a confirmed publish whose row was no longer its own when
// it came to delete it (gone, or leased by another relay: its lease had
// ended before the delete), which another relay may have published again;
// it leaves such a row to a relay that still holds it, so that the next
// row of its key goes only after that relay's copy. Past its first 1,000,
// Omitted counts those left out.
//
// It uses the lily_outbox its pool's search_path finds when it starts, and
// names that table with its schema in every statement: a session-level SET
// search_path that another user of the pool leaves on a connection does not
// move it.
//
// A database it cannot reach, or that fails, is logged and tried again
// after a pause: Run goes on. It returns an error only when lily_outbox does
// not exist when it starts, lacks a migration or is a temporary table, or
// when it ran before.
func (r *Relay) Run(ctx context.Context) (_ *runtime.Report, err error) {
	if !r.ran.CompareAndSwap(false, true) {
		return nil, errors.New("pgoutbox: a Relay runs once")
	}
	sendCtx, abandon := context.WithCancel(context.Background())
	defer abandon()
	s := &relayRun{
		Relay: r, queue: "outbox lily_outbox", sendCtx: sendCtx, abandon: abandon, stopping: ctx.Done(),
		results: make(chan sent, r.opts.Batch), fetches: make(chan struct{}, maxFetches),
		report: &runtime.Report{Started: time.Now(), Counts: map[runtime.Path]int{}},
		health: &relayHealth{stopping: ctx.Done()},
	}
	// Copies: findTable names the table in s.queue while a probe may read.
	before := s.queue
	s.health.queue.Store(&before)
	r.health.Store(s.health)
	defer func() { s.health.ended.Store(endedWith(err)) }()
	if err := s.findTable(ctx); err != nil {
		return nil, err
	}
	queue := s.queue
	s.health.queue.Store(&queue)
	r.opts.Logger.Info("lily outbox", "queue", s.queue, "stage", "relay-started", "owner", r.owner)
	s.loop(ctx)
	s.stop()
	s.report.Queue, s.report.Stopped = s.queue, time.Now()
	r.opts.Logger.Info("lily outbox", "queue", s.queue, "stage", "relay-stopped", "counts", s.report.Counts,
		"possible_copies", len(s.report.PossibleCopies))
	return s.report, nil
}

// relayRun is the state of one Run.
type relayRun struct {
	*Relay
	queue string // "outbox " and the table's schema-qualified name
	// sql is the run's statements, on the table findTable found.
	sql statements
	// sendCtx is the sends' parent: cancelled by Force once stopping, or
	// stopWait into the stop.
	sendCtx context.Context
	abandon context.CancelFunc
	// stopping is closed when the stop begins (Run's ctx is done): from
	// then on no send starts its write, or its read of its row.
	stopping <-chan struct{}
	results  chan sent     // each send's answer; room for every send in flight
	fetches  chan struct{} // a slot for each read of a row in progress
	// inflight counts the sends not yet answered, and inflightBytes their
	// bodies; pending holds the answers not yet written to the table.
	inflight, inflightBytes int
	pending                 []sent
	// nextLease is when to look for due rows again; dbRetry, after a
	// database error, when to use the database again, and dbFailures how
	// many failed in a row.
	nextLease, dbRetry time.Time
	dbFailures         int
	// nextSweep is when to clear the marks the relay could not (sweepSQL),
	// and sweepFrom the key after which the sweep goes on (nil: the first).
	nextSweep time.Time
	sweepFrom *string
	report    *runtime.Report
	health    *relayHealth
}

// row is a leased row of the outbox.
type row struct {
	id       int64
	msg      runtime.Message
	attempts int       // failed publishes before this one
	size     int       // the stored body's bytes
	sendBy   time.Time // the send's deadline, within the lease
	unread   error     // why the stored message could not be read
	// keyed is a row whose order_key is not NULL: '' too, stored by hand
	// or by another tool (Write stores none as NULL), is a key to the look,
	// whose next row waits for this one's deletion to clear its mark.
	keyed bool
	// fetch is a row leased without its properties and body: its send
	// reads them.
	fetch bool
	// deleteUnknown is a confirmed row whose delete failed, perhaps after
	// its commit.
	deleteUnknown bool
}

// sent is what became of one row's send: nil is confirmed. released is a
// row neither published nor tried (a send given up unwritten as the relay
// stops, a row whose read waited for a slot past its lease, or a row of a
// look whose commit's outcome is unknown): it is due again at once.
// published: err is the publisher's answer, not a failure to read the row.
type sent struct {
	row       *row
	err       error
	released  bool
	published bool
}

// loop leases, sends and records until ctx is done.
func (s *relayRun) loop(ctx context.Context) {
	for ctx.Err() == nil {
		now := time.Now()
		if len(s.pending) > 0 && !now.Before(s.dbRetry) {
			if err := s.record(time.Now().Add(dbStep)); err != nil {
				s.dbFailed("record", err)
			}
		}
		room, bytes := s.opts.Batch-s.inflight, s.opts.MaxBytes-s.inflightBytes
		// Half a batch at least, so that each answer does not cost a look.
		canLease := room > 0 && bytes > 0 && (s.inflight == 0 || room >= s.opts.Batch/2)
		// A stop during the record leases nothing: the stop waits for no
		// second statement.
		canLease = canLease && ctx.Err() == nil
		if canLease && !now.Before(s.nextSweep) && !now.Before(s.dbRetry) {
			s.sweep()
		}
		if canLease && ctx.Err() == nil && !now.Before(s.nextLease) && !now.Before(s.dbRetry) {
			s.lease(room, bytes)
		}
		// Wait for an answer, or the time to lease or record again.
		var wake time.Time
		if canLease {
			wake = later(s.nextLease, s.dbRetry)
		}
		if len(s.pending) > 0 && (wake.IsZero() || s.dbRetry.Before(wake)) {
			wake = s.dbRetry
		}
		s.wait(ctx, wake)
	}
}

// wait waits for an answer, until wake (unless it is zero), or until ctx is
// done.
func (s *relayRun) wait(ctx context.Context, wake time.Time) {
	var timer <-chan time.Time
	if !wake.IsZero() {
		t := time.NewTimer(time.Until(wake))
		defer t.Stop()
		timer = t.C
	}
	select {
	case a := <-s.results:
		s.answered(a)
		s.drain()
	case <-timer:
	case <-ctx.Done():
	}
}

// drain takes the answers already waiting, so that one statement records
// them all.
func (s *relayRun) drain() {
	for {
		select {
		case a := <-s.results:
			s.answered(a)
		default:
			return
		}
	}
}

// errStopping refuses the write of a send the stop found not yet written.
var errStopping = errors.New("the relay is stopping")

// send publishes one row and hands its answer to the loop. Once the stop
// has begun, a send not yet written writes nothing and releases its row:
// the stop's wait is for the sends written, whose confirms it may save,
// and a write begun in it, which the broker may not read, would hold the
// stop a step (the publisher's StepTimeout) past it.
func (s *relayRun) send(rw *row) {
	if rw.fetch {
		if s.stopped() {
			s.results <- sent{row: rw, err: errStopping, released: true}
			return
		}
		err := s.fetch(rw)
		if err != nil && (errors.Is(err, errLeaseGone) || errors.Is(err, errNoFetchSlot) || s.sendCtx.Err() != nil) {
			// Not read, nothing published: the row is due again at once
			// (for a lease no longer the relay's, its release changes
			// nothing).
			s.results <- sent{row: rw, err: err, released: true}
			return
		}
		if err != nil {
			s.results <- sent{row: rw, err: err}
			return
		}
	}
	err := rw.unread
	if err != nil {
		err = fmt.Errorf("the stored message cannot be read: %w", err)
	} else {
		var refused atomic.Bool
		ctx, cancel := context.WithDeadline(s.sendCtx, rw.sendBy)
		ctx = writegate.With(ctx, func() error {
			if s.stopped() {
				refused.Store(true)
				return errStopping
			}
			return nil
		})
		// A send waits for the broker until its deadline: Health hears why
		// meanwhile.
		ctx = connectnote.With(ctx, func(err error) { note(&s.health.broker, fmt.Errorf("waiting for a connection: %w", err)) })
		err = s.publisher.Send(ctx, rw.msg)
		cancel()
		if err != nil && (refused.Load() || pathOf(err) == pathFailed && s.sendCtx.Err() != nil) {
			// Given up unwritten at the stop: nothing of it is in a queue.
			s.results <- sent{row: rw, err: err, released: true}
			return
		}
		s.results <- sent{row: rw, err: err, published: true}
		return
	}
	s.results <- sent{row: rw, err: err}
}

// stopped reports whether the stop has begun.
func (s *relayRun) stopped() bool {
	select {
	case <-s.stopping:
		return true
	default:
		return false
	}
}

// answered counts and logs one send's answer, and keeps it to be recorded.
func (s *relayRun) answered(a sent) {
	s.inflight--
	s.inflightBytes -= a.row.size
	a.row.msg.Body = nil // its answer is kept until recorded; its body need not be
	s.pending = append(s.pending, a)
	if a.released {
		return
	}
	path := pathOf(a.err)
	s.report.Counts[path]++
	if a.published {
		// The broker answered a publish it confirmed, returned or nacked:
		// it is there. One it left unanswered, or that was not written,
		// tells that it, or the link to it, fails.
		var unanswered error
		if path == pathUnconfirmed || path == pathFailed {
			unanswered = fmt.Errorf("%s: %w", path, a.err)
		}
		note(&s.health.broker, unanswered)
	}
	attrs := func() []any {
		return []any{"queue", s.queue, "stage", "publish", "outbox_id", a.row.id, "message_id", idText(a.row.msg.MessageId),
			"destination", destination(a.row.msg), "attempt", a.row.attempts + 1, "path", string(path)}
	}
	if a.err == nil {
		// A line per message, so debug level: with the failures, it traces
		// each message's publishes, and so explains a copy. Built only when
		// someone reads it.
		if s.opts.Logger.Enabled(context.Background(), slog.LevelDebug) {
			s.opts.Logger.Debug("lily outbox", attrs()...)
		}
		return
	}
	if path == pathUnconfirmed || path == pathNacked {
		// A nack says one queue refused the message: the others it was
		// routed to (by an exchange or a CC header) may hold it, and a queue
		// with reject-publish-dlx dead-letters what it refuses.
		s.possibleCopy(a.row, a.err.Error())
	}
	level := slog.LevelWarn
	if path == pathReturned || a.row.unread != nil {
		// No retry mends a binding that is missing or a row that cannot be
		// read: someone must.
		level = slog.LevelError
	}
	s.opts.Logger.Log(context.Background(), level, "lily outbox", append(attrs(), "detail", lastError(a.err))...)
}

func pathOf(err error) runtime.Path {
	switch {
	case err == nil:
		return pathPublished
	case errors.Is(err, runtime.ErrReturned):
		return pathReturned
	case errors.Is(err, runtime.ErrNacked):
		return pathNacked
	case errors.Is(err, runtime.ErrUnconfirmed):
		return pathUnconfirmed
	}
	return pathFailed
}

// backoff is the wait before a row's retry after its nth failure: doubling
// from firstBackoff up to MaxBackoff, each drawn between half of it and all of
// it, so that the rows of one outage do not all come back at once.
func (s *relayRun) backoff(n int) time.Duration {
	return backoff.Wait(n, firstBackoff, s.opts.MaxBackoff)
}

// dbFailed logs a database error and pauses the relay's use of it.
func (s *relayRun) dbFailed(step string, err error) {
	s.dbFailures++
	note(&s.health.database, fmt.Errorf("%s: %w", step, err))
	wait := backoff.Wait(s.dbFailures, s.opts.Poll, maxDBBackoff)
	s.dbRetry = time.Now().Add(wait)
	s.opts.Logger.Warn("lily outbox", "queue", s.queue, "stage", "database", "step", step,
		"attempt", s.dbFailures, "wait", wait, "detail", lastError(err))
}

// stop ends a Run: it waits for the sends in flight for stopWait at most
// (until Force), then gives them up, and records their answers, for
// stopTimeout at most.
func (s *relayRun) stop() {
	cut := time.AfterFunc(stopWait, s.abandon)
	defer cut.Stop()
	force := s.forceNow
	for s.inflight > 0 {
		select {
		case a := <-s.results:
			s.answered(a)
		case <-force:
			s.abandon()
			force = nil
		}
	}
	giveUp := time.Now().Add(stopTimeout)
	for len(s.pending) > 0 {
		err := s.record(giveUp)
		if err == nil {
			break
		}
		s.dbFailed("record", err)
		if s.dbRetry.After(giveUp) {
			break
		}
		time.Sleep(time.Until(s.dbRetry))
	}
	var leased []string
	for _, a := range s.pending {
		if a.err == nil {
			s.possibleCopy(a.row, "confirmed, but its row could not be deleted: it will be published again")
		}
		leased = append(leased, fmt.Sprint(a.row.id))
	}
	if len(leased) > 0 {
		s.opts.Logger.Warn("lily outbox", "queue", s.queue, "stage", "relay-stopped",
			"detail", fmt.Sprintf("rows %s stay leased until their lease ends", sanitize.Text(strings.Join(leased, ", "), maxLastError)))
	}
}

// lost is what a delete found of a confirmed row no longer the relay's.
type lost int

const (
	lostDeleted lost = iota // leased since by another relay, whose lease ended: deleted
	lostLeft                // held by another relay, on a lease not yet ended: left to it
	lostGone                // gone: deleted by another relay (or an earlier delete)
)

// leaseLost reports a confirmed row that was no longer the relay's when it
// deleted it, or gone: its lease ended before the delete (a stalled
// database, a hung connection), and another relay may have leased and
// published it again. A row another relay holds is not deleted: that relay
// deletes it, or tries it again.
func (s *relayRun) leaseLost(rw *row, how lost) {
	why := "confirmed after its lease ended: another relay may have published it again"
	switch {
	case how == lostLeft:
		why = "confirmed after its lease ended: another relay holds it and may publish it again; its row is left to that relay"
	case how == lostGone && rw.deleteUnknown:
		why = "confirmed, and gone at its delete: an earlier delete whose outcome is unknown took it, or another relay that may have published it again"
	}
	s.possibleCopy(rw, why)
	s.opts.Logger.Warn("lily outbox", "queue", s.queue, "stage", "lease-lost", "outbox_id", rw.id,
		"message_id", idText(rw.msg.MessageId), "destination", destination(rw.msg), "attempt", rw.attempts+1, "detail", why)
}

// possibleCopy lists a row in the report's possible copies, its text
// sanitized and bounded: Report.String writes it as it is, to a terminal or
// a log.
func (s *relayRun) possibleCopy(rw *row, why string) {
	s.health.copies.Add(1)
	if len(s.report.PossibleCopies) >= maxCopies {
		s.report.Omitted++
		return
	}
	s.report.PossibleCopies = append(s.report.PossibleCopies, runtime.Record{
		Queue: s.queue, MessageID: idText(rw.msg.MessageId), Attempt: rw.attempts + 1,
		Destination: destination(rw.msg), Reason: sanitize.Text(why, maxLastError),
	})
}

// destination names where a message goes, as the runtime's records do,
// each name sanitized as RawDelivery's are: Write takes any UTF-8 without
// NUL.
func destination(m runtime.Message) string {
	if m.Exchange == "" {
		return sanitize.Name(m.RoutingKey, maxName)
	}
	return sanitize.Name(m.Exchange, maxName) + " " + sanitize.Name(m.RoutingKey, maxName)
}

// idText is a row's message id as the relay logs and reports it, sanitized
// and bounded as the runtime's records quote a message_id the guard did not
// pass.
func idText(id string) string { return sanitize.Text(id, maxIDText) }

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// dbAnswered notes a statement of the relay's that succeeded: the next
// failure pauses it briefly again, and Health no longer tells of the last.
func (s *relayRun) dbAnswered() {
	s.dbFailures = 0
	note(&s.health.database, nil)
}
