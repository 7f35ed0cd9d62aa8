// Package rules declares the rules of lilygen's breaking-change and lint
// checks: the id each finding carries, what it breaks, and what it means. A
// schema's acknowledge: entries name these ids, so the package imports
// nothing of Lily's: schema checks acknowledgements against it and review
// reports findings by it.
package rules

// Category groups rules by what their findings break.
type Category string

// The categories, in the order reports list them.
const (
	// API: the generated Go names and signatures, so code using them stops compiling.
	API Category = "API"
	// Wire: the payload or content type, for producers and consumers alike.
	Wire Category = "WIRE"
	// Inflight: messages already in a queue, a retry bucket or a DLQ can no
	// longer be decoded or dispatched.
	Inflight Category = "INFLIGHT"
	// Producer: producers on the new schema send what consumers still on
	// the old one reject; safe only once every consumer runs the new code.
	Producer Category = "PRODUCER"
	// Topology: RabbitMQ refuses to redeclare a queue or exchange (406
	// PRECONDITION_FAILED).
	Topology Category = "TOPOLOGY"
	// Routing: messages published as before no longer reach the queue.
	Routing Category = "ROUTING"
	// Lint: a convention, not a break.
	Lint Category = "LINT"
)

// Categories are the categories in the order reports list them.
var Categories = []Category{API, Wire, Inflight, Producer, Topology, Routing, Lint}

// Describe says what a category's findings break, for report headings.
func (c Category) Describe() string {
	return map[Category]string{
		API:      "generated Go names and signatures: code using them stops compiling",
		Wire:     "payload or content type: producers and consumers disagree on the wire",
		Inflight: "messages already in a queue, retry bucket or DLQ can no longer be decoded or dispatched",
		Producer: "producers on the new schema send what consumers on the old one reject: deploy consumers first",
		Topology: "RabbitMQ refuses the redeclare (406 PRECONDITION_FAILED)",
		Routing:  "messages published as before no longer reach the queue",
		Lint:     "conventions",
	}[c]
}

// Rule is one rule of the breaking-change or lint checks.
type Rule struct {
	// ID is stable: a rule may be added, but an id never changes meaning.
	ID       string
	Category Category
	// Meaning is the change or convention its findings report, in one line
	// of Markdown.
	Meaning string
}

// The rules, each also in All.
var (
	PackageChanged          = Rule{"PACKAGE-CHANGED", API, "`package` renamed"}
	OutputChanged           = Rule{"OUTPUT-CHANGED", API, "`output` moved: the generated package's import path changes"}
	MessageRemoved          = Rule{"MESSAGE-REMOVED", API, "a message removed"}
	VersionRemoved          = Rule{"VERSION-REMOVED", API, "a version removed; the message says whether it was deprecated first (its queues also get `VERSION-UNCONSUMED`)"}
	FieldRemoved            = Rule{"FIELD-REMOVED", API, "a field or header removed"}
	FieldGoTypeChanged      = Rule{"FIELD-GO-TYPE-CHANGED", API, "a field's Go type changes (such as `*string` → `string` when it becomes required, or `int32` → `int64`)"}
	EnumConstantRemoved     = Rule{"ENUM-CONSTANT-REMOVED", API, "an enum value removed: its generated constant `<Type><Value>` goes with it (the finding names at most 20 such constants, then how many more)"}
	HandlerMethodAdded      = Rule{"HANDLER-METHOD-ADDED", API, "an existing queue consumes another version: its handler interface gains a method (types that embed `Unimplemented<Queue>Handler` still compile)"}
	InboxRequirementChanged = Rule{"INBOX-REQUIREMENT-CHANGED", API, "a queue's consumed messages change to or from `inbox: required`: the generated constructor gains or loses its `inbox` parameter"}
	ProducerRemoved         = Rule{"PRODUCER-REMOVED", API, "a message's producers `New<Message>V<n>` are no longer generated: it is now read in several envelopes, or in one lilygen cannot write (CloudEvents without a `source`, or a fixed version the message does not keep to)"}
	PublishRemoved          = Rule{"PUBLISH-REMOVED", API, "a message's `publish` removed: its `Publish<Message>V<n>` functions and routing constants are no longer generated"}
	MessageGoRenamed        = Rule{"MESSAGE-GO-RENAMED", API, "a message removed and one with its `type` added: its generated names change, not its wire type; its versions are compared as the message's own"}
	MessageRenamed          = Rule{"MESSAGE-RENAMED", Wire, "a message removed and one with the same versions added under another `type`: the type it travels as changes"}
	WireTypeChanged         = Rule{"WIRE-TYPE-CHANGED", Wire, "a message's `type` changes: producers and queued messages carry the old one"}
	EnvelopeChanged         = Rule{"ENVELOPE-CHANGED", Wire, "a queue reads, or the generated producers write, a message in another envelope profile: producers, consumers and queued messages on the old schema carry the old one"}
	FieldWireRenamed        = Rule{"FIELD-WIRE-RENAMED", Wire, "a field or header renamed as it travels, its Go name kept (`order_id` → `orderId`, both `OrderID`): producers and queued messages on the old schema send the old name, which the new extractor ignores"}
	FieldTypeChanged        = Rule{"FIELD-TYPE-CHANGED", Wire, "a field's type changes, other than from one integer type to another (its Go field also gets `FIELD-GO-TYPE-CHANGED`)"}
	ContentTypeRemoved      = Rule{"CONTENT-TYPE-REMOVED", Wire, "a version no longer accepts a content type"}
	FieldRequiredAdded      = Rule{"FIELD-REQUIRED-ADDED", Inflight, "a new required field or header"}
	FieldMadeRequired       = Rule{"FIELD-MADE-REQUIRED", Inflight, "an optional field or header becomes required"}
	FieldNullRefused        = Rule{"FIELD-NULL-REFUSED", Inflight, "a required, nullable field no longer accepts null (an optional one reads null as absent)"}
	DefaultChanged          = Rule{"DEFAULT-CHANGED", Inflight, "an optional field's default changes, or is added or removed: queued messages without it read differently (the finding quotes a string default, one of more than 40 bytes by its first 37, then `...`)"}
	BoundNarrowed           = Rule{"BOUND-NARROWED", Inflight, "a length, range (an integer type's own range too), item count, enum value set or pattern accepts less (any pattern change counts; the finding quotes at most 20 of an enum's values for each revision, a long one shortened to 40 bytes, then how many more, and a pattern of more than 40 bytes by its first 37, then `...`)"}
	ExampleRejected         = Rule{"EXAMPLE-REJECTED", Inflight, "an example of the old version fails the new one"}
	VersionUnconsumed       = Rule{"VERSION-UNCONSUMED", Inflight, "a queue no longer accepts a version it did: those queued fail at dispatch, to the DLQ"}
	QueueRemoved            = Rule{"QUEUE-REMOVED", Inflight, "a queue is no longer consumed: what it, its retry buckets and DLQ hold stays there"}
	BodyLimitNarrowed       = Rule{"BODY-LIMIT-NARROWED", Inflight, "`max_body_bytes` lowered: queued bodies between the limits go to the DLQ unread"}
	QueueShared             = Rule{"QUEUE-SHARED", Inflight, "a queue new to one schema of the run that another consumes too, reading other messages or versions, or in another envelope profile: each consumer takes deliveries meant for the other, fails them at dispatch and sends them to the DLQ"}
	FieldMadeOptional       = Rule{"FIELD-MADE-OPTIONAL", Producer, "a required field or header becomes optional"}
	FieldRequiredRemoved    = Rule{"FIELD-REQUIRED-REMOVED", Producer, "a required field removed: old consumers reject messages without it"}
	FieldNullAllowed        = Rule{"FIELD-NULL-ALLOWED", Producer, "a required field newly accepts null"}
	BoundWidened            = Rule{"BOUND-WIDENED", Producer, "a length, range (an integer type's own range too), item count, enum value set or pattern accepts more (the finding quotes at most 20 of an enum's values for each revision, a long one shortened to 40 bytes, then how many more, and a pattern as `BOUND-NARROWED` does)"}
	ExampleRejectedByOld    = Rule{"EXAMPLE-REJECTED-BY-OLD", Producer, "an example of the new version fails the old one"}
	VersionAdded            = Rule{"VERSION-ADDED", Producer, "a queue accepts a version it did not, of a message it consumed or of one new to it: consumers on the old schema fail it at dispatch, to the DLQ, so producers may send it only once every consumer runs the new schema"}
	QueueTypeChanged        = Rule{"QUEUE-TYPE-CHANGED", Topology, "`type` changed: RabbitMQ cannot change the type of the queue, its retry buckets or DLQ"}
	DLQChanged              = Rule{"DLQ-CHANGED", Topology, "`dlq` changed: the main queue's `x-dead-letter-routing-key` changes"}
	DeliveryLimitChanged    = Rule{"DELIVERY-LIMIT-CHANGED", Topology, "a quorum queue's `delivery_limit` changed: its `x-delivery-limit` changes"}
	SingleActiveChanged     = Rule{"SINGLE-ACTIVE-CONSUMER-CHANGED", Topology, "`arguments.single_active_consumer` changed: `x-single-active-consumer` changes"}
	MaxPriorityChanged      = Rule{"MAX-PRIORITY-CHANGED", Topology, "`arguments.max_priority` changed: `x-max-priority` changes"}
	MaxLengthChanged        = Rule{"MAX-LENGTH-CHANGED", Topology, "`arguments.max_length` or `max_length_bytes` changed: `x-max-length` or `x-max-length-bytes` changes"}
	OverflowChanged         = Rule{"OVERFLOW-CHANGED", Topology, "`arguments.overflow` changed: `x-overflow` changes"}
	MessageTTLChanged       = Rule{"MESSAGE-TTL-CHANGED", Topology, "`arguments.message_ttl` changed: `x-message-ttl` changes"}
	InitialGroupSizeChanged = Rule{"INITIAL-GROUP-SIZE-CHANGED", Topology, "a quorum queue's `arguments.initial_group_size` changed: `x-quorum-initial-group-size` changes"}
	LilyArgumentsMoved      = Rule{"LILY-ARGUMENTS-MOVED", Topology, "`lily_arguments` or `ownership` changed whether the queue's declarations carry Lily's dead-lettering, TTL and limit arguments"}
	RetryBucketAdded        = Rule{"RETRY-BUCKET-ADDED", Topology, "a queue whose Lily arguments come from policies (`lily_arguments: policy`, or `ownership: external`) retries through a bucket it did not (`retry.delays` changed, or retries added): the bucket is declared with its type alone, and until the policies `lilygen topology` writes are applied it keeps what it gets, neither expiring it nor returning it to the queue"}
	OwnershipChanged        = Rule{"OWNERSHIP-CHANGED", Topology, "a queue's or exchange's `ownership` changed: Lily starts or stops declaring it"}
	ExchangeTypeChanged     = Rule{"EXCHANGE-TYPE-CHANGED", Topology, "an exchange's `type` changed (for an external exchange: the schema now says its owner changed it)"}
	ExchangeChanged         = Rule{"EXCHANGE-CHANGED", Topology, "an owned exchange's `durable`, `internal` or `alternate_exchange` changed"}
	DeclaredDifferently     = Rule{"DECLARED-DIFFERENTLY", Topology, "a queue or owned exchange new to one schema of the run that another declares differently (a queue with its retry buckets, DLQ and policies, as `lilygen topology` compares them; an external exchange by its type): RabbitMQ refuses whichever declaration comes second (406)"}
	BindingRemoved          = Rule{"BINDING-REMOVED", Routing, "a queue or exchange no longer binds to an exchange it did. Lily never unbinds: the old binding stays on the broker, and keeps routing, until deleted by hand; once it is (or on a broker set up anew) what that exchange routed there stops arriving"}
	RoutingKeyNarrowed      = Rule{"ROUTING-KEY-NARROWED", Routing, "a binding's routing key, pattern or header match accepts less. Lily never unbinds: the old binding stays on the broker, and keeps routing, until deleted by hand; once it is (or on a broker set up anew) some messages stop arriving"}
	AlternateDiverted       = Rule{"ALTERNATE-DIVERTED", Routing, "a binding added to, or widened on, an exchange with an `alternate_exchange` takes messages the exchange routed nowhere before: the queues its alternate exchange routed them to no longer receive them"}
	PublishChanged          = Rule{"PUBLISH-CHANGED", Routing, "a message's `publish` exchange or routing key changes (a fixed key, or the field or header it is read from): queues bound to the old one stop receiving it from producers on the new schema"}

	LintQueueName         = Rule{"LINT-QUEUE-NAME", Lint, "a queue or DLQ name that is not lower-case words joined by `.`, `-` or `_`"}
	LintFieldName         = Rule{"LINT-FIELD-NAME", Lint, "a payload JSON key that is not snake_case (headers are exempt, and so are the keys of a message read in a CloudEvents or header-mapped envelope, which its producer names)"}
	LintStringUnbounded   = Rule{"LINT-STRING-UNBOUNDED", Lint, "a string or bytes field, element or header without `max_length`"}
	LintListUnbounded     = Rule{"LINT-LIST-UNBOUNDED", Lint, "a list or map without `max_items`"}
	LintVersionUnconsumed = Rule{"LINT-VERSION-UNCONSUMED", Lint, "a version no queue consumes, in a schema that has queues"}
	LintRemoveAfterPassed = Rule{"LINT-REMOVE-AFTER-PASSED", Lint, "a version kept past its `remove_after` date"}
	// LintTypeUnused: an included file's types may serve other schemas, so
	// only the root file's are held to it.
	LintTypeUnused = Rule{"LINT-TYPE-UNUSED", Lint, "a shared type of the root file that no message version uses (it generates no Go code)"}
	// LintVersionUnreachable: not an error, since the message's other
	// versions may be read by another queue, in another profile.
	LintVersionUnreachable = Rule{"LINT-VERSION-UNREACHABLE", Lint, "a queue consumes a version other than the one its envelope profile fixes (`version: {fixed: n}`): every delivery reads as version n, so that version's handler method is never called"}
	// LintSingleActiveConcurrency: a single active consumer is asked for to
	// keep order, which concurrent handlers lose.
	LintSingleActiveConcurrency = Rule{"LINT-SINGLE-ACTIVE-CONCURRENCY", Lint, "a queue with `single_active_consumer` and `concurrency` above 1, and no `ordering`"}
	// LintUnorderedRetry: a retry bucket returns a message behind those
	// that arrived while it waited.
	LintUnorderedRetry = Rule{"LINT-UNORDERED-RETRY", Lint, "a queue with `single_active_consumer` and no `ordering` that retries, or an ordered queue whose `settlement_budget` cannot carry its retries in line"}
	// LintBudgetShort: the schema takes any budget from the handler
	// timeout up; the runtime wants room for the steps around the call.
	LintBudgetShort = Rule{"LINT-BUDGET-SHORT", Lint, "a `settlement_budget` below the handler timeout, four step timeouts and 2s (the handler timeout + 22s at the default `Config.StepTimeout`; a step more with a `Config.Scope`), which `NewConsumer` refuses"}
	// LintBodyOverLimit: a producer's round trip through the extractor
	// checks the schema's bounds, not a consuming queue's body limit,
	// which the guard applies before any extractor.
	LintBodyOverLimit = Rule{"LINT-BODY-OVER-LIMIT", Lint, "a queue consumes a version whose body at the schema's bounds, as a generated producer marshals it (6 bytes a string character, base64 for bytes, every list full, every optional field present), can exceed its `max_body_bytes`, which dead-letters it unread; a version with an unbounded string, bytes, list or any map has no such bound and is not reported"}
)

// All lists every rule: the breaking ones by category, in the order reports
// list them, then the lint rules.
var All = []Rule{
	PackageChanged, OutputChanged, MessageRemoved, VersionRemoved, FieldRemoved, FieldGoTypeChanged, EnumConstantRemoved,
	HandlerMethodAdded, InboxRequirementChanged, ProducerRemoved, PublishRemoved, MessageGoRenamed,
	MessageRenamed, WireTypeChanged, EnvelopeChanged, FieldWireRenamed, FieldTypeChanged, ContentTypeRemoved,
	FieldRequiredAdded, FieldMadeRequired, FieldNullRefused, DefaultChanged, BoundNarrowed,
	ExampleRejected, VersionUnconsumed, QueueRemoved, BodyLimitNarrowed, QueueShared,
	FieldMadeOptional, FieldRequiredRemoved, FieldNullAllowed, BoundWidened, ExampleRejectedByOld, VersionAdded,
	QueueTypeChanged, DLQChanged, DeliveryLimitChanged,
	SingleActiveChanged, MaxPriorityChanged, MaxLengthChanged, OverflowChanged, MessageTTLChanged, InitialGroupSizeChanged,
	LilyArgumentsMoved, RetryBucketAdded, OwnershipChanged, ExchangeTypeChanged, ExchangeChanged, DeclaredDifferently,
	BindingRemoved, RoutingKeyNarrowed, AlternateDiverted, PublishChanged,
	LintQueueName, LintFieldName, LintStringUnbounded, LintListUnbounded, LintVersionUnconsumed, LintRemoveAfterPassed,
	LintSingleActiveConcurrency, LintUnorderedRetry, LintBudgetShort, LintTypeUnused, LintVersionUnreachable, LintBodyOverLimit,
}

// Lookup returns the rule of id.
func Lookup(id string) (Rule, bool) {
	for _, r := range All {
		if r.ID == id {
			return r, true
		}
	}
	return Rule{}, false
}

// Breaking are the ids of the breaking-change rules, which an acknowledgement
// may name, in the order of All.
func Breaking() []string {
	var out []string
	for _, r := range All {
		if r.Category != Lint {
			out = append(out, r.ID)
		}
	}
	return out
}
