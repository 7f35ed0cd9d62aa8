package review

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

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
