package enummsg

import "testing"

// encoding/json would send an enum "a\xff" as "a\uFFFD", one of the
// enum's values: the producer refuses it rather than send another value
// than it holds, in each place an enum may be.
func TestNewEvV1EnumNotUTF8(t *testing.T) {
	bad := EvV1Kind("a\xff")
	maybe := EvV1Maybe("a\xff")
	for _, tc := range []struct {
		msg  *EvV1
		want string
	}{
		{&EvV1{Kind: bad}, "field kind: not UTF-8"},
		{&EvV1{Kind: EvV1KindB, Maybe: &maybe}, "field maybe: not UTF-8"},
		{&EvV1{Kind: EvV1KindB, Kinds: []Kind{KindB, Kind("a\xff")}}, "field kinds[1]: not UTF-8"},
		{&EvV1{Kind: EvV1KindB, ByName: map[string]Kind{"x": KindB, "y": Kind("a\xff")}}, `field by_name["y"]: not UTF-8`},
	} {
		if p, err := NewEvV1("m-1", tc.msg); err == nil || err.Error() != tc.want {
			t.Errorf("got %v (body %s), want %s", err, p.Body, tc.want)
		}
	}
	ok := &EvV1{Kind: EvV1Kind("a\uFFFD"), Kinds: []Kind{Kind("a\uFFFD")}}
	if _, err := NewEvV1("m-1", ok); err != nil {
		t.Errorf("the value a\\uFFFD itself: %v", err)
	}
}
