package review

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lily-mq/lily/schema"
	"github.com/lily-mq/lily/schema/rules"
)

func TestLint(t *testing.T) {
	f := parse(t, "lint.lily.yaml", `version: 1
package: lintmsg
messages:
  Ping:
    versions:
      1:
        fields:
          id: {type: string, required: true, max_length: 10}
          orderId: {type: string}
          tags: {type: list, items: {type: string, max_length: 5}}
      2:
        deprecated_since: 2026-01-01
        remove_after: 2026-06-01
        fields:
          id: {type: string, required: true, max_length: 10}
queues:
  Orders_Queue:
    consumes: [{message: Ping, versions: [2]}]
`)
	var got []string
	for _, x := range Lint(f, time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)) {
		got = append(got, x.Ack())
		if x.Category != rules.Lint || x.Line < 1 || x.Message == "" || x.Migration == "" {
			t.Errorf("incomplete finding %+v", x)
		}
	}
	want := []string{
		"LINT-VERSION-UNCONSUMED@Ping.v1",
		"LINT-FIELD-NAME@Ping.v1.orderId",
		"LINT-STRING-UNBOUNDED@Ping.v1.orderId",
		"LINT-LIST-UNBOUNDED@Ping.v1.tags",
		"LINT-REMOVE-AFTER-PASSED@Ping.v2",
		"LINT-QUEUE-NAME@Orders_Queue",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
}

// A fix names only values lilygen accepts: a settlement_budget of at most
// schema.MaxDuration, a max_body_bytes of at most 512 MiB. One beyond them
// says what to do instead.
func TestLintFixesStayInBounds(t *testing.T) {
	const head = "version: 1\npackage: lintmsg\nmessages:\n  Ping:\n    versions:\n      1:\n        fields:\n"
	const id = "          id: {type: string, required: true, max_length: 10}\n"
	for _, c := range []struct{ name, src, ack, fix string }{
		{"budget short, handler_timeout at its most", head + id +
			"queues:\n  orders:\n    consumes: [{message: Ping}]\n    handler_timeout: 1193h2m47.295s\n    settlement_budget: 1193h2m47.295s\n",
			"LINT-BUDGET-SHORT@orders",
			"remove settlement_budget, which lets the runtime work one out: the 1193h3m9.295s it wants is longer than 1193h2m47.295s, the longest a schema holds"},
		{"retries in line past the longest budget", head + id +
			"queues:\n  orders:\n    consumes: [{message: Ping}]\n    handler_timeout: 1000h\n    ordering: sequential\n    retry: {max_attempts: 3, delays: [1s]}\n    settlement_budget: 1100h\n",
			"LINT-UNORDERED-RETRY@orders",
			"lower max_attempts, handler_timeout or the retry delays: the 3000h1m47s its attempts need in line is longer than 1193h2m47.295s, the longest settlement_budget"},
		{"body past RabbitMQ's ceiling", head + id + "          blob: {type: string, max_length: 2000000000}\n" +
			"queues:\n  orders:\n    consumes: [{message: Ping}]\n",
			"LINT-BODY-OVER-LIMIT@orders/Ping.v1",
			"lower the version's max_length and max_items: its body at those bounds is past 536870912 bytes, the most max_body_bytes may be"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var found []string
			for _, x := range Lint(parse(t, "lint.lily.yaml", c.src), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) {
				if x.Ack() == c.ack {
					if x.Migration != c.fix {
						t.Errorf("fix %q\nwant %q", x.Migration, c.fix)
					}
					return
				}
				found = append(found, x.Ack())
			}
			t.Errorf("no %s among %v", c.ack, found)
		})
	}
}

// TestLintFieldNameForeign: a message read in a foreign envelope profile, its
// own or its queue's, has the JSON keys its producer chose, which its
// consumers cannot rename; so has a shared type only such messages use.
func TestLintFieldNameForeign(t *testing.T) {
	f := parse(t, "lint.lily.yaml", `version: 1
package: lintmsg
envelopes:
  spring: {kind: headers, type: {header: __TypeId__}, version: {fixed: 1}}
  events: {kind: cloudevents, version: {type_suffix: .v}}
types:
  Money: {type: object, fields: {amountCents: {type: integer}}}
  Address: {type: object, fields: {zipCode: {type: string, max_length: 10}}}
messages:
  Shipped:
    envelope: spring
    versions:
      1: {fields: {orderId: {type: string, max_length: 10}, total: {type: Money}}}
  Paid:
    versions:
      1: {fields: {paymentId: {type: string, max_length: 10}, to: {type: Address}}}
  Placed:
    versions:
      1: {fields: {totalCents: {type: integer}, ship-to: {type: Address}}}
queues:
  partners:
    envelope: events
    consumes: [{message: Paid}, {message: Shipped}]
  orders:
    consumes: [{message: Placed}]
`)
	var got []string
	for _, x := range Lint(f, time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)) {
		if x.Rule == rules.LintFieldName.ID {
			got = append(got, x.Subject)
		}
	}
	// Address is Paid's and Placed's: Placed's team may rename it.
	want := []string{"Address.zipCode", "Placed.v1.totalCents", "Placed.v1.ship-to"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("LINT-FIELD-NAME subjects (-want +got):\n%s", diff)
	}
}

// TestLintFieldNameFix: the fix names the field's own words in snake_case.
func TestLintFieldNameFix(t *testing.T) {
	f := parse(t, "lint.lily.yaml", `version: 1
package: lintmsg
messages:
  Placed:
    versions:
      1:
        fields:
          totalCents: {type: integer}
          orderID: {type: integer}
          TotalTax: {type: integer}
          HTTPCode: {type: integer}
          ship-to: {type: integer}
          line2Text: {type: integer}
          order__Ref: {type: integer}
          done_: {type: integer}
`)
	got := map[string]string{}
	for _, x := range Lint(f, time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)) {
		if x.Rule == rules.LintFieldName.ID {
			got[x.Subject] = x.Migration
		}
	}
	const fix = "rename it in a new version, such as "
	want := map[string]string{
		"Placed.v1.totalCents": fix + "total_cents",
		"Placed.v1.orderID":    fix + "order_id",
		"Placed.v1.TotalTax":   fix + "total_tax",
		"Placed.v1.HTTPCode":   fix + "http_code",
		"Placed.v1.ship-to":    fix + "ship_to",
		"Placed.v1.line2Text":  fix + "line2_text",
		"Placed.v1.order__Ref": fix + "order_ref",
		"Placed.v1.done_":      fix + "done",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("LINT-FIELD-NAME subject → fix (-want +got):\n%s", diff)
	}
}

// TestLintExample: the example docs/lilygen.md's CI job would lint is clean,
// its Spring producer's orderId included.
func TestLintExample(t *testing.T) {
	f, err := schema.Load(filepath.Join("..", "examples", "orders", "orders.lily.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range Lint(f, time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("%s:%d:%d: %s [%s]", x.File, x.Line, x.Column, x.Message, x.Rule)
	}
}
