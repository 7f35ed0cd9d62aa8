// Package schema reads and checks Lily schema files (version 1) into a model
// the generator consumes. Every slice in the model keeps file order, except
// message versions, which ascend, so that the same file always gives the same
// model.
package schema

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/lily-mq/lily/envelope"
)

// Defaults of keys a schema may leave out.
const (
	DefaultOutput         = "."
	DefaultContentType    = "application/json"
	DefaultQueueType      = Classic
	DefaultPrefetch       = 32
	DefaultConcurrency    = 8
	DefaultMaxBodyBytes   = 1 << 20
	DefaultHandlerTimeout = 30 * time.Second
	DefaultInbox          = InboxOptional
	// DLQSuffix names a queue's DLQ when the schema names none.
	DLQSuffix = ".dlq"
)

// Pos is where a schema entity is declared: the file, as opened, and its line
// and column, counted from 1.
type Pos struct {
	File         string
	Line, Column int
}

// File is one checked schema: a root file and the files it includes, which
// together make one generated Go file.
type File struct {
	// Name is the path the root file was read from, as given.
	Name string
	// Includes are the included files, as opened (joined to the directory of
	// the file that names them), in the order they were first read.
	Includes []string
	Package  string
	// Output is the directory of the generated file, slash-separated and
	// relative to the schema file's directory.
	Output string
	// AsyncAPI names the AsyncAPI document generate writes as well as the
	// Go file; nil when the schema names none.
	AsyncAPI *AsyncAPI
	Messages []*Message
	// Types are the shared types, in file order: objects and enums that
	// fields of any message refer to by name. A field that uses one holds
	// its Fields or Values, so the model reads as if it were written inline.
	Types []*Field
	// Envelopes are the named envelope profiles, in file order.
	Envelopes []*Envelope
	// Exchanges are the exchanges queues are bound to, in file order.
	Exchanges []*Exchange
	Queues    []*Queue
	// Acknowledged are the breaking changes the schema's authors intend, as
	// `lilygen breaking` names them; it reports them without failing.
	Acknowledged []Acknowledgement
	// readIn is what EnvelopesOf lists for each message a queue consumes
	// and that names no envelope itself, worked out once the queues are
	// read: asking every queue for each message would take time of their
	// product.
	readIn map[*Message][]*Envelope
	// known holds the messages, exchanges and queues by name, as parsed,
	// and exchangeAt each exchange's place in Exchanges: a list searched
	// for each name would take time of the square of their number.
	known      declarations
	exchangeAt map[*Exchange]int
	// bound is where the files f's includes were read from must be, and
	// so the files it generates (CheckOutput); outputAt is where the Go
	// file's path is named (output, else package), asyncAPIAt where the
	// AsyncAPI document's is.
	bound                bound
	outputAt, asyncAPIAt Pos
}

// Message returns the message of Go name name, nil when f has none.
func (f *File) Message(name string) *Message { return f.known.messages[name] }

// Queue returns the queue named name, nil when f has none.
func (f *File) Queue(name string) *Queue { return f.known.queues[name] }

// Exchange returns the exchange named name, nil when f has none.
func (f *File) Exchange(name string) *Exchange { return f.known.exchanges[name] }

// Acknowledgement accepts one breaking change: Rule alone accepts every
// finding of that rule, Rule with Subject only that one.
type Acknowledgement struct {
	Rule, Subject, Reason string
	Pos                   Pos
}

// String is a as lilygen's --allow spells it: RULE, or RULE@SUBJECT.
func (a Acknowledgement) String() string {
	if a.Subject == "" {
		return a.Rule
	}
	return a.Rule + "@" + a.Subject
}

// Message is one message type.
type Message struct {
	// Name is the message's Go name, such as PaymentAuthorized.
	Name string
	// Type is its wire type, such as payment.authorized: Name unless the
	// schema sets one.
	Type string
	// Envelope is the profile its producers use, nil when the message names
	// none: it then takes its queue's, or Lily's.
	Envelope *Envelope
	// Publish is where its producers send it; nil when the schema does not
	// say, and lilygen writes no Publish functions.
	Publish  *Publish
	Pos      Pos
	Versions []*Version // ascending
}

// Version is one version of a message: the payload that header x-lily-version names.
type Version struct {
	Number int
	// GoName is the payload struct's name, such as OrderPlacedV1.
	GoName       string
	Pos          Pos
	ContentTypes []string
	Fields       []*Field
	// Headers are the typed headers of this version, in file order; their
	// Name is the header key. HeadersName is the Go struct that holds them,
	// such as OrderPlacedV2Headers, or "" when the version declares none.
	Headers     []*Field
	HeadersName string
	Examples    []Example
	// DeprecatedSince and RemoveAfter are dates (YYYY-MM-DD), or "".
	DeprecatedSince, RemoveAfter string
}

// Example is one example message of a version, checked against it.
type Example struct {
	Pos Pos
	// Body is the example's payload as JSON, keys in file order.
	Body []byte
	// Headers holds the example's headers as an AMQP table would: strings,
	// int64, float64, bool and time.Time values. Nil when it sets none.
	Headers map[string]any
}

// Type is the type of a payload field.
type Type string

// The field types.
const (
	String  Type = "string"
	Integer Type = "integer"
	Number  Type = "number"
	Bool    Type = "bool"
	Time    Type = "time"
	Bytes   Type = "bytes"
	Enum    Type = "enum"
	Object  Type = "object"
	List    Type = "list"
	Map     Type = "map"
)

var types = []Type{String, Integer, Number, Bool, Time, Bytes, Enum, Object, List, Map}

// IntType is the Go type of an integer field. A schema names it as the field's
// type; type integer is Int64. There is no uint64: AMQP header tables have no
// unsigned 64-bit value, and Lily reads every integer, and states its bounds,
// as an int64.
type IntType string

// The integer types.
const (
	Int8   IntType = "int8"
	Int16  IntType = "int16"
	Int32  IntType = "int32"
	Int64  IntType = "int64"
	Uint8  IntType = "uint8"
	Uint16 IntType = "uint16"
	Uint32 IntType = "uint32"
)

// intTypes are the integer types, signed then unsigned, narrowest first.
var intTypes = []IntType{Int8, Int16, Int32, Int64, Uint8, Uint16, Uint32}

var intRanges = map[IntType][2]int64{
	Int8: {math.MinInt8, math.MaxInt8}, Int16: {math.MinInt16, math.MaxInt16},
	Int32: {math.MinInt32, math.MaxInt32}, Int64: {math.MinInt64, math.MaxInt64},
	Uint8: {0, math.MaxUint8}, Uint16: {0, math.MaxUint16}, Uint32: {0, math.MaxUint32},
}

// Range is the inclusive range of t's values.
func (t IntType) Range() (lo, hi int64) {
	r := intRanges[t]
	return r[0], r[1]
}

// headerTypes are the types a header may have: AMQP header tables hold
// scalars.
var headerTypes = []Type{String, Integer, Number, Bool, Time, Enum}

// Field is one field of a payload, a typed header, or the element of a list
// or map field.
type Field struct {
	// Name is the JSON key or header name; empty for an element.
	Name string
	// GoName is the exported Go field name; empty for an element.
	GoName string
	// GoPath is the field's name in the whole file, unique there: the
	// parent's GoPath and the GoName, plus Item for an element, such as
	// OrderPlacedV2Customer or OrderPlacedV2ItemsItem. It names an object's
	// struct and an enum's type.
	GoPath string
	Pos    Pos
	Type   Type
	// Int is the Go type of an integer field (Int64 for type integer); ""
	// for other types.
	Int IntType
	// Required fields must be present. Elements are always required.
	Required bool
	// Nullable fields accept JSON null (nil in Go) even when required. An
	// optional field always accepts null, as it accepts absence.
	Nullable bool
	// Default is the value an absent (or null) optional field takes: a
	// string (also for enums and times, as written), int64, float64 or bool.
	// Nil when the schema sets none.
	Default any
	// Bounds; nil when the schema sets none. String lengths count characters
	// (runes), bytes lengths count bytes, items count list elements or map
	// entries.
	MinLength, MaxLength *int
	// MinInt and MaxInt of an integer type narrower than int64 are always
	// set: the type's range, or the schema's bounds, which lie within it.
	MinInt, MaxInt     *int64
	MinNum, MaxNum     *float64
	MinItems, MaxItems *int
	// Pattern is an RE2 regular expression a string must match (anywhere,
	// unless anchored), or "".
	Pattern string
	// Values are an enum's values, in file order.
	Values []string
	// Fields of an object, in file order.
	Fields []*Field
	// Items is the element of a list or the value of a map.
	Items *Field
	// Named is the shared type (under File.Types) that f is or uses, such
	// as Card, or "". Its GoPath is then that name: every use shares one Go
	// type, and the Fields of the type's declaration.
	Named string
}

// TypeName is the type as a schema names it: a shared type's name, the
// integer type for an integer narrower than int64, else the Type.
func (f *Field) TypeName() string {
	if f.Named != "" {
		return f.Named
	}
	if f.Type == Integer && f.Int != Int64 {
		return string(f.Int)
	}
	return string(f.Type)
}

// Pointer reports whether f's Go type in a payload struct is a pointer: when
// nil may be its value, unless its type already has a nil (lists, maps, bytes)
// or a default fills it in.
func (f *Field) Pointer() bool {
	if f.Type == List || f.Type == Map || f.Type == Bytes {
		return false
	}
	return f.Nullable || !f.Required && f.Default == nil
}

// QueueType is a RabbitMQ queue type.
type QueueType string

// The queue types.
const (
	Classic QueueType = "classic"
	Quorum  QueueType = "quorum"
)

// Queue is one queue a consumer reads, with its topology and policy.
type Queue struct {
	Name string
	Pos  Pos
	// GoName prefixes the queue's generated names, such as BillingPaymentsV2.
	GoName      string
	Type        QueueType
	Prefetch    int
	Concurrency int
	Consumes    []Consume
	Retry       Retry
	DLQ         string
	// MaxBodyBytes is the largest body handed to an extractor.
	MaxBodyBytes   int
	HandlerTimeout time.Duration
	// SettlementBudget is zero when the runtime's default applies.
	SettlementBudget time.Duration
	// ParkBudget says that SettlementBudget is the one lilygen derived for an
	// ordered queue whose retries wait in line (queue.ParkBudget), at the
	// default step timeout, where the schema set none: the generated spec
	// leaves it to runtime.NewConsumer, which derives it at the consumer's
	// own step timeout.
	ParkBudget bool
	// DeliveryLimit is a quorum queue's delivery limit: how often the broker
	// returns a message to the queue before it dead-letters it, or
	// queue.NoDeliveryLimit; zero for a classic queue, which has none.
	DeliveryLimit int
	// Inbox is the inbox policy of the messages it consumes that name none.
	Inbox Inbox
	// Envelope is the profile of the messages it consumes that name none;
	// nil for Lily's.
	Envelope *Envelope
	// External: another team's queue, checked and never declared; Lily's
	// arguments for it come from policies.
	External bool
	// ByPolicy: Lily's arguments of the queue and its retry buckets come from
	// the policies `lilygen topology` writes, not from its declarations.
	ByPolicy bool
	// Arguments are the queue arguments its team sets.
	Arguments Arguments
	// Bindings route messages from exchanges to the queue, in file order.
	Bindings []*Binding
	// Ordering, when not nil, asks for ordered handling.
	Ordering *Ordering
}

// EnvelopesOf lists the envelope profiles m is read in, in the order the
// schema first names them: its own, else those of the queues that consume
// it, else Lily's.
func (f *File) EnvelopesOf(m *Message) []*Envelope {
	if m.Envelope != nil {
		return []*Envelope{m.Envelope}
	}
	if envs := f.readIn[m]; len(envs) > 0 {
		return slices.Clip(envs)
	}
	return []*Envelope{lilyEnvelope}
}

// readIn lists, for each message the queues consume that names no envelope
// itself, the envelopes they read it in, in the order they name them.
func readIn(queues []*Queue) map[*Message][]*Envelope {
	type reading struct {
		m *Message
		e *Envelope
	}
	out := map[*Message][]*Envelope{}
	seen := map[reading]bool{}
	for _, q := range queues {
		for _, c := range q.Consumes {
			if r := (reading{c.Message, c.Envelope}); c.Message.Envelope == nil && !seen[r] {
				seen[r] = true
				out[c.Message] = append(out[c.Message], c.Envelope)
			}
		}
	}
	return out
}

// ProducedIn returns the envelope lilygen writes m's producers in: the one
// profile m is read in, when lilygen can write it. Otherwise it returns nil,
// why not (words that follow "lilygen writes no producers of m: ") and what
// would let it.
func (f *File) ProducedIn(m *Message) (e *Envelope, why, fix string) {
	envs := f.EnvelopesOf(m)
	if len(envs) > 1 {
		names := make([]string, len(envs))
		for i, e := range envs {
			names[i] = e.Name
		}
		// Listed as a hint lists names: a message read in its own envelope
		// by each of many queues would make a long line of each error and
		// finding that says why.
		return nil, fmt.Sprintf("it is read in envelopes %s, and a producer writes one", listed(names)),
			"read it in one envelope"
	}
	e = envs[0]
	if pr := e.Profile; pr.Kind == envelope.CloudEvents && pr.Source == "" {
		return nil, fmt.Sprintf("its envelope %s names no source, which every CloudEvent carries", e.Name),
			fmt.Sprintf("give envelope %s a source:, the URI of the producing service", e.Name)
	}
	if n := e.Profile.Version.Fixed; n != 0 {
		// Sent without a version, any version reads as n.
		for _, v := range m.Versions {
			if v.Number != n {
				return nil, fmt.Sprintf("its envelope %s sends no version, so every message reads as version %d, and %s would too", e.Name, n, v.GoName),
					fmt.Sprintf("keep only version %d of it", n)
			}
		}
	}
	return e, "", ""
}

// Produced reports whether lilygen writes producers of m (see ProducedIn).
func (f *File) Produced(m *Message) bool {
	e, _, _ := f.ProducedIn(m)
	return e != nil
}

// RequiresInbox reports whether a message q consumes requires the inbox:
// then q's consumer does too.
func (q *Queue) RequiresInbox() bool {
	return slices.ContainsFunc(q.Consumes, func(c Consume) bool { return c.Inbox == InboxRequired })
}

// Ordering is how a queue orders its handling: every delivery one at a time
// (Sequential), or those with equal values of a header or a top-level field
// one at a time, in the order the queue delivered them.
type Ordering struct {
	Pos        Pos
	Sequential bool
	// Header or Field names the key; "" when Sequential.
	Header, Field string
}

// Arguments are the queue arguments a team sets beside Lily's own; zero
// values are unset.
type Arguments struct {
	SingleActiveConsumer bool
	MaxPriority          int
	MaxLength            int
	MaxLengthBytes       int
	// Overflow is what a full queue does: drop-head, reject-publish or
	// reject-publish-dlx; "" for the broker's default (drop-head).
	Overflow string
	// MessageTTL expires messages in the queue, to its DLQ.
	MessageTTL time.Duration
	// InitialGroupSize is a quorum queue's number of replicas.
	InitialGroupSize int
}

// Table is a as the queue's declaration carries it: x- arguments, integers
// as int64, a TTL in milliseconds. Empty when a sets none.
func (a Arguments) Table() map[string]any {
	t := map[string]any{}
	set := func(key string, v int) {
		if v > 0 {
			t[key] = int64(v)
		}
	}
	if a.SingleActiveConsumer {
		t["x-single-active-consumer"] = true
	}
	set("x-max-priority", a.MaxPriority)
	set("x-max-length", a.MaxLength)
	set("x-max-length-bytes", a.MaxLengthBytes)
	set("x-message-ttl", int(a.MessageTTL.Milliseconds()))
	set("x-quorum-initial-group-size", a.InitialGroupSize)
	if a.Overflow != "" {
		t["x-overflow"] = a.Overflow
	}
	return t
}

// Exchange types.
const (
	Direct  = "direct"
	Topic   = "topic"
	Fanout  = "fanout"
	Headers = "headers"
)

// Exchange is one exchange queues are bound to.
type Exchange struct {
	Name string
	Pos  Pos
	// Type is Direct, Topic, Fanout or Headers.
	Type string
	// External exchanges (the default) belong to another team: Lily checks
	// they exist and never declares them.
	External          bool
	Durable, Internal bool
	AlternateExchange string
	// Bindings route messages from other exchanges to this one.
	Bindings []*Binding
}

// Binding routes messages from exchange Source to a queue or exchange.
type Binding struct {
	Pos    Pos
	Source string
	// RoutingKey is a key (direct) or pattern (topic); "" for fanout and
	// headers exchanges.
	RoutingKey string
	// Match (all or any) and Headers are a headers exchange's match.
	Match   string
	Headers map[string]any
	// External bindings belong to another team and are never declared.
	External bool
}

// Arguments is b's binding arguments: a headers match, or nil.
func (b *Binding) Arguments() map[string]any {
	if b.Match == "" {
		return nil
	}
	args := map[string]any{"x-match": b.Match}
	maps.Copy(args, b.Headers)
	return args
}

// Inbox is a policy on the transactional inbox.
type Inbox string

// The inbox policies.
const (
	// InboxNone: deliveries are never claimed, even when the consumer has
	// an inbox.
	InboxNone Inbox = "none"
	// InboxOptional: deliveries are claimed when the consumer has an inbox.
	InboxOptional Inbox = "optional"
	// InboxRequired: the consumer needs an inbox, and claims every delivery.
	InboxRequired Inbox = "required"
)

// Consume is one message a queue accepts, in some of its versions.
type Consume struct {
	Message  *Message
	Versions []*Version // ascending
	// Envelope is the profile its deliveries are read by: the message's,
	// else the queue's, else Lily's.
	Envelope *Envelope
	// Inbox is its policy on the inbox: its own, else the queue's; none for
	// a profile without a message id.
	Inbox Inbox
	// Pos is where the queue names the message.
	Pos Pos
}

// Retry is a queue's retry policy.
type Retry struct {
	// Delays[i] is the wait in retry bucket i.
	Delays []time.Duration
	// MaxAttempts counts the first attempt too.
	MaxAttempts int
}
