// Package review holds what lilygen checks and writes for a schema's review
// in a pull request: lint findings, breaking changes against an older
// schema (each with its rule id and category), the Markdown review page, and
// the RabbitMQ definitions of the schema's queues.
package review

import (
	"cmp"
	"slices"
	"strings"

	"github.com/lily-mq/lily/schema/rules"
)

// Finding is one breaking change or lint finding.
type Finding struct {
	Rule     string
	Category rules.Category
	// File, Line and Column place it in the new schema; what was removed is
	// placed where it used to hang.
	File         string
	Line, Column int
	// Subject names what the finding is about, stable across edits that
	// move lines, such as OrderPlaced.v2.customer.email or a queue name: an
	// acknowledgement names RULE@Subject.
	Subject string
	// Message and Migration are plain text, no Markdown: they go to a
	// terminal and JSON as well, and the review page escapes them whole,
	// as they hold what the schema names.
	Message   string
	Migration string
	// Note, when set, says where what the finding is about moved from, in
	// a run of several schemas (BreakingAcross), and why an acknowledgement
	// that names the finding does not accept it.
	Note string
	// AcknowledgedBy, set on an accepted breaking change, names what accepts
	// it: --allow RULE[@SUBJECT], or the schema's entry and where it is.
	AcknowledgedBy string
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
			cmp.Compare(slices.Index(rules.Categories, a.Category), slices.Index(rules.Categories, b.Category)),
			cmp.Compare(a.File, b.File),
			cmp.Compare(a.Line, b.Line),
			cmp.Compare(a.Column, b.Column),
			cmp.Compare(a.Rule, b.Rule),
			cmp.Compare(a.Subject, b.Subject),
		)
	})
}
