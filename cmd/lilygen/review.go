package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"time"

	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/review"
	"github.com/lily-mq/lily/schema"
	"github.com/lily-mq/lily/schema/rules"
)

var lintCmd = &command{
	name: "lint", args: "[flags] <schema.lily.yaml>...", schemas: true,
	summary: "report schema conventions not followed",
	help: `Examples that break their own bounds are schema errors (BAD-EXAMPLE),
reported by every command.

Rules:
` + ruleList(func(r rules.Rule) bool { return r.Category == rules.Lint }),
	flags: func(*flag.FlagSet) func(*env) int {
		return func(e *env) int {
			// The schemas that loaded are linted even when another did
			// not: one schema half edited hides no finding of the others.
			files, ok := e.loadAll("lint")
			var found []review.Finding
			for _, f := range files {
				found = append(found, review.Lint(f, time.Now())...)
			}
			e.format.findings(e.stdout, found, nil)
			switch {
			case !ok:
				return exitUsage
			case len(found) > 0:
				return exitFindings
			}
			return exitOK
		}
	},
}

var topologyCmd = &command{
	name: "topology", args: "[flags] <schema.lily.yaml>...", schemas: true,
	summary: "print the topology as RabbitMQ definitions JSON",
	help: `The JSON holds what runtime.DeclareTopology declares for the schemas'
queues, for rabbitmqctl import_definitions or the management API: the owned
exchanges, each DLQ, retry bucket and owned main queue (durable, with the
same arguments), the owned bindings, and the policies that carry Lily's
arguments of a queue with lily_arguments: policy or ownership: external.
What is external is another team's and is left out. Importing over
existing queues or exchanges with other arguments does not fail: RabbitMQ
keeps what exists, and the consumer's declare then refuses it (406). An
import is no check of an estate; a consumer's start is.

RabbitMQ applies one policy to a queue: the matching one of highest
priority, however exactly another matches. Lily's policies match one queue
each, at --policy-priority (10 unless told): it must be above every policy
of the estate that matches Lily's queues. At the same or a lower priority
the estate's policy replaces Lily's, and the queue loses its dead-lettering:
a body over max_body_bytes, which Lily NACKs for the broker to dead-letter,
is dropped, and a retry copy stays in its bucket. rabbitmqctl list_queues
name policy shows which one applies.

A quorum queue with no delivery limit (every quorum DLQ, and a queue with
delivery_limit: -1) is written for the broker's major version: -1 from
RabbitMQ 4 on, no argument before (where -1 would dead-letter a message at
its first return). --rabbitmq names that version, and is required when a
queue is quorum; the runtime reads it from the broker it connects to.

  lilygen topology --rabbitmq 4 orders.lily.yaml > orders.json
  rabbitmqctl import_definitions orders.json`,
	flags: func(fs *flag.FlagSet) func(*env) int {
		vhost := fs.String("vhost", "/", "the virtual host of the queues")
		major := fs.Int("rabbitmq", 0, "the major version of the RabbitMQ the definitions are for: 3 or 4 and later (required when a queue is quorum)")
		priority := fs.Int("policy-priority", queue.DefaultPolicyPriority, "the priority of Lily's policies: above every policy of the estate that matches Lily's queues")
		return func(e *env) int {
			files, ok := e.loadAll("topology")
			if !ok {
				return exitUsage
			}
			if *major == 0 {
				// 3 taken for a RabbitMQ 4 would write a quorum DLQ without
				// its -1, and 4's default limit of 20 then drops its copies.
				if slices.ContainsFunc(files, hasQuorum) {
					fmt.Fprintln(e.stderr, "lilygen topology: --rabbitmq is required: RabbitMQ 3 and 4 need a quorum queue's \"no delivery limit\" written differently")
					return exitUsage
				}
				*major = 3 // no quorum queue: the same either way
			}
			if *major < 3 {
				fmt.Fprintf(e.stderr, "lilygen topology: --rabbitmq %d: Lily's queues need RabbitMQ 3.10 or later\n", *major)
				return exitUsage
			}
			defs, err := review.Topology(*vhost, *major, *priority, files...)
			if err != nil {
				say(e.stderr, "lilygen topology: %v", err)
				return exitUsage
			}
			out, _ := json.MarshalIndent(defs, "", "  ") // plain values always marshal
			// Lost to a full disk or a closed pipe, the definitions must
			// not pass for printed, as doc's page does not.
			if _, err := fmt.Fprintf(e.stdout, "%s\n", jsonNoCommands(out)); err != nil {
				say(e.stderr, "lilygen topology: %v", err)
				return exitUsage
			}
			return exitOK
		}
	},
}

var docCmd = &command{
	name: "doc", args: "[flags] <schema.lily.yaml>...", schemas: true,
	summary: "write a Markdown review page of each schema",
	help: `The page lists the queues (type, consumed versions, prefetch, retry buckets,
DLQ, limits) and every message version's fields, headers and bounds. With
--against (a file, or a git ref as for lilygen breaking) it starts with what
changed: the breaking changes and the others. The page is rendered from
templates/review.md.tmpl.`,
	flags: func(fs *flag.FlagSet) func(*env) int {
		against := fs.String("against", "", "also list what changed since this older revision: a schema file or a git ref")
		output := fs.String("o", "", "write the page to this file instead of stdout")
		return func(e *env) int {
			if !e.needSchemas("doc") || *against != "" && e.ambiguous("doc", *against) {
				return exitUsage
			}
			// Every schema and older revision is read before any page is
			// written, so that one run shows every problem, as lint's does.
			var pages []review.Page
			ok := true
			// With the page on stdout, the older revisions' problems (the
			// warnings of one beyond a newer limit, with a page after
			// them) go to stderr in every format: the page stays whole.
			olders := e
			if *output == "" {
				toStderr := *e
				toStderr.stdout = e.stderr
				olders = &toStderr
			}
			for _, name := range e.args {
				f, good := e.loadOne(name)
				var old *schema.File
				if *against != "" {
					var isNew, goodOld bool
					old, _, isNew, goodOld = olders.older(name, *against)
					if isNew && good {
						// All of it is new: an empty revision lists it so.
						old = &schema.File{Package: f.Package, Output: f.Output}
					}
					good = good && goodOld
				}
				if ok = ok && good; ok {
					pages = append(pages, review.NewPage(f, old, *against))
				}
			}
			if !ok {
				return exitUsage
			}
			var page bytes.Buffer
			for _, p := range pages {
				if err := review.WritePage(&page, p); err != nil {
					say(e.stderr, "lilygen doc: %v", err)
					return exitUsage
				}
			}
			// A code span shows a schema's ##[ as written, which the
			// GitHub Actions runner would read as a workflow command in a
			// log that shows the page: escaped as every line lilygen
			// prints, and alike in a file, so that the page is one
			// wherever it goes.
			out := []byte(noCommands(page.String()))
			var err error
			if *output == "" {
				_, err = e.stdout.Write(out)
			} else {
				err = replaceFile(*output, out)
			}
			if err != nil {
				say(e.stderr, "lilygen doc: %v", err)
				return exitUsage
			}
			return exitOK
		}
	},
}

// hasQuorum reports whether a schema declares a quorum queue.
func hasQuorum(f *schema.File) bool {
	return slices.ContainsFunc(f.Queues, func(q *schema.Queue) bool { return q.Type == schema.Quorum })
}
