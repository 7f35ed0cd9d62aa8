package review

import (
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"unicode"

	"github.com/lily-mq/lily/internal/printable"
	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/schema"
	"github.com/lily-mq/lily/templates"
)

// Page is what the review page template renders: one schema and, when it is
// compared with an older revision, what changed.
type Page struct {
	Source   string // the schema file's base name
	Package  string
	Output   string
	Messages []MessageView
	// Types are the shared types the messages use.
	Types []TypeView
	// Envelopes are the named envelope profiles, each with where it keeps
	// a message's type, id and version, in Markdown.
	Envelopes []string
	Queues    []QueueView
	// Against names the older revision; the rest of the comparison is empty
	// when it is "".
	Against  string
	Breaking []Finding
	Changes  []string
}

// MessageView is one message of the page.
type MessageView struct {
	Name     string
	Versions []VersionView
}

// VersionView is one message version of the page.
type VersionView struct {
	Number                       int
	GoName                       string
	ContentTypes                 string
	ConsumedBy                   []string
	DeprecatedSince, RemoveAfter string
	Fields, Headers              []FieldRow
	Examples                     int
}

// TypeView is one shared type of the page: an enum's values, or an
// object's fields, shown once for every version that uses it.
type TypeView struct {
	Name, Kind string
	// Values are an enum's.
	Values []string
	Fields []FieldRow
	// UsedBy are the Go names of the versions that use it, directly or
	// through another type.
	UsedBy []string
}

// FieldRow is one field, element or header of the page.
type FieldRow struct {
	Path, Type, Presence string
	// Limits are in Markdown for a table cell: what the schema wrote (a
	// pattern, enum values, a string default) in code spans, the rest
	// escaped.
	Limits string
}

// QueueView is one queue of the page.
type QueueView struct {
	Name, Type             string
	Prefetch, Concurrency  int
	Consumes               []string
	Delays                 []string
	Buckets                []string
	MaxAttempts            int
	DLQ                    string
	MaxBodyBytes           int
	HandlerTimeout, Budget string
	Inbox                  string
	// DeliveryLimit is a quorum queue's: a count, or "none"; empty for a
	// classic queue.
	DeliveryLimit string
	// Ownership is owned or external; LilyArguments says where Lily's own
	// arguments come from: declared or policy.
	Ownership, LilyArguments string
	// Arguments are those its team sets, as declared (key=value).
	Arguments []string
	// Routes are the bindings that bring messages to the queue, from the
	// furthest exchange in.
	Routes []string
	// Ordering says how handling is ordered; empty when it is not.
	Ordering string
}

// NewPage describes f; when old is not nil it also lists what changed since
// old, the revision named against.
func NewPage(f, old *schema.File, against string) Page {
	p := Page{Source: filepath.Base(f.Name), Package: f.Package, Output: f.Output}
	consumedBy := consumers(f)
	// The versions that use each shared type, gathered once: asking every
	// version for each type would take time of their product.
	usedBy := map[string][]string{}
	for _, m := range f.Messages {
		for _, v := range m.Versions {
			for _, t := range v.SharedTypes() {
				usedBy[t] = append(usedBy[t], v.GoName)
			}
		}
	}
	for _, m := range f.Messages {
		mv := MessageView{Name: m.Name}
		for _, v := range m.Versions {
			vv := VersionView{
				Number: v.Number, GoName: v.GoName, ContentTypes: strings.Join(v.ContentTypes, ", "),
				DeprecatedSince: v.DeprecatedSince, RemoveAfter: v.RemoveAfter, Examples: len(v.Examples),
			}
			for _, q := range consumedBy[versionKey{m.Name, v.Number}] {
				vv.ConsumedBy = append(vv.ConsumedBy, q.Name)
			}
			walkFields(v.Fields, "", func(fd *schema.Field, path string) { vv.Fields = append(vv.Fields, row(fd, path)) })
			walkFields(v.Headers, "", func(fd *schema.Field, path string) { vv.Headers = append(vv.Headers, row(fd, path)) })
			mv.Versions = append(mv.Versions, vv)
		}
		p.Messages = append(p.Messages, mv)
	}
	for _, e := range f.Envelopes {
		p.Envelopes = append(p.Envelopes, code(e.Name)+": "+text(e.String()))
	}
	for _, t := range f.UsedTypes() {
		tv := TypeView{Name: t.Named, Kind: string(t.Type), Values: t.Values, UsedBy: usedBy[t.Named]}
		walkFields(t.Fields, "", func(fd *schema.Field, path string) { tv.Fields = append(tv.Fields, row(fd, path)) })
		p.Types = append(p.Types, tv)
	}
	for _, q := range f.Queues {
		p.Queues = append(p.Queues, queueView(f, q))
	}
	if old != nil {
		p.Against = against
		p.Breaking = Breaking(old, f)
		Sort(p.Breaking)
		p.Changes = Changes(old, f)
	}
	return p
}

func queueView(f *schema.File, q *schema.Queue) QueueView {
	qv := QueueView{
		Name: q.Name, Type: string(q.Type), Prefetch: q.Prefetch, Concurrency: q.Concurrency,
		MaxAttempts: q.Retry.MaxAttempts, DLQ: q.DLQ, MaxBodyBytes: q.MaxBodyBytes,
		HandlerTimeout: q.HandlerTimeout.String(), Budget: queue.Budget(q.HandlerTimeout, q.SettlementBudget).String(), Inbox: string(q.Inbox),
		Ownership: ownership(q.External), LilyArguments: schema.ArgumentsDeclared, Routes: routesOf(f, q),
	}
	if q.ByPolicy {
		qv.LilyArguments = schema.ArgumentsByPolicy
	}
	switch o := q.Ordering; {
	case o == nil:
	case o.Sequential:
		qv.Ordering = "one delivery at a time, in the order delivered"
	case o.Header != "":
		qv.Ordering = "one at a time per value of header " + o.Header + ", in the order delivered"
	default:
		qv.Ordering = "one at a time per value of field " + o.Field + ", in the order delivered"
	}
	args := q.Arguments.Table()
	for _, k := range slices.Sorted(maps.Keys(args)) {
		qv.Arguments = append(qv.Arguments, fmt.Sprintf("%s=%v", k, args[k]))
	}
	if q.DeliveryLimit != 0 {
		qv.DeliveryLimit = limitWord(q.DeliveryLimit)
	}
	for _, c := range q.Consumes {
		nums := make([]string, len(c.Versions))
		for i, v := range c.Versions {
			nums[i] = strconv.Itoa(v.Number)
		}
		var about []string
		if c.Message.Type != c.Message.Name {
			about = append(about, "type "+c.Message.Type)
		}
		if c.Envelope.Name != schema.LilyEnvelope {
			about = append(about, "envelope "+c.Envelope.Name)
		}
		if c.Inbox != q.Inbox {
			about = append(about, "inbox "+string(c.Inbox))
		}
		entry := fmt.Sprintf("%s v%s", c.Message.Name, strings.Join(nums, ", v"))
		if len(about) > 0 {
			entry += " (" + strings.Join(about, ", ") + ")"
		}
		qv.Consumes = append(qv.Consumes, entry)
	}
	for _, d := range q.Retry.Delays {
		qv.Delays = append(qv.Delays, d.String())
		qv.Buckets = append(qv.Buckets, queue.RetryBucket(q.Name, d))
	}
	return qv
}

func row(f *schema.Field, path string) FieldRow {
	r := FieldRow{Path: path, Type: f.TypeName(), Presence: "optional"}
	switch {
	case f.Name == "":
		r.Presence = "element"
	case f.Required:
		r.Presence = "required"
	}
	if f.Nullable {
		r.Presence += ", nullable"
	}
	var limits []string
	switch l := f.Limits(); {
	case l.Lo != "" && l.Hi != "":
		limits = append(limits, l.Lo+" to "+l.Hi+l.Unit)
	case l.Lo != "":
		limits = append(limits, "≥ "+l.Lo+l.Unit)
	case l.Hi != "":
		limits = append(limits, "≤ "+l.Hi+l.Unit)
	}
	if f.Pattern != "" {
		limits = append(limits, "matches "+codeCell(f.Pattern))
	}
	if len(f.Values) > 0 {
		limits = append(limits, "one of "+codes(f.Values))
	}
	switch d := f.Default.(type) {
	case nil:
	case string:
		limits = append(limits, "default "+codeCell(d))
	default:
		limits = append(limits, text(fmt.Sprintf("default %v", d)))
	}
	r.Limits = strings.Join(limits, "; ")
	return r
}

// WritePage renders p with the review page template.
func WritePage(w io.Writer, p Page) error {
	t, err := template.New("review.md.tmpl").Funcs(template.FuncMap{
		"code":     code,
		"codeCell": codeCell,
		"text":     text,
		"join":     strings.Join,
	}).ParseFS(templates.FS, "review.md.tmpl")
	if err != nil {
		return err
	}
	return t.Execute(w, p)
}

// text escapes s, which a schema may have written, so that the rendered page
// shows it as the raw file does, in a table cell or a line of its own: no
// HTML (a comment could hide what follows it), link, image, code span,
// emphasis, strikethrough or math. A character that is not printable, a
// line break among them, shows as its Go escape (printable), as lilygen's
// text prints it: no escape sequence, OSC 8 link or bidi override acts or
// hides what follows it. An underscore between letters or digits is left
// alone, as it cannot be emphasis there and snake_case names are common. A
// word GitHub would link by itself (linked) is a code span.
func text(s string) string {
	var b strings.Builder
	r := []rune(printable.String(s))
	word := func(i int) bool { return i >= 0 && i < len(r) && (unicode.IsLetter(r[i]) || unicode.IsDigit(r[i])) }
	for i := 0; i < len(r); i++ {
		if end := linked(r, i); end > i {
			b.WriteString(code(string(r[i:end])))
			i = end - 1
			continue
		}
		c := r[i]
		switch {
		case c == '_' && word(i-1) && word(i+1):
		case strings.ContainsRune("\\`*_[<&~$|", c):
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// linked is the end of the word of r at i, a run between spaces or pipes,
// when i starts one that GitHub would link without Markdown for it: a bare
// URL (http://, https://, ftp://, www.), an e-mail address, or an @mention
// of a user or team, which would notify them when the page is posted as a
// comment. GitHub links these after rendering too, escapes or not, and in
// neither pass within a code span. It is i for any other.
func linked(r []rune, i int) int {
	if i > 0 && r[i-1] != ' ' && r[i-1] != '|' {
		return i
	}
	end := i
	for end < len(r) && r[end] != ' ' && r[end] != '|' {
		end++
	}
	w := strings.ToLower(string(r[i:end]))
	if strings.Contains(w, "@") || strings.Contains(w, "://") || strings.Contains(w, "www.") {
		return end
	}
	return i
}

// codes writes each of values as a code span for a table cell, joined by
// commas.
func codes(values []string) string {
	spans := make([]string, len(values))
	for i, v := range values {
		spans[i] = codeCell(v)
	}
	return strings.Join(spans, ", ")
}

// codeCell writes s as a code span inside a table cell, its pipes escaped:
// GFM ends a cell at any other pipe of the row, code span or not.
func codeCell(s string) string {
	return strings.ReplaceAll(code(s), "|", `\|`)
}

// code writes s as a Markdown code span outside a table, where GFM would
// show a backslash before a pipe: fenced by one backtick more than the
// longest run of them in s, and padded when s starts or ends with one, so
// that a name holding a backtick stays whole, or when it starts and ends
// with a space, which CommonMark strips once from each end of a span, so
// that a value such as " x " keeps them. A character that is not
// printable shows as its Go escape, as in text: a line break would end a
// heading or list item.
func code(s string) string {
	s = printable.String(s)
	longest, run := 0, 0
	for _, r := range s {
		if r == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	fence, pad := strings.Repeat("`", longest+1), ""
	spaced := strings.HasPrefix(s, " ") && strings.HasSuffix(s, " ") && strings.Trim(s, " ") != ""
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") || spaced {
		pad = " "
	}
	return fence + pad + s + pad + fence
}

func ownership(external bool) string {
	if external {
		return schema.External
	}
	return schema.Owned
}

// routesOf describes each binding that brings messages to q, as the
// runtime declares them: exchange-to-exchange ones first.
func routesOf(f *schema.File, q *schema.Queue) []string {
	var out []string
	describe := func(b *schema.Binding, into string) {
		src := f.Exchange(b.Source)
		r := fmt.Sprintf("%s (%s, %s) → %s", b.Source, src.Type, ownership(src.External), into)
		switch {
		case b.Match != "":
			r += fmt.Sprintf(" when %s of %s", b.Match, headerList(b.Headers))
		case src.Type == schema.Direct || src.Type == schema.Topic:
			r += fmt.Sprintf(" by %s", b.RoutingKey)
		}
		if b.External {
			r += " (external binding)"
		}
		out = append(out, r)
	}
	for _, x := range f.Upstream(q) {
		for _, b := range x.Bindings {
			describe(b, x.Name)
		}
	}
	for _, b := range q.Bindings {
		describe(b, "the queue")
	}
	return out
}

func headerList(h map[string]any) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(h)) {
		parts = append(parts, k+"="+headerValue(h[k]))
	}
	return strings.Join(parts, ", ")
}
