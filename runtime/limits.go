package runtime

// Limits bound what the guard accepts in a delivery's metadata. Zero fields take
// the defaults below.
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
	MaxHeaders:        64,
	MaxHeaderKeyBytes: 128,
	MaxValueBytes:     4096,
	MaxDepth:          4,
	MaxHeaderBytes:    16384,
	MaxIDBytes:        128,
	MaxAttempt:        1000,
}

func (l Limits) withDefaults() Limits {
	pick := func(v, d int) int {
		if v > 0 {
			return v
		}
		return d
	}
	d := DefaultLimits
	return Limits{
		MaxHeaders:        pick(l.MaxHeaders, d.MaxHeaders),
		MaxHeaderKeyBytes: pick(l.MaxHeaderKeyBytes, d.MaxHeaderKeyBytes),
		MaxValueBytes:     pick(l.MaxValueBytes, d.MaxValueBytes),
		MaxDepth:          pick(l.MaxDepth, d.MaxDepth),
		MaxHeaderBytes:    pick(l.MaxHeaderBytes, d.MaxHeaderBytes),
		MaxIDBytes:        pick(l.MaxIDBytes, d.MaxIDBytes),
		MaxAttempt:        pick(l.MaxAttempt, d.MaxAttempt),
	}
}
