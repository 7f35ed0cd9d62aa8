package main

import (
	"bufio"
	"cmp"
	"flag"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/lily-mq/lily/internal/sanitize"
	amqp "github.com/rabbitmq/amqp091-go"
)

// maxGroups bounds the reasons list keeps apart; the copies of any further
// reason are counted together, so that a DLQ of a million distinct reasons
// costs no more memory than one of a thousand.
const maxGroups = 1000

// otherReasons names the group of the reasons beyond maxGroups.
const otherReasons = "(other reasons)"

var listCmd = &command{
	name: "list", args: "[flags] <dlq>",
	summary: "list the copies grouped by failure reason, with counts",
	help: `Each group is one failure reason (Lily's x-lily-failure-reason, or for a copy
the broker dead-lettered itself its x-death reason: rejected, delivery_limit,
expired, maxlen), with its count and its first copies in queue order (-sample
of them): id, type, version, kind (Lily's failure kind, or "broker"), the
attempt that failed, the source queue and the failure time. Every string is
sanitized (bytes outside printable ASCII become \xNN) and bounded. list keeps
counts and samples only, never the copies: export writes every copy.

-json prints one JSON document: the read's counts and the groups.`,
	flags: func(fs *flag.FlagSet) func(*env) int {
		asJSON := fs.Bool("json", false, "print JSON instead of a table")
		sample := fs.Int("sample", 10, "copies listed per reason (the others are counted)")
		return func(e *env) int {
			if *sample < 0 {
				return e.usageError("list", "-sample must not be negative")
			}
			return list(e, *sample, *asJSON)
		}
	},
}

// group is one failure reason's copies: their count and the first of them.
type group struct {
	Reason string  `json:"reason"`
	Count  int     `json:"count"`
	Sample []facts `json:"sample"`
}

// listing is what list prints.
type listing struct {
	Queue string `json:"queue"`
	readResult
	// MaxDeliveryCount is the highest x-delivery-count a copy carried when
	// read (a quorum DLQ's count of earlier returns); the read adds one.
	MaxDeliveryCount int64    `json:"max_delivery_count"`
	Groups           []*group `json:"groups"`
}

func list(e *env, sample int, asJSON bool) int {
	e.quiet = true
	l := listing{Queue: sanitize.Text(e.queue, maxQueue)}
	groups := map[string]*group{}
	res, err := readQueue(e.ctx, e.url, e.queue, "list", e.read, func(d *amqp.Delivery, quarantined string) (verdict, error) {
		f := factsOf(d, quarantined)
		l.MaxDeliveryCount = max(l.MaxDeliveryCount, f.Count)
		key := f.Reason
		if groups[key] == nil && len(groups) >= maxGroups {
			key = otherReasons
		}
		g := groups[key]
		if g == nil {
			g = &group{Reason: key}
			groups[key] = g
		}
		g.Count++
		if len(g.Sample) < sample {
			// A sample prints its bounded fields only: the whole reason
			// and source, as long as a frame, would make a thousand
			// groups' samples a gigabyte.
			f.Source, f.FullReason = "", ""
			g.Sample = append(g.Sample, f)
		}
		return keep, nil
	})
	l.readResult = res
	if err != nil {
		return e.fail("list", err)
	}
	for _, g := range groups {
		l.Groups = append(l.Groups, g)
	}
	slices.SortFunc(l.Groups, func(a, b *group) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Reason, b.Reason))
	})
	e.readNote("list", res, l.MaxDeliveryCount)
	if asJSON {
		enc := jsonEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return e.wrote("list", enc.Encode(l))
	}
	return e.wrote("list", printListing(e.stdout, &l))
}

// printListing writes the table: a heading per reason, its copies beneath.
// It returns the first write error.
func printListing(out io.Writer, l *listing) error {
	w := bufio.NewWriter(out) // which keeps its first error
	fmt.Fprintf(w, "%s: %d copies read (%d ready when the read began), %d reasons\n", l.Queue, l.Read, l.Ready, len(l.Groups))
	for _, g := range l.Groups {
		fmt.Fprintf(w, "\n%s (%d)\n", g.Reason, g.Count)
		if len(g.Sample) == 0 {
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  ID\tTYPE\tVERSION\tKIND\tATTEMPT\tSOURCE QUEUE\tFAILED AT")
		for _, f := range g.Sample {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", orDash(f.ID), orDash(f.Type), orDash(f.Version), orDash(f.Kind), orDash(f.Attempt), f.shownQueue(), timeText(f.Time))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if more := g.Count - len(g.Sample); more > 0 {
			fmt.Fprintf(w, "  ... and %d more\n", more)
		}
	}
	return w.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func timeText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
