package guard

import "github.com/lily-mq/lily/envelope"

// Limits bound what the guard accepts in a delivery's metadata.
type Limits struct {
	MaxHeaders        int // headers in the table, broker headers included
	MaxHeaderKeyBytes int
	MaxValueBytes     int // one string or byte-array header value
	MaxDepth          int // tables and arrays nested inside the header table
	MaxHeaderBytes    int // all keys and values together
	MaxIDBytes        int // message id, correlation id
	MaxAttempt        int // a larger x-lily-attempt is forged
}

// DefaultLimits are safe for ordinary producers and far below what the broker accepts.
var DefaultLimits = Limits{
	MaxHeaders:        envelope.MaxHeaders,
	MaxHeaderKeyBytes: envelope.MaxHeaderKeyBytes,
	MaxValueBytes:     envelope.MaxHeaderValueBytes,
	MaxDepth:          envelope.MaxHeaderDepth,
	MaxHeaderBytes:    envelope.MaxHeaderBytes,
	MaxIDBytes:        envelope.MaxIDBytes,
	MaxAttempt:        1000,
}
