package lilyotel

import (
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/runtime"
)

// received reads a delivery's creation context through its read-only view,
// whose headers the guard has bounded; a rejected delivery's view reads none.
// Only string values count: a trace header of another type is not one.
type received struct{ d runtime.RawDelivery }

func (c received) Get(key string) string {
	v, _ := c.d.Header(key)
	s, _ := v.(string)
	return s
}

// Set never runs: extraction only reads.
func (received) Set(string, string) {}

// Keys is empty: the view cannot list its headers, and the W3C propagators
// ask for theirs by name.
func (received) Keys() []string { return nil }

// table reads and writes the headers of a message about to be published.
type table amqp.Table

func (c table) Get(key string) string {
	s, _ := c[key].(string)
	return s
}

func (c table) Set(key, value string) { c[key] = value }

func (c table) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
