package confirm

import "testing"

// Only a reply through the default exchange to a reply-to token goes
// without mandatory: the bare pseudo-queue name is no address, and another
// exchange routes a token like any key.
func TestDirectReplyTo(t *testing.T) {
	for _, c := range []struct {
		exchange, key string
		want          bool
	}{
		{"", "amq.rabbitmq.reply-to.g1h2AA1yZXBseUA.aSZ4+Xw10wM9gs+xPWCdKg==", true},
		{"", "amq.rabbitmq.reply-to.", true},
		{"", "amq.rabbitmq.reply-to", false},
		{"", "orders", false},
		{"amq.direct", "amq.rabbitmq.reply-to.g1h2AA1yZXBseUA", false},
	} {
		if got := directReplyTo(c.exchange, c.key); got != c.want {
			t.Errorf("directReplyTo(%q, %q) = %v, want %v", c.exchange, c.key, got, c.want)
		}
	}
}
