package runtime

import (
	"context"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Path is where a delivery went, as far as the evidence shows.
type Path string

// The paths a delivery can take.
const (
	PathAcked              Path = "acked"
	PathRetried            Path = "retried"       // confirmed handoff to a retry bucket, then ACK
	PathDeadLettered       Path = "dead-lettered" // confirmed handoff to the DLQ, then ACK
	PathBrokerDeadLettered Path = "broker-dead-lettered"
	PathRequeued           Path = "requeued" // the one bounded NACK with requeue
	PathNotStarted         Path = "not-started"
	PathUnresolved         Path = "unresolved"
)

// Record is the evidence of one delivery, written when its journey ends.
// Every string in it is sanitized and bounded.
type Record struct {
	Queue       string `json:"queue"`
	MessageID   string `json:"message_id"`
	Type        string `json:"type,omitempty"`
	Version     int    `json:"version,omitempty"`
	Attempt     int    `json:"attempt"`
	Redelivered bool   `json:"redelivered"`
	// FromRecord: settled from the record of completed work, without the handler.
	FromRecord bool           `json:"from_record,omitempty"`
	Path       Path           `json:"path"`
	Reason     string         `json:"reason"`
	Rejection  Rejection      `json:"rejection,omitempty"`
	Handler    HandlerResult  `json:"handler"`
	Claim      ClaimStatus    `json:"claim,omitempty"`
	Commit     CommitEvidence `json:"commit"`
	// Cleanup and AfterDelivery hold those steps' failures.
	Cleanup       string             `json:"cleanup,omitempty"`
	AfterDelivery string             `json:"after_delivery,omitempty"`
	Handoff       HandoffEvidence    `json:"handoff"`
	Settlement    SettlementEvidence `json:"settlement"`
	Duration      time.Duration      `json:"duration_ns"`
}

func newRecord(q QueueSpec, d *amqp.Delivery, env *Envelope, attempt int, o Outcome, plan Plan, took time.Duration) Record {
	rec := Record{
		Queue: q.Name, MessageID: sanitize(d.MessageId, 128), Attempt: attempt, Redelivered: d.Redelivered,
		Reason: failureReason(plan, o), Rejection: o.Rejection, Handler: o.Handler, Claim: o.Claim, Commit: o.Commit,
		Cleanup: o.Cleanup, AfterDelivery: o.AfterDelivery,
		Handoff: o.Handoff, Settlement: o.Settlement, Duration: took, FromRecord: o.CompletedEarlier,
	}
	if env != nil {
		rec.Type, rec.Version = env.Type, env.Version
	}
	rec.Path = pathOf(q, o)
	return rec
}

func pathOf(q QueueSpec, o Outcome) Path {
	switch {
	case o.Settlement.Status == NackSent && o.Settlement.Requeue:
		return PathRequeued
	case o.Settlement.Status == NackSent:
		return PathBrokerDeadLettered
	case o.Settlement.Status != AckSent:
		return PathUnresolved
	case o.Handoff.Status != HandoffConfirmed:
		return PathAcked
	case o.Handoff.Destination == q.DeadLetterQueue:
		return PathDeadLettered
	}
	return PathRetried
}

// record ends a delivery's journey: its record goes to the observer, the
// report and, as the "settled" stage, to the log, the sink and the buffer.
func (c *Consumer) record(r *run, gen, token uint64, rec Record) {
	// A delivery abandoned at the final abort may end after Run returned: its
	// record is only logged then, and the report already lists it.
	if r.report.add(token, rec) && c.cfg.Observe != nil {
		c.cfg.Observe(rec)
	}
	c.emit(Event{
		Stage: StageSettled, MessageID: rec.MessageID, Type: rec.Type, Version: rec.Version, Attempt: rec.Attempt,
		Generation: gen, Path: rec.Path, Detail: rec.Reason,
		Handoff: rec.Handoff.Status, Settlement: rec.Settlement.Status, Duration: rec.Duration,
	})
}

// Stage names a step of a delivery's journey, or of the consumer's life.
type Stage string

// The stages events are emitted for. Their names, and the log keys of Event,
// are stable: dashboards and alerts may rely on them.
const (
	StageReceived   Stage = "received"    // read from the consumer channel
	StageRejected   Stage = "rejected"    // stopped by the guard or at dispatch
	StageHandled    Stage = "handled"     // the handler returned (or timed out)
	StageFromRecord Stage = "from-record" // a redelivery of completed work, settled without the handler
	StageHandoff    Stage = "handoff"     // the handoff publish resolved
	StageSettled    Stage = "settled"     // the journey ended; Path says where
	StageAckProven  Stage = "ack-proven"  // a later reply on the channel proved the ACK
	// StageAckAmbiguous: the channel was lost before the ACK's proof.
	StageAckAmbiguous Stage = "ack-ambiguous"

	StageConnected Stage = "connected"   // consuming on a new channel generation
	StageLost      Stage = "intake-lost" // the channel, connection or consumer ended under us
	StageReconnect Stage = "reconnect"   // waiting before the next connection attempt
	StagePhase     Stage = "shutdown-phase"
)

// Event is one diagnostics event. Every string in it is sanitized and bounded.
type Event struct {
	Time       time.Time
	Queue      string
	Stage      Stage
	MessageID  string
	Type       string
	Version    int
	Attempt    int
	Generation uint64
	Path       Path
	Handoff    HandoffStatus
	Settlement SettlementStatus
	Duration   time.Duration
	Detail     string
}

// Sink receives every diagnostics event, on the goroutine that emits it: keep
// it quick and never block (for metrics or tracing).
type Sink interface {
	Event(Event)
}

// DefaultRecentEvents is how many events Consumer.RecentEvents keeps when a
// Config leaves RecentEvents zero.
const DefaultRecentEvents = 256

// emit logs ev, keeps it in the recent-events buffer and hands it to the sink.
func (c *Consumer) emit(ev Event) {
	ev.Time = time.Now()
	ev.Queue = c.spec.Name
	c.recent.push(ev)
	if c.cfg.Sink != nil {
		c.cfg.Sink.Event(ev)
	}
	level := stageLevel(ev)
	if !c.cfg.Logger.Enabled(context.Background(), level) {
		return
	}
	attrs := []slog.Attr{slog.String("queue", ev.Queue), slog.String("stage", string(ev.Stage))}
	if ev.MessageID != "" {
		attrs = append(attrs, slog.String("message_id", ev.MessageID), slog.Int("attempt", ev.Attempt))
	}
	if ev.Type != "" {
		attrs = append(attrs, slog.String("type", ev.Type), slog.Int("version", ev.Version))
	}
	if ev.Generation != 0 {
		attrs = append(attrs, slog.Uint64("generation", ev.Generation))
	}
	if ev.Path != "" {
		attrs = append(attrs, slog.String("path", string(ev.Path)), slog.String("handoff", ev.Handoff.String()),
			slog.String("settlement", ev.Settlement.String()), slog.Duration("duration", ev.Duration))
	}
	if ev.Detail != "" {
		attrs = append(attrs, slog.String("detail", ev.Detail))
	}
	c.cfg.Logger.LogAttrs(context.Background(), level, "lily", attrs...)
}

func stageLevel(ev Event) slog.Level {
	switch ev.Stage {
	case StageAckAmbiguous, StageLost, StageReconnect:
		return slog.LevelWarn
	case StageConnected, StagePhase, StageFromRecord, StageRejected:
		return slog.LevelInfo
	case StageSettled:
		switch ev.Path {
		case PathAcked:
			return slog.LevelDebug
		case PathUnresolved, PathRequeued:
			return slog.LevelWarn
		}
		return slog.LevelInfo
	}
	return slog.LevelDebug
}

// eventRing is a bounded buffer of the most recent events.
type eventRing struct {
	mu   sync.Mutex
	buf  []Event
	next int
	full bool
}

func newEventRing(size int) *eventRing { return &eventRing{buf: make([]Event, size)} }

func (r *eventRing) push(ev Event) {
	r.mu.Lock()
	r.buf[r.next] = ev
	r.next = (r.next + 1) % len(r.buf)
	r.full = r.full || r.next == 0
	r.mu.Unlock()
}

func (r *eventRing) snapshot() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.full {
		return append([]Event(nil), r.buf[:r.next]...)
	}
	return append(append([]Event(nil), r.buf[r.next:]...), r.buf[:r.next]...)
}

// RecentEvents returns the most recent diagnostics events, oldest first.
func (c *Consumer) RecentEvents() []Event { return c.recent.snapshot() }
