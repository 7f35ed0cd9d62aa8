// Package schema reads and checks Lily schema files (version 1) into a model
// the generator consumes. Every slice in the model keeps file order, except
// message versions, which ascend, so that the same file always gives the same
// model.
package schema

import "time"

// Defaults of keys a schema may leave out.
const (
	DefaultOutput         = "."
	DefaultContentType    = "application/json"
	DefaultQueueType      = Classic
	DefaultPrefetch       = 32
	DefaultConcurrency    = 8
	DefaultMaxBodyBytes   = 1 << 20
	DefaultHandlerTimeout = 30 * time.Second
	// DLQSuffix names a queue's DLQ when the schema names none.
	DLQSuffix = ".dlq"
)

// File is one checked schema file.
type File struct {
	// Name is the path the file was read from, as given.
	Name    string
	Package string
	// Output is the directory of the generated file, slash-separated and
	// relative to the schema file's directory.
	Output   string
	Messages []*Message
	Queues   []*Queue
}

// Message is one message type; Name is also its AMQP type property.
type Message struct {
	Name     string
	Versions []*Version // ascending
}

// Version is one version of a message: the payload that header x-lily-version names.
type Version struct {
	Number int
	// GoName is the payload struct's name, such as OrderPlacedV1.
	GoName       string
	ContentTypes []string
	Fields       []*Field
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
	Object  Type = "object"
	List    Type = "list"
)

var types = []Type{String, Integer, Number, Bool, Time, Object, List}

// Field is one field of a payload, or the element of a list field.
type Field struct {
	// Name is the JSON key; empty for a list's element.
	Name string
	// GoName is the exported Go field name; empty for a list's element.
	GoName string
	Type   Type
	// Required fields must be present and not null. List elements are always
	// required.
	Required bool
	// Bounds; nil when the schema sets none. Lengths count characters (runes).
	MinLength, MaxLength *int
	MinInt, MaxInt       *int64
	MinNum, MaxNum       *float64
	MinItems, MaxItems   *int
	// Fields of an object, in file order.
	Fields []*Field
	// Items is the element of a list.
	Items *Field
	// StructName is the Go struct of an object, such as OrderPlacedV2Customer.
	StructName string
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
}

// Consume is one message a queue accepts, in some of its versions.
type Consume struct {
	Message  *Message
	Versions []*Version // ascending
}

// Retry is a queue's retry policy.
type Retry struct {
	// Delays[i] is the wait in retry bucket i.
	Delays []time.Duration
	// MaxAttempts counts the first attempt too.
	MaxAttempts int
}
