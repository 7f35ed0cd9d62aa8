package schema

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/lily-mq/lily/internal/printable"
)

// Error is one problem in a schema file, at the position of the node that has
// it. Its fields are meant for printers of every format (text, JSON, CI
// annotations): File is the path the file was opened by, Line and Column count
// from 1, Rule is a stable id (one of the Rule constants) that tools and
// documentation may rely on, Msg is one plain sentence without the position,
// and Hint, when not empty, suggests a fix ("did you mean \"prefetch\"?").
type Error struct {
	File   string
	Line   int
	Column int
	Rule   string
	Msg    string
	Hint   string
}

// Error formats e as file:line:column: message (hint) [RULE], on one line:
// what the schema wrote, put in the message as it is, shows its control
// characters escaped (\n, \x1b), so that it cannot forge another error
// line or drive a terminal.
func (e *Error) Error() string {
	s := fmt.Sprintf("%s:%d:%d: %s", printable.String(e.File), e.Line, e.Column, printable.String(e.Msg))
	if e.Hint != "" {
		s += " (" + printable.String(e.Hint) + ")"
	}
	return s + " [" + e.Rule + "]"
}

// The rule ids of schema errors. They are stable: a rule may be added, but an
// id never changes meaning. docs/schema.md lists them with examples.
const (
	RuleSyntax           = "YAML-SYNTAX"         // the file is not YAML
	RuleVersion          = "SCHEMA-VERSION"      // version missing or unknown
	RuleAlias            = "YAML-ALIAS"          // YAML aliases are refused
	RuleKind             = "WRONG-KIND"          // a value of the wrong kind (list for mapping, string for integer…)
	RuleDuplicateKey     = "DUPLICATE-KEY"       // a mapping key twice
	RuleUnknownKey       = "UNKNOWN-KEY"         // a key the language does not have
	RuleMissingKey       = "MISSING-KEY"         // a required key is absent
	RuleEmpty            = "EMPTY"               // a list, mapping or string that needs content
	RuleName             = "BAD-NAME"            // a package, message, field, header or enum name the language refuses
	RuleQueueName        = "QUEUE-NAME"          // a queue name RabbitMQ would refuse
	RuleNameClash        = "NAME-CLASH"          // two schema entities give one Go name
	RuleDuplicateVersion = "DUPLICATE-VERSION"   // a version twice in one message
	RuleDuplicate        = "DUPLICATE"           // a content type, consumed version or enum value twice
	RuleUnknownType      = "UNKNOWN-TYPE"        // a field or header type that does not exist
	RuleTypeCycle        = "TYPE-CYCLE"          // a shared type that contains itself
	RuleBoundType        = "BOUND-TYPE"          // a bound or key that does not apply to the field's type
	RuleImpossibleBound  = "IMPOSSIBLE-BOUND"    // a bound no value can meet
	RuleRange            = "OUT-OF-RANGE"        // a number outside what the key allows
	RuleContentType      = "CONTENT-TYPE"        // an unsupported content type
	RuleUnknownRef       = "UNKNOWN-REFERENCE"   // a reference to a message or version that does not exist
	RuleDuration         = "BAD-DURATION"        // not a positive Go duration
	RuleRetryOrder       = "RETRY-ORDER"         // retry delays that do not increase
	RuleRetry            = "RETRY-POLICY"        // retries without delays, a bad budget
	RulePattern          = "BAD-PATTERN"         // a pattern that is not an RE2 regular expression
	RuleDefault          = "BAD-DEFAULT"         // a default that is misplaced or breaks its own bounds
	RuleExample          = "BAD-EXAMPLE"         // an example that breaks the schema, or sets a header its envelope writes
	RuleDate             = "BAD-DATE"            // deprecated_since / remove_after not dates, or out of order
	RuleInclude          = "BAD-INCLUDE"         // an include that cannot be read, is absolute or outside the repository, is one file too many, or declares what only the root may
	RuleOutput           = "BAD-OUTPUT"          // an output directory or AsyncAPI file that is not relative, not printable, or not YAML; a generated file that leads outside the repository (File.CheckOutput)
	RuleReservedHeader   = "RESERVED-HEADER"     // a header Lily or the broker writes, or routes by
	RuleInbox            = "BAD-INBOX"           // an inbox policy that does not exist
	RuleItemRequired     = "ITEM-REQUIRED"       // required on a list or map element, which is always present
	RuleAcknowledge      = "BAD-ACKNOWLEDGEMENT" // an acknowledgement of a rule that does not exist or is not a breaking-change rule
	RuleExchange         = "BAD-EXCHANGE"        // an exchange or binding RabbitMQ would refuse or that cannot route
	RuleOwnership        = "BAD-OWNERSHIP"       // an ownership that does not exist, or a key that does not apply to it
	RuleArgument         = "BAD-ARGUMENT"        // a queue argument the queue's type or other arguments refuse
	RuleEnvelope         = "BAD-ENVELOPE"        // an envelope profile that cannot be read, or two on one queue that cannot be told apart
	RuleOrdering         = "BAD-ORDERING"        // an ordering whose key is not in every consumed version, or of a kind that cannot key
	RulePublish          = "BAD-PUBLISH"         // a publish: that cannot be generated or would not route: not Lily's envelope, a bad exchange or key, a queue reached that does not consume it
	RuleTooMany          = "TOO-MANY-ERRORS"     // more problems than are listed
)

// maxErrors bounds the problems listed for one schema: past it they are
// counted, not kept, so that a schema broken everywhere costs bounded time
// and output.
const maxErrors = 1000

// maxListed bounds the names a hint lists.
const maxListed = 20

// listed is names joined for a hint: at most maxListed of them, then how
// many more.
func listed(names []string) string {
	short := make([]string, min(len(names), maxListed))
	for i := range short {
		short[i] = shorten(names[i])
	}
	if len(names) <= maxListed {
		return strings.Join(short, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(short, ", "), len(names)-maxListed)
}

// ErrorList is every problem found in a schema and the files it includes,
// sorted by file (in the order they were read) and position.
type ErrorList []*Error

func (l ErrorList) Error() string {
	lines := make([]string, len(l))
	for i, e := range l {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// sorted orders the list by file, in the order files were read, then by
// position, keeping the order of problems found at the same node, and drops
// exact repeats. It bounds each hint (clip): a site sets one after its
// error is made, whose message errorAt bounds.
func (l ErrorList) sorted(files []string) ErrorList {
	for _, e := range l {
		e.Hint = clip(e.Hint)
	}
	rank := func(name string) int { return slices.Index(files, name) }
	slices.SortStableFunc(l, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(rank(a.File), rank(b.File)), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
	return slices.CompactFunc(l, func(a, b *Error) bool { return *a == *b })
}

// A typo hint compares the name it did not find with every candidate of
// about its length, at a cost of the product of their lengths, and a
// schema may hold many names and many problems. So a name longer than
// maxHinted, or a candidate, is not compared (a message, shared type,
// envelope or field name is at most 128 bytes, an exchange's 255), and the hints of one schema fill at most maxHintCells cells
// of the edit-distance table between them: past that, a problem gets the
// hint that says what fits.
const (
	maxHinted    = 128
	maxHintCells = 1 << 26
)

// hinter works out typo hints, counting the work they take.
type hinter struct {
	// cells counts the cells of the edit-distance table filled so far.
	cells int
}

// suggest returns `did you mean "x"?` for the candidate closest to got, or ""
// when none is close enough to be a likely typo, or got is too long to
// compare, or the budget is spent.
func (h *hinter) suggest(got string, candidates []string) string {
	if len(got) > maxHinted {
		return ""
	}
	lower := strings.ToLower(got)
	best, bestDist := "", -1
	for _, c := range candidates {
		if len(c) > maxHinted {
			continue
		}
		if d, most := len(got)-len(c), max(2, len(c)/3); d > most || -d > most {
			continue // at least that many edits apart: not a typo
		}
		if h.cells+len(got)*len(c) > maxHintCells {
			break // the budget is spent: compare no more
		}
		h.cells += len(got) * len(c)
		d := distance(lower, strings.ToLower(c))
		if d <= max(2, len(c)/3) && (bestDist < 0 || d < bestDist) {
			best, bestDist = c, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf("did you mean %q?", shorten(best))
}

// nearest sets e's hint: the candidate nearest to got, or else what fits. A
// problem past maxErrors is not listed, and its hint is not worked out: for
// many problems among many names, that would take time of their product.
func (p *parser) nearest(e *Error, got string, candidates []string, fits string) {
	if e.listed() {
		e.Hint = p.hints.hint(got, candidates, fits)
	}
}

// listed reports whether e is among the problems listed: one past
// maxErrors is only counted, and what its hint would take is spared.
func (e *Error) listed() bool { return e.Rule != "" }

// hint suggests the candidate nearest to got, or else says what fits.
func (h *hinter) hint(got string, candidates []string, fits string) string {
	if s := h.suggest(got, candidates); s != "" {
		return s
	}
	return fits
}

// distance is the Levenshtein edit distance between a and b, counted in bytes:
// keys and names are ASCII.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// maxText bounds the message and the hint of one error, as printed: an
// error quotes what the schema wrote, and a value a site does not shorten
// (a message yaml.v3 words, say) must not make a line of megabytes. It is
// far above what lilygen writes, a hint listing maxListed names included.
const maxText = 4096

// clip bounds s to maxText bytes as printable.String shows it, cutting it
// between characters and ending it in ... where it is longer.
func clip(s string) string {
	if len(s) <= maxText/4 {
		return s // printable.String shows a byte in at most 4
	}
	cut, shown := -1, 0
	for i := 0; i < len(s); {
		_, size := utf8.DecodeRuneInString(s[i:])
		shown += len(printable.String(s[i : i+size]))
		switch {
		case shown > maxText:
			return s[:cut] + "..."
		case cut < 0 && shown > maxText-len("..."):
			cut = i
		}
		i += size
	}
	return s
}
