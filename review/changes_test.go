package review

import (
	"slices"
	"testing"
)

// A consumed message's own inbox policy is listed when it changes: to none,
// its duplicates are handled again. A change the queue's line explains is
// not said twice.
func TestChangesListAMessagesInbox(t *testing.T) {
	old := parse(t, "old", base)
	tests := []struct {
		name  string
		edits []string
		want  []string
	}{
		{"the message's own", []string{"        versions: [1, 2]\n", "        versions: [1, 2]\n        inbox: none\n"},
			[]string{`queue "orders": inbox of OrderPlaced optional → none`}},
		{"the queue's", []string{"    max_body_bytes", "    inbox: none\n    max_body_bytes"},
			[]string{`queue "orders": inbox optional → none`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Changes(old, parse(t, "new", edit(t, tt.edits...)))
			if !slices.Equal(got, tt.want) {
				t.Errorf("changes %q, want %q", got, tt.want)
			}
		})
	}
}
