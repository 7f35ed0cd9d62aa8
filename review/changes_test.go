package review

import (
	"slices"
	"testing"

	"github.com/lily-mq/lily/schema"
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

// A publish added, and an order key changed, are listed: they change what
// producers on the new schema do, and break nothing.
func TestChangesListPublish(t *testing.T) {
	const x = "exchanges:\n  shop: {type: topic}\nqueues:"
	old := parse(t, "old", edit(t, "queues:", x, "  OrderPlaced:\n", "  OrderPlaced:\n    publish: {exchange: shop, routing_key: order.placed}\n"))
	for _, tt := range []struct {
		name string
		old  *schema.File
		new  string
		want []string
	}{
		{"added", parse(t, "old", base), "    publish: {exchange: shop, routing_key: order.placed}\n",
			[]string{`OrderPlaced is published to exchange "shop" with routing key "order.placed"`}},
		{"order key", old, "    publish: {exchange: shop, routing_key: order.placed, order_key: {field: order_id}}\n",
			[]string{"OrderPlaced: order key none → field order_id"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Changes(tt.old, parse(t, "new", edit(t, "queues:", x, "  OrderPlaced:\n", "  OrderPlaced:\n"+tt.new)))
			if !slices.Equal(got, tt.want) {
				t.Errorf("changes %q, want %q", got, tt.want)
			}
		})
	}
}
