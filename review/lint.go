package review

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/schema"
	"github.com/lily-mq/lily/schema/rules"
)

var (
	// Queue names in lower case with dots, dashes and underscores between
	// words read well in the management UI and in retry bucket names.
	queueNameStyle = regexp.MustCompile(`^[a-z][a-z0-9]*([._-][a-z0-9]+)*$`)
	// JSON keys in snake_case, the style of the examples and the reference.
	fieldNameStyle = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
)

// Lint lists the conventions f does not follow. today decides whether a
// version's remove_after date has passed.
func Lint(f *schema.File, today time.Time) []Finding {
	var out []Finding
	add := func(r rules.Rule, subject string, at schema.Pos, msg, fix string) {
		out = append(out, Finding{Rule: r.ID, Category: r.Category, File: at.File, Line: at.Line, Column: at.Column, Subject: subject, Message: msg, Migration: fix})
	}
	sizes := bodySizes{named: map[string]size{}}
	for _, q := range f.Queues {
		names := []string{q.Name}
		// A default DLQ name follows the queue's, and its finding.
		if q.DLQ != q.Name+schema.DLQSuffix {
			names = append(names, q.DLQ)
		}
		for _, name := range names {
			if !queueNameStyle.MatchString(name) {
				add(rules.LintQueueName, q.Name, q.Pos,
					fmt.Sprintf("queue name %q is not lower case words joined by '.', '-' or '_'", name),
					"rename it, such as billing.payments")
			}
		}
		if q.Retry.MaxAttempts > 1 {
			bucket := queue.RetryBucket(q.Name, q.Retry.Delays[0])
			need := queue.ParkBudget(q.HandlerTimeout, q.Retry.Delays, q.Retry.MaxAttempts, queue.ParkSteps, queue.DefaultStepTimeout)
			switch budget := queue.Budget(q.HandlerTimeout, q.SettlementBudget); {
			case q.Ordering == nil && q.Arguments.SingleActiveConsumer:
				add(rules.LintUnorderedRetry, q.Name, q.Pos,
					fmt.Sprintf("queue %q has a single active consumer to keep order, but a retry takes the message out of line: it waits in %s and comes back behind every message that arrived meanwhile", q.Name, bucket),
					"add ordering (sequential, or by a header or field): a retry then waits in line, holding its key's later messages; or set max_attempts: 1, so that a failure goes to the DLQ at once and the rest keep their order")
			case q.Ordering != nil && budget < need:
				// Without settlement_budget lilygen works out this need, and
				// refuses one past the longest budget.
				fix := fmt.Sprintf("remove settlement_budget, or raise it to %s", need)
				if need > schema.MaxDuration {
					fix = fmt.Sprintf("lower max_attempts, handler_timeout or the retry delays: the %s its attempts need in line is longer than %s, the longest settlement_budget", need, schema.MaxDuration)
				}
				add(rules.LintUnorderedRetry, q.Name, q.Pos,
					fmt.Sprintf("queue %q retries in line, but its settlement_budget %s is short of the %s its %d attempts and delays need: a late retry goes through %s instead, behind the messages that arrived meanwhile", q.Name, budget, need, q.Retry.MaxAttempts, bucket),
					fix)
			}
		}
		if least := queue.MinBudget(q.HandlerTimeout); q.SettlementBudget > 0 && q.SettlementBudget < least {
			// The runtime's own budget, without one, is never short.
			fix := fmt.Sprintf("remove settlement_budget, or raise it to %s", least)
			if least > schema.MaxDuration {
				fix = fmt.Sprintf("remove settlement_budget, which lets the runtime work one out: the %s it wants is longer than %s, the longest a schema holds", least, schema.MaxDuration)
			}
			add(rules.LintBudgetShort, q.Name, q.Pos,
				fmt.Sprintf("queue %q has settlement_budget %s, under the %s the runtime wants at the default step timeout (handler_timeout %s, four steps of 5s, 2s for a handoff; a step more with a Config.Scope): NewConsumer refuses it unless Config.StepTimeout is shorter", q.Name, q.SettlementBudget, least, q.HandlerTimeout),
				fix)
		}
		for _, c := range q.Consumes {
			fixed := c.Envelope.Profile.Version.Fixed
			for _, v := range c.Versions {
				if fixed != 0 && v.Number != fixed {
					add(rules.LintVersionUnreachable, q.Name, c.Pos,
						fmt.Sprintf("queue %q reads %s in envelope %s, whose messages are all version %d: its handler for version %d is never called", q.Name, c.Message.Name, c.Envelope.Name, fixed, v.Number),
						fmt.Sprintf("consume only version %d here (versions: [%d])", fixed, fixed))
				}
				// An unbounded body is LINT-STRING-UNBOUNDED's and
				// LINT-LIST-UNBOUNDED's to name (a map's keys, which
				// nothing bounds, aside).
				if b := sizes.body(v); b.bounded && b.n > int64(q.MaxBodyBytes) {
					fix := fmt.Sprintf("raise max_body_bytes to %d, or lower the version's max_length and max_items", b.n)
					if b.n > queue.MaxBodyBytes {
						fix = fmt.Sprintf("lower the version's max_length and max_items: its body at those bounds is past %d bytes, the most max_body_bytes may be", queue.MaxBodyBytes)
					}
					add(rules.LintBodyOverLimit, fmt.Sprintf("%s/%s.v%d", q.Name, c.Message.Name, v.Number), c.Pos,
						fmt.Sprintf("queue %q reads %s version %d, whose body at the schema's bounds is up to %d bytes as a generated producer marshals it, over the queue's max_body_bytes %d: a producer's round trip accepts such a body, and the queue dead-letters it unread", q.Name, c.Message.Name, v.Number, b.n, q.MaxBodyBytes),
						fix)
				}
			}
		}
		if q.Arguments.SingleActiveConsumer && q.Concurrency > 1 && q.Ordering == nil {
			add(rules.LintSingleActiveConcurrency, q.Name, q.Pos,
				fmt.Sprintf("queue %q has a single active consumer, which keeps order across processes, but handles %d deliveries at once, which does not", q.Name, q.Concurrency),
				"set concurrency: 1, or order by a key (ordering: {field: …}), or drop single_active_consumer")
		}
	}
	day := today.Format(time.DateOnly)
	consumedBy := consumers(f)
	foreign := foreignKeys(f)
	for _, m := range f.Messages {
		for _, v := range m.Versions {
			subject := fmt.Sprintf("%s.v%d", m.Name, v.Number)
			if len(f.Queues) > 0 && len(consumedBy[versionKey{m.Name, v.Number}]) == 0 {
				add(rules.LintVersionUnconsumed, subject, v.Pos,
					fmt.Sprintf("%s version %d is consumed by no queue", m.Name, v.Number),
					"consume it, or remove it once nothing produces it")
			}
			// Dates are YYYY-MM-DD, so they compare as strings.
			if v.RemoveAfter != "" && v.RemoveAfter < day {
				add(rules.LintRemoveAfterPassed, subject, v.Pos,
					fmt.Sprintf("%s version %d was to be removed after %s", m.Name, v.Number, v.RemoveAfter),
					"remove it, or move remove_after")
			}
			walkFields(v.Fields, subject+".", func(fd *schema.Field, subject string) {
				lintField(fd, subject, !foreign.messages[m.Name], add)
			})
			walkFields(v.Headers, subject+".headers.", func(fd *schema.Field, subject string) {
				lintField(fd, subject, false, add)
			})
		}
	}
	// A shared type's fields are linted once, under its name.
	for _, t := range f.Types {
		walkFields(t.Fields, t.Named+".", func(fd *schema.Field, subject string) {
			lintField(fd, subject, !foreign.types[t.Named], add)
		})
	}
	used := map[*schema.Field]bool{}
	for _, t := range f.UsedTypes() {
		used[t] = true
	}
	for _, t := range f.Types {
		// An included file's types may serve other schemas that include it.
		if t.Pos.File == f.Name && !used[t] {
			add(rules.LintTypeUnused, t.Named, t.Pos,
				fmt.Sprintf("type %s is used by no message version: it generates no Go code", t.Named),
				"use it, or remove it")
		}
	}
	Sort(out)
	return out
}

// lintField checks one field, and its name when snakeCase: header names
// follow HTTP's style, not JSON's, and a foreign producer's keys are its own
// (see foreignKeys).
func lintField(f *schema.Field, subject string, snakeCase bool, add func(r rules.Rule, subject string, at schema.Pos, msg, fix string)) {
	if f.Name != "" && snakeCase && !fieldNameStyle.MatchString(f.Name) {
		add(rules.LintFieldName, subject, f.Pos,
			fmt.Sprintf("field name %q is not snake_case", f.Name),
			fmt.Sprintf("rename it in a new version, such as %s", snakeName(f.Name)))
	}
	switch {
	case (f.Type == schema.String || f.Type == schema.Bytes) && f.MaxLength == nil:
		add(rules.LintStringUnbounded, subject, f.Pos,
			fmt.Sprintf("%s %s has no max_length", f.Type, subject), "bound it with max_length")
	case (f.Type == schema.List || f.Type == schema.Map) && f.MaxItems == nil:
		add(rules.LintListUnbounded, subject, f.Pos,
			fmt.Sprintf("%s %s has no max_items", f.Type, subject), "bound it with max_items")
	}
}

// snakeName is name in snake_case: a word starts at an upper-case letter
// after a lower-case one or a digit, or before a lower-case one (orderID and
// OrderId are order_id, HTTPCode http_code), and '-' joins words as '_'.
// A field name is ASCII letters, digits, '_' and '-', starting with a letter.
func snakeName(name string) string {
	lower := func(c byte) bool { return c >= 'a' && c <= 'z' }
	upper := func(c byte) bool { return c >= 'A' && c <= 'Z' }
	digit := func(c byte) bool { return c >= '0' && c <= '9' }
	out := make([]byte, 0, len(name)+8)
	for i := 0; i < len(name); i++ {
		c := name[i]
		if upper(c) {
			prev, next := name[max(i-1, 0)], name[min(i+1, len(name)-1)]
			if i > 0 && (lower(prev) || digit(prev) || upper(prev) && lower(next)) {
				out = append(out, '_')
			}
			c += 'a' - 'A'
		} else if c == '-' {
			c = '_'
		}
		// One '_' between words.
		if c == '_' && (len(out) == 0 || out[len(out)-1] == '_') {
			continue
		}
		out = append(out, c)
	}
	return strings.TrimSuffix(string(out), "_")
}

// exempt names what LINT-FIELD-NAME leaves alone, by Go name.
type exempt struct{ messages, types map[string]bool }

// foreignKeys lists the messages whose JSON keys Lily's schema does not
// choose: those read in a profile other than Lily's, their own or that of a
// queue consuming them. Another framework's producer names their keys, which
// its consumers cannot rename. A shared type is exempt when only such
// messages use it; one a Lily message uses too is held to snake_case.
func foreignKeys(f *schema.File) exempt {
	out := exempt{messages: map[string]bool{}, types: map[string]bool{}}
	for _, m := range f.Messages {
		if m.Envelope != nil && m.Envelope.Profile.Kind != envelope.Lily {
			out.messages[m.Name] = true
		}
	}
	for _, q := range f.Queues {
		for _, c := range q.Consumes {
			if c.Envelope != nil && c.Envelope.Profile.Kind != envelope.Lily {
				out.messages[c.Message.Name] = true
			}
		}
	}
	lily := map[string]bool{}
	for _, m := range f.Messages {
		for _, v := range m.Versions {
			for _, t := range v.SharedTypes() {
				if out.messages[m.Name] {
					out.types[t] = true
				} else {
					lily[t] = true
				}
			}
		}
	}
	for t := range lily {
		delete(out.types, t)
	}
	return out
}

// walkFields calls fn with every field below fs, elements included, and its
// subject: prefix, the path of JSON keys, and [] for an element. It does not
// enter a shared type, which is shown and linted once, on its own.
func walkFields(fs []*schema.Field, prefix string, fn func(f *schema.Field, subject string)) {
	var walk func(f *schema.Field, subject string)
	walk = func(f *schema.Field, subject string) {
		fn(f, subject)
		if f.Named != "" {
			return
		}
		for _, c := range f.Fields {
			walk(c, subject+"."+c.Name)
		}
		if f.Items != nil {
			walk(f.Items, subject+"[]")
		}
	}
	for _, f := range fs {
		walk(f, prefix+f.Name)
	}
}

// versionKey names one version of a message by the message's Go name.
type versionKey struct {
	message string
	number  int
}

// consumers lists, for each message version, the queues of f that consume
// it, in file order: worked out once, since asking every queue for each
// version would take time of their product.
func consumers(f *schema.File) map[versionKey][]*schema.Queue {
	out := map[versionKey][]*schema.Queue{}
	for _, q := range f.Queues {
		for _, c := range q.Consumes {
			for _, v := range c.Versions {
				k := versionKey{c.Message.Name, v.Number}
				if qs := out[k]; len(qs) == 0 || qs[len(qs)-1] != q {
					out[k] = append(qs, q)
				}
			}
		}
	}
	return out
}
