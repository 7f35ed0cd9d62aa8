package review

import (
	"cmp"
	"slices"
	"strings"
)

// Category groups findings by what they break.
type Category string

// The categories, in the order reports list them.
const (
	// APIBreak: the generated Go names and signatures, so code using them stops compiling.
	APIBreak Category = "API"
	// WireBreak: the payload or content type, for producers and consumers alike.
	WireBreak Category = "WIRE"
	// InflightBreak: messages already in a queue, a retry bucket or a DLQ can no
	// longer be decoded or dispatched.
	InflightBreak Category = "INFLIGHT"
	// ProducerBreak: producers on the new schema send what consumers still on
	// the old one reject; safe only once every consumer runs the new code.
	ProducerBreak Category = "PRODUCER"
	// TopologyBreak: RabbitMQ refuses to redeclare a queue (406 PRECONDITION_FAILED).
	TopologyBreak Category = "TOPOLOGY"
	// Convention: a convention, not a break.
	Convention Category = "LINT"
)

var categories = []Category{APIBreak, WireBreak, InflightBreak, ProducerBreak, TopologyBreak, Convention}

// Describe says what a category's findings break, for report headings.
func (c Category) Describe() string {
	return map[Category]string{
		APIBreak:      "generated Go names and signatures: code using them stops compiling",
		WireBreak:     "payload or content type: producers and consumers disagree on the wire",
		InflightBreak: "messages already in a queue, retry bucket or DLQ can no longer be decoded or dispatched",
		ProducerBreak: "producers on the new schema send what consumers on the old one reject: deploy consumers first",
		TopologyBreak: "RabbitMQ refuses the redeclare (406 PRECONDITION_FAILED)",
		Convention:    "conventions",
	}[c]
}

// Finding is one breaking change or lint finding.
type Finding struct {
	Rule     string
	Category Category
	// File, Line and Column place it in the new schema; what was removed is
	// placed where it used to hang.
	File         string
	Line, Column int
	// Subject names what the finding is about, stable across edits that
	// move lines, such as OrderPlaced.v2.customer.email or a queue name: an
	// acknowledgement names RULE@Subject.
	Subject   string
	Message   string
	Migration string
}

// Ack is the acknowledgement that would accept f.
func (f Finding) Ack() string { return f.Rule + "@" + f.Subject }

// Acknowledged reports whether one of acks, each RULE or RULE@SUBJECT,
// accepts f.
func (f Finding) Acknowledged(acks []string) bool {
	return slices.ContainsFunc(acks, func(a string) bool {
		rule, subject, found := strings.Cut(a, "@")
		return rule == f.Rule && (!found || subject == f.Subject)
	})
}

// Sort orders findings by category, then by position and rule.
func Sort(fs []Finding) {
	slices.SortStableFunc(fs, func(a, b Finding) int {
		return cmp.Or(
			cmp.Compare(slices.Index(categories, a.Category), slices.Index(categories, b.Category)),
			cmp.Compare(a.File, b.File),
			cmp.Compare(a.Line, b.Line),
			cmp.Compare(a.Column, b.Column),
			cmp.Compare(a.Rule, b.Rule),
			cmp.Compare(a.Subject, b.Subject),
		)
	})
}
