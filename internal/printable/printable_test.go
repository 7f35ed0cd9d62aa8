package printable

import "testing"

func TestString(t *testing.T) {
	for in, want := range map[string]string{
		"OrderPlaced":                   "OrderPlaced",
		"type A → B, 2³²−1 ms":          "type A → B, 2³²−1 ms",
		"A\x1b[31mRED\nx.yaml:1:1: [X]": `A\x1b[31mRED\nx.yaml:1:1: [X]`,
		"tab\there\r\x00\x7f":           `tab\there\r\x00\x7f`,
		"\u202eevil\u200b\u00a0\u0085":  `\u202eevil\u200b\u00a0\u0085`,
		"not \xff UTF-8 \xe2\x82":       `not \xff UTF-8 \xe2\x82`,
		`a \ stays`:                     `a \ stays`,
	} {
		if got := String(in); got != want {
			t.Errorf("String(%q) = %s, want %s", in, got, want)
		}
	}
}
