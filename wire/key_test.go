package wire

import (
	"math"
	"testing"
)

func TestMemberText(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"account_id":"a-1","amount":3}`, "a-1"},
		{`{"amount":{"x":[1,2,{"account_id":"inner"}]},"account_id":"outer"}`, "outer"},
		{`{"account_id":42}`, "42"},
		// The extractor reads -0 as 0, the one other way to write an
		// integer it reads: one value, one key.
		{`{"account_id":-0}`, "0"},
		{`{"account_id":0}`, "0"},
		{`{"account_id":"-0"}`, "-0"},
		{`{"account_id":-1.5e3}`, "-1.5e3"},
		{`{"account_id":"caf\u00e9"}`, "café"},
		{`{"account_id":null}`, ""},
		{`{"account_id":["a"]}`, ""},
		{`{"other":1}`, ""},
		{`["account_id","a"]`, ""},
		{`{"other":tru`, ""},
		{`{"account_id":"a-1"` + "\x00", "a-1"},
		{``, ""},
	} {
		if got := MemberText([]byte(tc.body), "account_id"); got != tc.want {
			t.Errorf("MemberText(%q) = %q, want %q", tc.body, got, tc.want)
		}
	}
}

// -0 becomes "0" without a copy, as cheap as any other key or cheaper.
func TestMemberTextNegativeZeroAllocs(t *testing.T) {
	body := []byte(`{"account_id":-0}`)
	if n := testing.AllocsPerRun(100, func() { MemberText(body, "account_id") }); n != 0 {
		t.Errorf("MemberText of -0: %v allocations, want 0", n)
	}
}

func TestHeaderText(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{"acct", "acct"}, {int64(-7), "-7"}, {int32(7), "7"}, {uint8(7), "7"}, {true, "true"},
		{uint64(math.MaxUint64), "18446744073709551615"}, {uint(math.MaxInt64 + 1), "9223372036854775808"},
		{1.5, ""}, {nil, ""}, {map[string]any{"a": 1}, ""},
	} {
		if got := HeaderText(tc.v); got != tc.want {
			t.Errorf("HeaderText(%#v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

func FuzzMemberText(f *testing.F) {
	f.Add([]byte(`{"account_id":"a-1"}`))
	f.Add([]byte(`{"x":{"y":[[[[]]]]},"account_id":1}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		_ = MemberText(body, "account_id")
	})
}
