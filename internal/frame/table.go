package frame

// The bounds amqp091-go v1.17 decodes a field table within (read.go:
// maxFieldDepth, maxContainerElements), though it writes any: the header
// table is at depth 0, every table or array inside it one deeper, and none
// holds more than MaxTableEntries entries or elements. A message past them
// that comes back to a client (a delivery, or a publish returned
// unroutable) cannot be decoded, and the client closes its connection.
const (
	MaxTableDepth   = 32
	MaxTableEntries = 8192
)
