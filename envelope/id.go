package envelope

import (
	"errors"
	"strconv"
)

// MaxIDBytes bounds a message id, as every reader of Lily's reads one.
const MaxIDBytes = 128

// The bounds of a message's header table, as every reader of Lily's reads
// one (the guard's); the headers a message gains on its way through a retry
// or a re-drive have room of their own beside them.
const (
	MaxHeaders          = 64    // the producer's headers in the table
	MaxHeaderKeyBytes   = 128   // one header's name
	MaxHeaderValueBytes = 4096  // one string or byte-array value
	MaxHeaderDepth      = 4     // tables and arrays nested in the table
	MaxHeaderBytes      = 16384 // the producer's keys and values together
)

// MaxTracestate is the longest W3C tracestate header the guard counts among
// the headers a message gains on its way, apart from the producer's: what
// the W3C has every platform propagate whole. A longer one is one of the
// producer's 64, so a telemetry hook that writes one keeps it within this.
const MaxTracestate = 512

// IDText reports whether every byte of s may stand in an id: printable
// ASCII without spaces (0x21..0x7e).
func IDText(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// CheckID returns why no reader of Lily's would accept id as a message's id
// (1..MaxIDBytes bytes of printable ASCII without spaces), or nil. A
// producer checks it before it sends: a consumer would take such a message
// for poison.
func CheckID(id string) error {
	switch {
	case id == "":
		return errors.New("lily: message id empty")
	case len(id) > MaxIDBytes:
		return errors.New("lily: message id longer than " + strconv.Itoa(MaxIDBytes) + " bytes")
	case !IDText(id):
		return errors.New("lily: message id not printable ASCII without spaces")
	}
	return nil
}
