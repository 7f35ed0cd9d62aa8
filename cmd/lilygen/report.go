package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode"
	"unicode/utf16"

	"github.com/lily-mq/lily/internal/printable"
	"github.com/lily-mq/lily/review"
	"github.com/lily-mq/lily/schema"
	"github.com/lily-mq/lily/schema/rules"
)

// errorFormat is how schema errors and findings are printed. Text goes to
// people: schema errors on stderr, findings on stdout, grouped. The others go
// to tools, all on stdout: json writes one object a line (JSON Lines), and
// github-actions writes workflow commands that annotate the pull request.
type errorFormat string

const (
	textFormat    errorFormat = "text"
	jsonFormat    errorFormat = "json"
	githubActions errorFormat = "github-actions"
)

func (f *errorFormat) String() string { return string(*f) }

func (f *errorFormat) Set(s string) error {
	switch errorFormat(s) {
	case textFormat, jsonFormat, githubActions:
		*f = errorFormat(s)
		return nil
	}
	return fmt.Errorf("want text, json or github-actions")
}

// diag is one schema error or finding, as the machine formats print it.
type diag struct {
	File      string `json:"file"`
	Line      int    `json:"line,omitempty"`
	Column    int    `json:"column,omitempty"`
	Rule      string `json:"rule"`
	Category  string `json:"category,omitempty"`
	Subject   string `json:"subject,omitempty"`
	Message   string `json:"message"`
	Hint      string `json:"hint,omitempty"`
	Migration string `json:"migration,omitempty"`
	Note      string `json:"note,omitempty"`
	// AcknowledgedBy names what accepts a breaking change, for one accepted.
	AcknowledgedBy string `json:"acknowledged_by,omitempty"`
	// Severity is warning for a problem that does not fail the run, and
	// notice for an accepted breaking change; the others, errors, leave it
	// out.
	Severity string `json:"severity,omitempty"`
}

// warning is the severity of a problem that does not fail the run, notice
// that of a breaking change an acknowledgement accepts.
const (
	warning = "warning"
	notice  = "notice"
)

// print writes d in format f, which is not text.
func (f errorFormat) print(w io.Writer, d diag) {
	if f == jsonFormat {
		line, _ := json.Marshal(d) // a diag always marshals
		fmt.Fprintf(w, "%s\n", jsonNoCommands(line))
		return
	}
	// Each part is escaped as text escapes it (textFinding) before the
	// parts are joined by newlines, which the pull request shows as line
	// breaks: a newline of the schema's must not start a line of its own,
	// such as a forged "acknowledged by:", nor an escape sequence or a bidi
	// override hide what follows it.
	p := printable.String
	msg := p(d.Message)
	if d.Category != "" {
		msg = d.Category + ": " + msg
	}
	if d.Hint != "" {
		msg += " (" + p(d.Hint) + ")"
	}
	switch {
	case d.Migration == "":
	case d.Category == string(rules.Lint):
		msg += "\nfix: " + p(d.Migration) // labelled as text labels it
	default:
		msg += "\nmigration: " + p(d.Migration)
	}
	switch {
	case d.AcknowledgedBy != "":
		msg += "\nacknowledged by: " + p(d.AcknowledgedBy)
	case d.Subject != "" && d.Category != string(rules.Lint):
		msg += "\nacknowledge: --allow " + p(d.Rule+"@"+d.Subject)
	}
	if d.Note != "" {
		msg += "\nnote: " + p(d.Note)
	}
	// And as text is (noCommands), though the runner reads the line as
	// this command before a legacy one: the annotation shows what text
	// shows. So is the file: a file the schema includes is named as it
	// likes, and an escape in its name would drive the terminal that shows
	// the log. A printable name stays as it is, to name the file annotated.
	msg = noCommands(msg)
	props := "file=" + escapeProperty(strings.ReplaceAll(p(d.File), "##[", `##\[`))
	if d.Line > 0 {
		props += fmt.Sprintf(",line=%d,col=%d", d.Line, d.Column)
	}
	fmt.Fprintf(w, "::%s %s,title=%s::%s\n", cmp.Or(d.Severity, "error"), props, escapeProperty(d.Rule), escapeData(msg))
}

// escapeData and escapeProperty escape a workflow command's message and
// property values as the GitHub Actions runner unescapes them.
func escapeData(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(s)
}

func escapeProperty(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C").Replace(s)
}

// say prints one of lilygen's own lines on w, escaped as schema errors are
// (schema.Error): a path in it may come from the command line or from any
// directory of the module, and a control character in it must not forge a
// line or drive the terminal; nor may a name forge a workflow command
// (noCommands).
func say(w io.Writer, format string, args ...any) {
	fmt.Fprintln(w, noCommands(printable.String(fmt.Sprintf(format, args...))))
}

// noCommands escapes text lilygen prints, line by line, so that the GitHub
// Actions runner, which reads its log, finds no workflow command in it but
// lilygen's own annotations (errorFormat.print): the legacy one, ##[ anywhere
// in a line, is written ##\[, and a line that starts with :: after
// whitespace gets a backslash before it. A schema names a queue as it likes:
// ##[stop-commands]tok would have the runner ignore the annotations after it,
// and ##[add-mask] or ##[error] forge what the log shows. As printable's, the
// escapes are for reading.
func noCommands(s string) string {
	s = strings.ReplaceAll(s, "##[", `##\[`)
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		rest := strings.TrimLeftFunc(l, unicode.IsSpace)
		if strings.HasPrefix(rest, "::") {
			lines[i] = l[:len(l)-len(rest)] + `\` + rest
		}
	}
	return strings.Join(lines, "\n")
}

// jsonNoCommands escapes JSON as noCommands does text, keeping its value:
// ##[ is only ever inside a string, where \u005b is the same [. JSON puts no
// line at ::. It escapes, too, each character printable would (encoding/json
// leaves format characters such as the bidi override \u202e as they are), so
// that no value drives the terminal or reorders the log that shows it; the
// newlines of indented JSON are its own, between values.
func jsonNoCommands(b []byte) []byte {
	b = bytes.ReplaceAll(b, []byte("##["), []byte(`##\u005b`))
	if !bytes.ContainsFunc(b, notPrintable) {
		return b
	}
	var out bytes.Buffer
	for _, r := range string(b) {
		if !notPrintable(r) {
			out.WriteRune(r)
			continue
		}
		for _, u := range utf16.Encode([]rune{r}) {
			fmt.Fprintf(&out, `\u%04x`, u)
		}
	}
	return out.Bytes()
}

// notPrintable reports whether jsonNoCommands escapes r.
func notPrintable(r rune) bool { return r != '\n' && !unicode.IsPrint(r) }

// commandFree writes through noCommands, for the flag package, which
// writes whole lines, a flag or argument it quotes among them.
type commandFree struct{ w io.Writer }

func (c commandFree) Write(p []byte) (int, error) {
	if _, err := io.WriteString(c.w, noCommands(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// problem reports d, a problem that is not a finding: text writes it on
// stderr, with lilygen's other errors, the other formats on stdout, beside
// the findings. Text words a problem at a place in a schema as a schema
// error (schema.Error), a warning saying so in its message; unplaced, when
// not empty, is the line it writes instead for a problem of a whole file.
func (f errorFormat) problem(stdout, stderr io.Writer, d diag, unplaced string) {
	switch {
	case f != textFormat:
		f.print(stdout, d)
	case unplaced != "":
		say(stderr, "%s", unplaced)
	default:
		msg := d.Message
		if d.Severity != "" {
			msg = d.Severity + ": " + msg
		}
		e := schema.Error{File: d.File, Line: d.Line, Column: d.Column, Rule: d.Rule, Msg: msg, Hint: d.Hint}
		say(stderr, "%s", e.Error())
	}
}

// schemaErrors prints the errors of one schema, already sorted by the parser.
func (f errorFormat) schemaErrors(stdout, stderr io.Writer, list schema.ErrorList) {
	for _, e := range list {
		f.problem(stdout, stderr, diag{File: e.File, Line: e.Line, Column: e.Column, Rule: e.Rule, Message: e.Msg, Hint: e.Hint}, "")
	}
}

// findings prints sorted findings to w, then the sorted breaking changes an
// acknowledgement accepts: shown too, since one acknowledgement may accept
// more changes than its author meant, and the reviewer must see them all.
// Text groups them under a heading per category, the accepted ones last
// under their own, and says how to acknowledge a breaking change; the other
// formats print an accepted one as a notice, which does not fail the run.
func (f errorFormat) findings(w io.Writer, fs, acknowledged []review.Finding) {
	if f != textFormat {
		for _, x := range slices.Concat(fs, acknowledged) {
			d := diag{File: x.File, Line: x.Line, Column: x.Column, Rule: x.Rule, Category: string(x.Category), Subject: x.Subject, Message: x.Message, Migration: x.Migration, Note: x.Note, AcknowledgedBy: x.AcknowledgedBy}
			if x.AcknowledgedBy != "" {
				d.Severity = notice
			}
			f.print(w, d)
		}
		return
	}
	var last rules.Category
	for _, x := range fs {
		if x.Category != last {
			if last != "" {
				fmt.Fprintln(w)
			}
			fmt.Fprintf(w, "%s: %s\n", x.Category, x.Category.Describe())
			last = x.Category
		}
		textFinding(w, x)
	}
	for i, x := range acknowledged {
		if i == 0 {
			if last != "" {
				fmt.Fprintln(w)
			}
			fmt.Fprintln(w, "ACKNOWLEDGED: accepted breaking changes, each with what accepts it: check that it accepts no more than its author meant")
		}
		textFinding(w, x)
	}
}

// textFinding prints x in text: its place, message and rule, then its fix
// (a lint's), or its migration, how to acknowledge it or what accepts it,
// and its note. An accepted one, under no heading of its category, names
// its category in its line.
func textFinding(out io.Writer, x review.Finding) {
	var w strings.Builder
	// Findings quote the schema, enum values among it: escaped, as schema
	// errors are (schema.Error), and as every line lilygen prints is
	// (noCommands).
	msg := printable.String(x.Message)
	if x.AcknowledgedBy != "" {
		msg = string(x.Category) + ": " + msg
	}
	fmt.Fprintf(&w, "%s:%d:%d: %s [%s]\n", printable.String(x.File), x.Line, x.Column, msg, x.Rule)
	if x.Category == rules.Lint {
		fmt.Fprintf(&w, "\tfix: %s\n", printable.String(x.Migration))
	} else {
		fmt.Fprintf(&w, "\tmigration: %s\n", printable.String(x.Migration))
		if x.AcknowledgedBy != "" {
			fmt.Fprintf(&w, "\tacknowledged by: %s\n", printable.String(x.AcknowledgedBy))
		} else {
			fmt.Fprintf(&w, "\tacknowledge: --allow %s\n", printable.String(x.Ack()))
		}
		if x.Note != "" {
			fmt.Fprintf(&w, "\tnote: %s\n", printable.String(x.Note))
		}
	}
	io.WriteString(out, noCommands(w.String()))
}
