// Package ordersmsg is the code lilygen generates from the example's
// schema, orders.lily.yaml (regenerate it with go generate ../... or make
// generate): for each message version there, its payload struct and
// extractor, and its producer where lilygen can write one in the message's
// envelope; for each queue, its handler interface, queue spec, dispatch
// table and constructor. The schema says which messages and queues there
// are. Only this file and the tests beside it are written by hand.
package ordersmsg
