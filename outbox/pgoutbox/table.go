package pgoutbox

// The relay's statements on lily_outbox: what it leases, and what it
// records of each answer.

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lily-mq/lily/internal/backoff"
	"github.com/lily-mq/lily/internal/outboxcodec"
	"github.com/lily-mq/lily/internal/sanitize"
)

// findTable finds the lily_outbox the search_path finds, the one an
// unqualified name would be, and fails when it does not exist, misses a step
// of the schema, or is a temporary table. It names the table for the report
// and builds the run's statements on it, named with its schema (on): a
// session-level SET search_path that another user of the pool (a handler,
// through pginbox.Tx) leaves on a pooled connection does not move the
// relay's statements on that connection to another schema's lily_outbox. It
// waits for a database that does not answer.
func (s *relayRun) findTable(ctx context.Context) error {
	for {
		var (
			name, schema        string
			retry, behind, temp bool
		)
		err := s.pool.QueryRow(ctx, `SELECT relnamespace::regnamespace::text || '.' || relname, (SELECT nspname::text FROM pg_namespace WHERE oid = c.relnamespace),
				EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = c.oid AND attname = 'retry_at' AND NOT attisdropped),
				EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = c.oid AND attname = 'behind' AND NOT attisdropped),
				relpersistence = 't'
			FROM pg_class c WHERE oid = to_regclass('lily_outbox')`).Scan(&name, &schema, &retry, &behind, &temp)
		// A schema may be named with any UTF-8 but NUL: the name is
		// sanitized once, here, for the errors, the logs and the report,
		// which write it as it is.
		name = sanitize.Name(name, maxTableName)
		switch {
		case err == nil && temp:
			// The session's own temporary table (searched before the
			// path): named with its pg_temp_N schema, it would be another
			// session's on every other connection.
			return fmt.Errorf("pgoutbox: relay: the lily_outbox the search path finds is a temporary table, %s", name)
		case err == nil && !retry:
			return fmt.Errorf("pgoutbox: relay: table %s has no column retry_at (apply pgoutbox.Migrate, or migrations/002_lily_outbox_retry.sql)", name)
		case err == nil && !behind:
			return fmt.Errorf("pgoutbox: relay: table %s has no column behind (apply pgoutbox.Migrate, or migrations/003_lily_outbox_behind.sql)", name)
		case err == nil:
			s.queue = "outbox " + name
			s.sql = on(pgx.Identifier{schema, "lily_outbox"}.Sanitize())
			return nil
		case errors.Is(err, pgx.ErrNoRows):
			return errors.New("pgoutbox: relay: table lily_outbox does not exist in the search path (apply pgoutbox.Migrate)")
		case ctx.Err() != nil:
			return nil // stopped before the database answered: nothing was leased
		}
		s.dbFailed("find table", err)
		if !backoff.Sleep(ctx, time.Until(s.dbRetry)) {
			return nil
		}
	}
}

// statements are the relay's statements on one lily_outbox, named with its
// schema.
type statements struct {
	lease, fetch, release, nextOfKey, sweep, delete, fail string
}

// unqualified is the table's name as the statements below write it.
var unqualified = regexp.MustCompile(`\blily_outbox\b`)

// on returns the statements on table, a schema-qualified name. The
// constants below name lily_outbox unqualified, which would follow the
// search_path of whichever connection each statement runs on.
func on(table string) statements {
	q := func(sql string) string { return unqualified.ReplaceAllLiteralString(sql, table) }
	return statements{
		lease: q(leaseSQL), fetch: q(fetchSQL), release: q(releaseSQL), nextOfKey: q(nextOfKeySQL), sweep: q(sweepSQL),
		delete: q(deleteSQL), fail: q(failSQL),
	}
}

// leaseSQL leases up to $1 due rows for owner $2 for $3 seconds, and of
// them those whose bodies before them take fewer than $4 bytes. It returns
// each row's properties and body only while they take $5 bytes at most, the
// rows before it included: a larger message, and those after the budget is
// spent, come without them (NULL), for their sends to read (fetchSQL), so
// that a look's answer stays small enough for a slow link to carry well
// within its bound, whatever the bodies. A row is
// due when no lease holds it and, once failed, when its retry time has come;
// a keyed row only when no earlier row of its key is left: that row may be
// leased, waiting for its retry, or not yet published.
//
// The rows never tried are found by id and the failed ones by retry time,
// each through a partial index of its own (002, 003), so that a look never
// walks the rows waiting for their retry. The rows never tried that a look
// finds held behind an earlier row of their key it marks behind (held), and
// the index of the rows never tried leaves the marked ones out: a key's
// backlog is read once, not at every look (003). record clears the mark of
// the key's next row when it deletes the key's first. The walk reads ten
// times the room at most, so that a look's cost is bounded by the batch; the
// last row, with id 0, counts the rows it marked (its attempts), so that the
// relay looks again at once while a walk finds more. The lease takes the
// two kinds in turn, so that neither crowds out the other: failed rows have
// the older ids, and enough of them always due would otherwise fill every
// lease. The dated step gives their retry time to rows a relay of an earlier
// version failed: a later look finds them. Such a row still leased has its
// retry time now: the lease's end holds it back. RETURNING keeps a stored
// body as a pointer: a body not returned is not read.
const leaseSQL = `WITH walked AS (
		SELECT o.id, octet_length(o.body) AS size, ` + firstOfKey + ` AS first FROM lily_outbox o
		WHERE o.attempts = 0 AND NOT o.behind AND (o.lease_until IS NULL OR o.lease_until <= now())
		ORDER BY o.id
		LIMIT $1 * 10
		FOR UPDATE SKIP LOCKED),
	untried AS (SELECT id, size FROM walked WHERE first ORDER BY id LIMIT $1),
	held AS (UPDATE lily_outbox SET behind = true WHERE id IN (SELECT id FROM walked WHERE NOT first) RETURNING 1),
	retried AS (
		SELECT id, retry_at, octet_length(body) AS size FROM lily_outbox o
		WHERE o.attempts > 0 AND o.retry_at <= now() AND (o.lease_until IS NULL OR o.lease_until <= now()) AND ` + firstOfKey + `
		ORDER BY o.retry_at
		LIMIT $1
		FOR UPDATE SKIP LOCKED),
	turns AS (
		SELECT id, size, row_number() OVER (ORDER BY id) AS turn FROM untried
		UNION ALL
		SELECT id, size, row_number() OVER (ORDER BY retry_at, id) AS turn FROM retried),
	due AS (SELECT id, turn FROM (
			SELECT id, size, turn, sum(size) OVER (ORDER BY turn, id) AS upto FROM (SELECT * FROM turns ORDER BY turn, id LIMIT $1) t) d
		WHERE upto - size < $4),
	dated AS (UPDATE lily_outbox SET retry_at = CASE WHEN lease_owner IS NULL THEN coalesce(lease_until, now()) ELSE now() END
		WHERE id IN (SELECT id FROM lily_outbox WHERE attempts > 0 AND retry_at IS NULL LIMIT $1 FOR UPDATE SKIP LOCKED)),
	leased AS (UPDATE lily_outbox o SET lease_owner = $2, lease_until = now() + $3 * interval '1 second'
		FROM due WHERE o.id = due.id
		RETURNING o.id, o.exchange, o.routing_key, o.order_key, o.properties, o.body,
			octet_length(o.body) AS size, o.attempts, due.turn, octet_length(o.body) + octet_length(o.properties::text) AS wire),
	inlined AS (SELECT *, wire <= $5 AND sum(CASE WHEN wire <= $5 THEN wire ELSE 0 END) OVER (ORDER BY turn, id) <= $5 AS inline
		FROM leased)
	SELECT id, exchange, routing_key, order_key, CASE WHEN inline THEN properties END, CASE WHEN inline THEN body END, size, attempts
	FROM inlined
	UNION ALL
	SELECT 0, '', '', NULL, '{}'::jsonb, ''::bytea, 0, count(*)::int FROM held`

// fetchSQL reads the properties and body of row $1, which a look leased to
// owner $2 without them, and extends its lease to $3 seconds from now: the
// time its reading and its publish may take. It reads nothing once the row
// is no longer this relay's.
const fetchSQL = `UPDATE lily_outbox SET lease_until = now() + $3 * interval '1 second'
	WHERE id = $1 AND lease_owner = $2 AND lease_until > now()
	RETURNING properties, body`

// releaseSQL gives up the leases of owner $2 on rows $1, not sent: they are
// due again at once, their attempts as they were.
const releaseSQL = "UPDATE lily_outbox SET lease_owner = NULL, lease_until = NULL WHERE id = ANY($1) AND lease_owner = $2"

// nextOfKeySQL clears the mark of the first row left of each key $2 whose
// confirmed row $1 is gone, in the transaction that deleted the keys'
// earlier rows: a row the delete left, which another relay holds
// (deleteSQL), keeps the next row of its key behind it. It clears a row not
// marked too: a look marking it now, which read the deleted row, is waited
// for and undone.
// Each key's first row is one probe of the key's index: min(id) grouped by
// key would read all of the key's rows.
const nextOfKeySQL = `UPDATE lily_outbox SET behind = false
	WHERE id IN (SELECT f.id FROM unnest($1::bigint[], $2::text[]) AS k(id, key),
		LATERAL (SELECT id FROM lily_outbox WHERE order_key = k.key ORDER BY id LIMIT 1) f
		WHERE NOT EXISTS (SELECT 1 FROM lily_outbox WHERE id = k.id))`

// sweepSQL clears the mark of each key's first row, when marked: a row whose
// earlier rows were deleted by hand, by a relay of an earlier version, or
// while a look of another relay marked it. It reads the first marked row of
// each key (a loose scan of lily_outbox_behind), not every marked row, for
// $2 keys at most after key $1 (NULL: from the first), and answers the last
// key it read, how many it read and how many marks it cleared.
const sweepSQL = `WITH RECURSIVE k AS (
		(SELECT order_key, id, 1 AS n FROM lily_outbox WHERE behind AND ($1::text IS NULL OR order_key > $1) ORDER BY order_key, id LIMIT 1)
		UNION ALL
		SELECT n.order_key, n.id, k.n + 1 FROM k, LATERAL (
			SELECT order_key, id FROM lily_outbox WHERE behind AND order_key > k.order_key ORDER BY order_key, id LIMIT 1) n
		WHERE k.n < $2),
	cleared AS (UPDATE lily_outbox o SET behind = false FROM k
		WHERE o.id = k.id AND NOT EXISTS (SELECT 1 FROM lily_outbox e WHERE e.order_key = k.order_key AND e.id < k.id)
		RETURNING 1)
	SELECT (SELECT order_key FROM k ORDER BY n DESC LIMIT 1), (SELECT count(*) FROM k), (SELECT count(*) FROM cleared)`

// deleteSQL deletes the rows $1, confirmed, but those another relay holds
// on a lease not yet ended, and returns each one it found, whether owner $2
// still held it, and whether it deleted it. A row gone, or leased since by
// another relay (its lease ended before the delete), may have been
// published again. The owner alone tells: any other relay's lease, release
// or failure of the row changes it, and a lease that ended unclaimed made
// no copy. A row another relay holds is left to that relay, whose send of it
// may be on its way: deleted now, the next row of its key would go (its
// mark cleared, nextOfKeySQL) and could reach the queue before that copy.
// The rows found are locked before their delete, so that a lease or a
// delete by another relay meanwhile is waited for and read.
const deleteSQL = `WITH found AS (
		SELECT id, coalesce(lease_owner = $2, false) AS own,
			NOT coalesce(lease_owner <> $2 AND lease_until > now(), false) AS free
		FROM lily_outbox WHERE id = ANY($1)
		FOR UPDATE),
	deleted AS (DELETE FROM lily_outbox o USING found f WHERE o.id = f.id AND f.free)
	SELECT id, own, free FROM found`

// failSQL records the failures of the rows $1 of owner $4: each one's error
// ($2) and its wait for its retry in milliseconds ($3).
const failSQL = `UPDATE lily_outbox o SET attempts = o.attempts + 1, last_error = f.err, lease_owner = NULL,
		retry_at = now() + f.wait * interval '1 millisecond', lease_until = now() + f.wait * interval '1 millisecond'
	FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS f(id, err, wait)
	WHERE o.id = f.id AND o.lease_owner = $4`

// sweepKeys bounds the keys one sweep reads, so that it stays well within
// its statement's bound however many keys hold marked rows (millions, after
// a broker outage, with keys by customer); the next sweep goes on from the
// key where it stopped.
const sweepKeys = 1000

// firstOfKey holds for a row o with no order key, or the earliest of its key.
const firstOfKey = `(o.order_key IS NULL OR NOT EXISTS (
			SELECT 1 FROM lily_outbox e WHERE e.order_key = o.order_key AND e.id < o.id))`

// lease leases up to n due rows, those before the last taking fewer than
// bytes of body, and starts their sends.
func (s *relayRun) lease(n, bytes int) {
	// The deadline counts from before the lease, which the database starts
	// later: the send ends before another relay may take the row.
	sendBy := time.Now().Add(s.opts.Lease - s.opts.Lease/5)
	ctx, cancel := context.WithTimeout(context.Background(), dbStep)
	defer cancel()
	leased, held, err := s.look(ctx, n, bytes, sendBy)
	if err != nil {
		// Rows of a commit whose outcome is unknown: the next record
		// releases them, if they were leased.
		for _, rw := range leased {
			s.pending = append(s.pending, sent{row: rw, err: err, released: true})
		}
		s.dbFailed("lease", err)
		return
	}
	s.dbAnswered()
	s.health.looked.Store(true)
	taken := 0
	for _, rw := range leased {
		taken += rw.size
	}
	s.nextLease = time.Now().Add(s.opts.Poll)
	if len(leased) == n || taken >= bytes || held > 0 {
		// More may be due (the look filled its room in rows, or in bytes:
		// the loop leases again once answers make room), or be found
		// further on.
		s.nextLease = time.Now()
	}
	for _, rw := range leased {
		s.inflight++
		s.inflightBytes += rw.size
		go s.send(rw)
	}
}

// look runs leaseSQL in a transaction that it commits only once it has read
// every row of the answer: a look cut short (by a link too slow for its
// bound, or a lost connection) leases nothing, where a statement of its own
// would have committed as the server sent its last row, leaving rows leased
// that no send holds. It returns the rows leased and the count of rows
// marked held behind their key; with an error, the rows it read when the
// outcome of its commit is unknown, which may be leased.
func (s *relayRun) look(ctx context.Context, n, bytes int, sendBy time.Time) (leased []*row, held int, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, 0, err
	}
	// A connection released in a transaction is closed, which rolls it back.
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(s.sql.lease, n, s.owner, s.opts.Lease.Seconds(), bytes, inlineBytes)
	br := conn.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, 0, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, 0, err
	}
	for rows.Next() {
		var (
			rw          = &row{sendBy: sendBy}
			key         *string
			props, body []byte
		)
		if err := rows.Scan(&rw.id, &rw.msg.Exchange, &rw.msg.RoutingKey, &key, &props, &body, &rw.size, &rw.attempts); err != nil {
			rows.Close()
			_ = br.Close()
			return nil, 0, err
		}
		if key != nil {
			rw.msg.OrderKey, rw.keyed = *key, true
		}
		switch {
		case rw.id == 0:
			held = rw.attempts
			continue
		case props == nil:
			rw.fetch = true // left out of the answer: its send reads it
		default:
			rw.msg.Publishing, rw.unread = outboxcodec.Decode(props, body)
		}
		leased = append(leased, rw)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		_ = br.Close()
		return nil, 0, err
	}
	if err := br.Close(); err != nil {
		return nil, 0, err
	}
	tag, err := conn.Exec(ctx, "COMMIT")
	if err != nil {
		return leased, 0, err
	}
	if tag.String() != "COMMIT" {
		return nil, 0, errors.New("the look's transaction was rolled back")
	}
	return leased, held, nil
}

// errLeaseGone is a fetch's answer when the row is no longer the relay's:
// deleted, or its lease ended and another relay took it.
var errLeaseGone = errors.New("the row's lease is no longer this relay's")

// errNoFetchSlot is a fetch's answer when its wait for a slot outlasted
// the look's lease: nothing of the row was read.
var errNoFetchSlot = errors.New("no slot to read the row in within its lease")

// fetch reads the message of a row leased without it, within a bound that
// grows with its body (readBudget), and extends the row's lease and its
// send's deadline by that bound. It reads maxFetches rows at a time at most,
// so that large bodies take few of the pool's connections, which the
// application may share.
func (s *relayRun) fetch(rw *row) error {
	wait, cancel := context.WithDeadline(s.sendCtx, rw.sendBy)
	defer cancel()
	select {
	case s.fetches <- struct{}{}:
	case <-wait.Done():
		return errNoFetchSlot
	}
	defer func() { <-s.fetches }()
	budget := readBudget(rw.size)
	start := time.Now()
	ctx, cancel := context.WithTimeout(s.sendCtx, budget)
	defer cancel()
	var props, body []byte
	err := s.pool.QueryRow(ctx, s.sql.fetch, rw.id, s.owner, (budget+s.opts.Lease).Seconds()).Scan(&props, &body)
	if errors.Is(err, pgx.ErrNoRows) {
		return errLeaseGone
	}
	if err != nil {
		return fmt.Errorf("the stored message could not be read (bound: %v): %w", budget, err)
	}
	rw.sendBy = start.Add(budget + s.opts.Lease - s.opts.Lease/5)
	rw.msg.Publishing, rw.unread = outboxcodec.Decode(props, body)
	return nil
}

// readBudget bounds the reading of a stored message with a body of size
// bytes: a statement's bound, and a second for each minReadRate bytes.
func readBudget(size int) time.Duration {
	return dbStep + time.Duration(size)*time.Second/minReadRate
}

// sweep clears the marks of keys' first rows left marked, sweepKeys keys at
// a time, the next turn going on where it stopped, and once a lease when
// it has read them all: such a row waits for it (sweepSQL).
func (s *relayRun) sweep() {
	ctx, cancel := context.WithTimeout(context.Background(), dbStep)
	defer cancel()
	var last *string
	var keys, cleared int
	err := s.pool.QueryRow(ctx, s.sql.sweep, s.sweepFrom, sweepKeys).Scan(&last, &keys, &cleared)
	// A sweep that failed is tried again a lease later, not at once: it
	// must not keep the relay from leasing.
	s.nextSweep = time.Now().Add(s.opts.Lease)
	if err != nil {
		s.dbFailed("sweep", err)
		return
	}
	s.dbAnswered()
	s.sweepFrom = nil
	if keys == sweepKeys {
		s.sweepFrom, s.nextSweep = last, time.Now() // more keys: on at the next turn
	}
	if cleared > 0 {
		s.nextLease = time.Now()
	}
}

// record deletes the confirmed rows of the pending answers, gives the
// failed ones their failure and their retry time and releases those not
// tried, in one transaction, by the time given. A row whose
// lease another relay has taken since keeps that relay's lease: a confirmed
// one is deleted when that lease has ended, and left to that relay while it
// holds it, and either is a possible copy (leaseLost).
func (s *relayRun) record(by time.Time) error {
	var done, failed, waits, released, keyIDs []int64
	var errs, keys []string
	var confirmed []*row
	for _, a := range s.pending {
		if a.released {
			released = append(released, a.row.id)
			continue
		}
		if a.err == nil {
			done = append(done, a.row.id)
			confirmed = append(confirmed, a.row)
			if a.row.keyed {
				keyIDs, keys = append(keyIDs, a.row.id), append(keys, a.row.msg.OrderKey)
			}
			continue
		}
		failed = append(failed, a.row.id)
		errs = append(errs, lastError(a.err))
		waits = append(waits, s.backoff(a.row.attempts+1).Milliseconds())
	}
	b := &pgx.Batch{}
	if len(done) > 0 {
		b.Queue(s.sql.delete, done, s.owner)
	}
	if len(keys) > 0 {
		b.Queue(s.sql.nextOfKey, keyIDs, keys)
	}
	if len(failed) > 0 {
		b.Queue(s.sql.fail, failed, errs, waits, s.owner)
	}
	if len(released) > 0 {
		b.Queue(s.sql.release, released, s.owner)
	}
	ctx, cancel := context.WithDeadline(context.Background(), by)
	defer cancel()
	// A batch runs in one implicit transaction: what the delete answers
	// holds once Close says it committed.
	br := s.pool.SendBatch(ctx, b)
	type found struct{ own, deleted bool }
	var seen map[int64]found
	var err error
	if len(done) > 0 {
		seen = make(map[int64]found, len(done))
		rows, _ := br.Query()
		var id int64
		var f found
		_, err = pgx.ForEachRow(rows, []any{&id, &f.own, &f.deleted}, func() error { seen[id] = f; return nil })
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// Committed or not: a row the next record finds gone may be this
		// delete's.
		for _, rw := range confirmed {
			rw.deleteUnknown = true
		}
		return err
	}
	for _, rw := range confirmed {
		if f := seen[rw.id]; f.deleted {
			s.health.lastSettled.Store(time.Now().UnixNano())
		}
		switch f, ok := seen[rw.id]; {
		case !ok:
			s.leaseLost(rw, lostGone)
		case !f.deleted:
			s.leaseLost(rw, lostLeft)
		case !f.own:
			s.leaseLost(rw, lostDeleted)
		}
	}
	s.pending = s.pending[:0]
	s.dbAnswered()
	if len(keys) > 0 {
		s.nextLease = time.Now() // the next row of each key is due
	}
	return nil
}

// lastError is err's text as last_error keeps it, and as the relay logs
// and reports it: sanitized (each byte outside printable ASCII as \xNN) and
// at most maxLastError bytes. The error may quote what a row brought, and
// Write takes any UTF-8 without NUL.
func lastError(err error) string {
	return sanitize.Text(err.Error(), maxLastError)
}
