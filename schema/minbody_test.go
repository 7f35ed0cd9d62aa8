package schema

import (
	"strings"
	"testing"
)

// A version whose narrowest body, each required field at its minimums, is
// wider than a queue's max_body_bytes can never reach that queue's
// handler: it is refused where the queue consumes it, and the schema is
// read whole (a limit set after lilygen accepted such schemas). Optional
// fields and a nullable one's null do not count; a queue with room is not
// reported.
func TestBodyRoomCountsTheRequiredMinimums(t *testing.T) {
	src := "version: 1\npackage: p\nmessages:\n  M:\n    versions:\n      1:\n        fields:\n" +
		"          s: {type: string, required: true, min_length: 1000}\n" +
		"          n: {type: string, required: true, nullable: true, min_length: 100000}\n" +
		"          o: {type: bytes, min_length: 100000}\n" +
		"queues:\n  small:\n    max_body_bytes: 1016\n    consumes: [{message: M}]\n" +
		"  fits:\n    max_body_bytes: 1017\n    consumes: [{message: M}]\n"
	// {"s":"…1000…","n":null}: 2 + 1006 + 8 + a comma.
	f, err := Parse("schema.lily.yaml", []byte(src))
	want := "schema.lily.yaml:14:26: queue \"small\" reads M version 1, whose narrowest body (each required field at its min_length and min_items) is 1017 bytes, over the queue's max_body_bytes 1016: no message of it can be delivered, its guard dead-letters every one unread (lower the minimums of field s (line 8), or raise max_body_bytes to 1017) [IMPOSSIBLE-BOUND]"
	if err == nil || err.Error() != want {
		t.Errorf("Parse: %v\nwant %s", err, want)
	}
	if f == nil || len(f.Queues) != 2 {
		t.Errorf("Parse of a schema beyond a queue's body room alone: %+v", f)
	}
	if _, err := Parse("schema.lily.yaml", []byte(strings.Replace(src, "1016", "1017", 1))); err != nil {
		t.Errorf("Parse of a body that just fits: %v", err)
	}
}
