// Package envelope describes how a producer's messages carry their type,
// version, id and time: the envelope profile. Lily's own profile is the
// default; CloudEvents and header-mapped profiles let a queue consume the
// messages of producers that cannot be changed, such as a CloudEvents emitter
// or a Spring AMQP service, exactly as they publish them.
//
// lilygen writes one Message for each message a queue consumes into the
// generated QueueSpec; the runtime's guard reads every delivery by the
// profile of its message, within the same bounds whatever the profile.
// Generated producers write a message in its profile with
// runtime.NewPublishing. The package holds data only and imports nothing but
// the standard library.
//
// A delivery's profile is found by its marks, in this order: content type
// application/cloudevents+json (structured CloudEvents), a
// cloudEvents_specversion or cloudEvents:specversion header (binary
// CloudEvents), the type header of a header-mapped profile, and last the
// profile that reads the AMQP type property (Lily's, or a header-mapped one
// with no type header). A queue's profiles must be told apart so: lilygen
// refuses a queue with two CloudEvents profiles, two profiles reading the
// type property, or two reading the same type header.
package envelope

import "strings"

// Kind is the family of a profile: where its type and id travel.
type Kind string

// The profile kinds.
const (
	// Lily: type in the AMQP type property, version in header
	// x-lily-version, id in message_id, time in timestamp.
	Lily Kind = "lily"
	// CloudEvents: version 1.0 of the CloudEvents AMQP binding, in binary
	// content mode (attributes in headers cloudEvents_<name>, or
	// cloudEvents:<name>; the body is the data) or structured content mode
	// (content type application/cloudevents+json; the body is the event as
	// JSON, its data member the payload). The id is the event's source and
	// id together: events of different sources may share an id.
	CloudEvents Kind = "cloudevents"
	// Headers: a producer that carries the type and id where it likes, such
	// as Spring AMQP's __TypeId__ header.
	Headers Kind = "headers"
)

// CloudEventMembers are the attributes and members a CloudEvent 1.0 defines
// itself (datacontentencoding is 0.3's): a version attribute cannot be one.
var CloudEventMembers = []string{
	"specversion", "id", "source", "type", "time", "datacontenttype", "dataschema", "subject",
	"data", "data_base64", "datacontentencoding",
}

// Profile is where one producer's messages carry their type, version, id and
// time. The zero Profile is Lily's own.
type Profile struct {
	Kind Kind
	// TypeHeader (Headers) is the header that holds the type, such as
	// __TypeId__; "" reads the AMQP type property.
	TypeHeader string
	// IDHeader (Headers) is the header that holds the message id; "" reads
	// the AMQP message_id property, unless NoID.
	IDHeader string
	// NoID (Headers): the producer sends no message id. Such messages have
	// no inbox key, so lilygen refuses an inbox for them.
	NoID bool
	// Version is where the version comes from. The zero Version is Lily's
	// header x-lily-version.
	Version Version
	// Source (CloudEvents) is the source attribute of the events Lily's
	// producers write, a URI-reference such as
	// https://payments.acme.example/api. Readers take each event's own, so
	// "" reads as well; lilygen then writes no producers, since an event
	// needs one.
	Source string
}

// MaxVersion bounds a message's version, as every reader of Lily's reads
// one: a version is an integer in 1..MaxVersion.
const MaxVersion = 1_000_000

// MaxTypeBytes bounds a message's type, as every reader of Lily's reads one:
// a type is 1..MaxTypeBytes bytes of TypeText.
const MaxTypeBytes = 128

// TypeText reports whether every byte of s may stand in a message's type:
// printable ASCII, space included (0x20..0x7e).
func TypeText(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// MaxContentTypeBytes bounds a message's content type, its parameters
// included, as every reader of Lily's reads one.
const MaxContentTypeBytes = 128

// Version is where a profile's version comes from: exactly one field is set.
// A version is an integer in 1..MaxVersion, as an AMQP integer or a string of
// decimal digits.
type Version struct {
	// Header is an AMQP header that holds the version.
	Header string
	// Attribute (CloudEvents) is an extension attribute that holds it: the
	// header cloudEvents_<Attribute> in binary mode, the event's member in
	// structured mode.
	Attribute string
	// ContentTypeParameter is a parameter of the content type, such as
	// version in application/json; version=2 (of the data's content type,
	// for CloudEvents).
	ContentTypeParameter string
	// TypeSuffix ends the type before the version's digits, such as ".v" in
	// payment.authorized.v2: the type is what comes before it.
	TypeSuffix string
	// Fixed is the version of every message of a producer that sends none.
	Fixed int
}

// Inbox is a message's policy on the transactional inbox.
type Inbox string

// The inbox policies.
const (
	// InboxNone: its deliveries are never claimed.
	InboxNone Inbox = "none"
	// InboxOptional: claimed when the consumer has an inbox.
	InboxOptional Inbox = "optional"
	// InboxRequired: claimed always; the consumer refuses to run without an
	// inbox.
	InboxRequired Inbox = "required"
)

// Message is one message a queue consumes: its type as it travels, the
// profile its producer uses, and whether its deliveries claim the inbox.
type Message struct {
	// Type is the wire type: printable ASCII, 1..128 bytes, such as
	// payment.authorized; with Version.TypeSuffix, the part before it.
	Type    string
	Profile Profile
	Inbox   Inbox
}

// ParameterSeparators are the characters RFC 9110 keeps out of a token,
// such as a content type parameter's name.
const ParameterSeparators = `()<>@,;:\"/[]?={}`

// MaxParameterName bounds the name of a version's content type parameter,
// so that "application/json; <name>=<version>" keeps within the 128 bytes
// a consumer's guard takes of a content type.
const MaxParameterName = 64

// ParameterName reports whether name can name a content type parameter: an
// RFC 9110 token (printable ASCII without spaces or separators such as ';'
// and '=', which would split it) of 1 to MaxParameterName bytes.
func ParameterName(name string) bool {
	if name == "" || len(name) > MaxParameterName {
		return false
	}
	for i := range len(name) {
		if c := name[i]; c <= ' ' || c >= 0x7f || strings.IndexByte(ParameterSeparators, c) >= 0 {
			return false
		}
	}
	return true
}
