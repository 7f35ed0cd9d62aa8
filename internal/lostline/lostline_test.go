package lostline

import "testing"

func TestFormatAndParse(t *testing.T) {
	refused := `Exception (406) Reason: "PRECONDITION_FAILED - inequivalent arg 'x-max-length'"`
	for _, tc := range []struct {
		why  string
		n    int
		line string
	}{
		{refused, 1, refused},
		{refused, 12, refused + " (12 times in a row)"},
		{"a (b) (2 times in a row)", 3, "a (b) (2 times in a row) (3 times in a row)"},
		// A reason whose own words end like a count, come once, is one loss.
		{"x (7 times in a row)", 1, "x (7 times in a row) (once)"},
	} {
		if got := Format(tc.why, tc.n); got != tc.line {
			t.Errorf("Format(%q, %d) = %q, want %q", tc.why, tc.n, got, tc.line)
		}
		if why, n := Parse(tc.line); n != tc.n || (n > 1 && why != tc.why) || (n == 1 && why != tc.line) {
			t.Errorf("Parse(%q) = %q, %d; want %q, %d", tc.line, why, n, tc.why, tc.n)
		}
	}
	// Lines that only look like a count tell one loss, themselves.
	for _, line := range []string{
		"lost",
		"x (1 times in a row)",
		"x (0 times in a row)",
		"x (-3 times in a row)",
		"x (many times in a row)",
		"x times in a row)",
		"x (2 times in a row) ",
	} {
		if why, n := Parse(line); why != line || n != 1 {
			t.Errorf("Parse(%q) = %q, %d; want the line and 1", line, why, n)
		}
	}
}

func TestMore(t *testing.T) {
	if n, ok := ParseMore(More(3501)); !ok || n != 3501 {
		t.Errorf("ParseMore(More(3501)) = %d, %v", n, ok)
	}
	for _, line := range []string{"lost", More(0), "and x" + moreSuffix, morePrefix + "7", "7" + moreSuffix} {
		if n, ok := ParseMore(line); ok {
			t.Errorf("ParseMore(%q) = %d, true; want false", line, n)
		}
	}
}
