package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/lily-mq/lily/internal/sanitize"
	amqp "github.com/rabbitmq/amqp091-go"
)

// The bounds of what show prints of one copy's headers.
const (
	maxDepth   = 4  // nesting of tables and arrays
	maxEntries = 64 // entries of one table or array
)

var showCmd = &command{
	name: "show", args: "-id <message id> [flags] <dlq>",
	summary: "show one copy: its properties, all its headers, its body",
	help: `show reads the DLQ in order until it has found -n copies whose message id is
-id (as sent, or escaped as list prints it, uncut), and prints each: the facts
list shows, the AMQP properties, every header (nested tables and arrays too,
at most 4 deep and 64 entries each), and the body: as text when it is
printable UTF-8, else as a hex dump, at most -body bytes of it, every line
indented so that no line of it passes for show's own. Everything is
sanitized and bounded. -json prints each copy as export writes it (one JSON
object a line), unbounded. When no copy has the id, show says so and exits 1.

A copy whose headers the AMQP client cannot decode, or not whole (a table
that names an entry twice), is shown as quarantined, with why, and with the
filter's marker in place of its headers.`,
	flags: func(fs *flag.FlagSet) func(*env) int {
		id := fs.String("id", "", "the message id of the copy to show (required)")
		n := fs.Int("n", 1, "copies with that id to show at most (a DLQ may hold several)")
		bodyMax := fs.Int("body", 4096, "bytes of the body to print at most")
		asJSON := fs.Bool("json", false, "print each copy as export writes it")
		return func(e *env) int {
			switch {
			case *id == "":
				return e.usageError("show", "-id is required")
			case *n < 1:
				return e.usageError("show", "-n must be at least 1")
			case *bodyMax < 0:
				return e.usageError("show", "-body must not be negative")
			}
			return show(e, *id, *n, *bodyMax, *asJSON)
		}
	},
}

func show(e *env, id string, n, bodyMax int, asJSON bool) int {
	e.quiet = true
	found := 0
	var maxCount int64
	var werr error
	res, err := readQueue(e.ctx, e.url, e.queue, "show", e.read, func(d *amqp.Delivery, quarantined string) (verdict, error) {
		f := factsOf(d, quarantined)
		maxCount = max(maxCount, f.Count)
		if !whole(d.MessageId, id) {
			return keep, nil
		}
		found++
		if asJSON {
			werr = jsonEncoder(e.stdout).Encode(exportOf(e.queue, d, quarantined))
		} else {
			werr = printCopy(e.stdout, d, f, found, bodyMax)
		}
		if werr != nil || found == n {
			return keep, errEnough
		}
		return keep, nil
	})
	if werr != nil {
		return e.wrote("show", werr)
	}
	if err != nil {
		return e.fail("show", err)
	}
	e.readNote("show", res, maxCount)
	if found == 0 {
		return e.fail("show", fmt.Errorf("no copy with id %s %s %s (%d copies read)", sanitize.Text(id, maxID), among(res), sanitize.Text(e.queue, maxQueue), res.Read))
	}
	return exitOK
}

// printCopy writes one copy for a person: sanitized, bounded.
func printCopy(w io.Writer, d *amqp.Delivery, f facts, nth, bodyMax int) error {
	var b strings.Builder
	fmt.Fprintf(&b, "copy %d\n", nth)
	fmt.Fprintf(&b, "  reason:        %s\n", f.Reason)
	fmt.Fprintf(&b, "  kind:          %s\n", orDash(f.Kind))
	fmt.Fprintf(&b, "  type:          %s\n", orDash(f.Type))
	fmt.Fprintf(&b, "  version:       %s\n", orDash(f.Version))
	if f.Quarantined != "" {
		fmt.Fprintf(&b, "  quarantined:   the client cannot read its headers as they are (%s): below is the filter's marker in their place; the DLQ keeps the copy as it is\n", f.Quarantined)
	}
	fmt.Fprintf(&b, "  source queue:  %s\n", f.shownQueue())
	fmt.Fprintf(&b, "  failed at:     %s\n", timeText(f.Time))
	fmt.Fprintf(&b, "  redelivered:   %t\n", d.Redelivered)
	b.WriteString("properties\n")
	for _, p := range [][2]string{
		{"message_id", d.MessageId}, {"type", d.Type}, {"content_type", d.ContentType},
		{"content_encoding", d.ContentEncoding}, {"correlation_id", d.CorrelationId},
		{"reply_to", d.ReplyTo}, {"expiration", d.Expiration}, {"user_id", d.UserId}, {"app_id", d.AppId},
	} {
		if p[1] != "" {
			fmt.Fprintf(&b, "  %-17s %s\n", p[0]+":", sanitize.Text(p[1], maxValue))
		}
	}
	if !d.Timestamp.IsZero() {
		fmt.Fprintf(&b, "  %-17s %s\n", "timestamp:", timeText(d.Timestamp))
	}
	fmt.Fprintf(&b, "  %-17s %d\n", "delivery_mode:", d.DeliveryMode)
	if d.Priority != 0 {
		fmt.Fprintf(&b, "  %-17s %d\n", "priority:", d.Priority)
	}
	fmt.Fprintf(&b, "headers (%d)\n", len(d.Headers))
	writeTable(&b, d.Headers, "  ", 1)
	rendered, cut := body(d.Body, bodyMax)
	fmt.Fprintf(&b, "body (%d bytes", len(d.Body))
	if cut {
		fmt.Fprintf(&b, ", the first %d shown", bodyMax)
	}
	b.WriteString(")\n")
	// Every body line indented, empty ones too: a line at the margin is
	// always show's own, so a body holding "copy 2" and its facts cannot
	// pass for another copy.
	for line := range strings.Lines(rendered) {
		b.WriteString("  ")
		b.WriteString(line)
	}
	if !strings.HasSuffix(rendered, "\n") {
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeTable writes a header table's entries in key order, each value
// sanitized, nested tables and arrays indented, within maxDepth and
// maxEntries.
func writeTable(b *strings.Builder, t amqp.Table, indent string, depth int) {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		if i == maxEntries {
			fmt.Fprintf(b, "%s... and %d more\n", indent, len(keys)-i)
			return
		}
		writeValue(b, sanitize.Text(k, maxID)+":", t[k], indent, depth)
	}
}

func writeValue(b *strings.Builder, label string, v any, indent string, depth int) {
	switch v := v.(type) {
	case amqp.Table:
		fmt.Fprintf(b, "%s%s (table, %d)\n", indent, label, len(v))
		if depth < maxDepth {
			writeTable(b, v, indent+"  ", depth+1)
		}
	case []any:
		fmt.Fprintf(b, "%s%s (array, %d)\n", indent, label, len(v))
		if depth >= maxDepth {
			return
		}
		for i, e := range v {
			if i == maxEntries {
				fmt.Fprintf(b, "%s  ... and %d more\n", indent, len(v)-i)
				return
			}
			writeValue(b, fmt.Sprintf("[%d]", i), e, indent+"  ", depth+1)
		}
	default:
		fmt.Fprintf(b, "%s%s %s (%s)\n", indent, label, valueText(v, maxValue), typeName(v))
	}
}
