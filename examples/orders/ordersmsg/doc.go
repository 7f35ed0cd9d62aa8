// Package ordersmsg is the code lilygen generates from the example's
// schema, orders.lily.yaml (regenerate it with go generate ../...): the
// OrderPlaced payloads and their extractors and producers, and for queue
// "orders" the handler interface, its queue spec, its dispatch table and its
// constructor. Only this file is written by hand.
package ordersmsg
