package quarantine

import (
	"runtime"
	"strings"
	"testing"
)

// headerCase is one header table the broker accepts and delivers, and what
// check must say of it: why the client refuses it, or "" when it decodes it.
type headerCase struct {
	name    string
	headers []byte // the table value, 'F' and its long string
	refused string // a part of the reason; "" when the client decodes it
}

// headerCases are the tables every test of the filter uses: those
// amqp091-go v1.17 decodes at its limits, and those just past them.
func headerCases() []headerCase {
	every := table(
		entry("t", []byte{'t', 1}), entry("b", []byte{'b', 0xff}), entry("B", []byte{'B', 1}),
		entry("s", append([]byte{'s'}, u16(7)...)), entry("u", append([]byte{'u'}, u16(7)...)),
		entry("I", append([]byte{'I'}, u32(7)...)), entry("i", append([]byte{'i'}, u32(7)...)),
		entry("f", append([]byte{'f'}, u32(7)...)), entry("D", []byte{'D', 2, 0, 0, 0, 9}),
		entry("l", append([]byte{'l'}, u64(7)...)), entry("d", append([]byte{'d'}, u64(7)...)),
		entry("T", append([]byte{'T'}, u64(1_700_000_000)...)), entry("S", str("text")),
		entry("x", append([]byte{'x'}, longstr([]byte{0, 1, 2})...)), entry("V", []byte{'V'}),
		entry("A", array(str("a"), []byte{'V'}, table())), entry("F", table(entry("k", str("v")))),
	)
	return []headerCase{
		{name: "no headers", headers: table()},
		{name: "every field type the client reads", headers: every},
		{name: "tables nested 32 deep", headers: table(entry("deep", nested(32, false, str("x"))))},
		{name: "arrays nested 32 deep", headers: table(entry("deep", nested(32, true, str("x"))))},
		{name: "tables nested 33 deep", headers: table(entry("deep", nested(33, false, str("x")))), refused: "nested deeper than 32"},
		{name: "arrays nested 33 deep", headers: table(entry("deep", nested(33, true, str("x")))), refused: "nested deeper than 32"},
		{name: "tables and arrays nested 60 deep", headers: table(entry("deep", nested(30, true, nested(30, false, []byte{'V'})))), refused: "nested deeper than 32"},
		{name: "a table of 8192 entries", headers: wide(8192, false)},
		{name: "a table of 8193 entries", headers: wide(8193, false), refused: "more than 8192 keys"},
		{name: "a table of 9000 entries of one key", headers: repeating(1, 8999)},
		{name: "a table of 8191 keys, then 1000 repeated", headers: repeating(8191, 1000)},
		{name: "a table of 8192 keys, then one repeated", headers: repeating(8192, 1), refused: "more than 8192 keys"},
		{name: "an array of 8192 values", headers: table(entry("wide", wide(8192, true)))},
		{name: "an array of 8193 values", headers: table(entry("wide", wide(8193, true))), refused: "more than 8192 values"},
		{name: "a field of type L", headers: table(entry("n", append([]byte{'L'}, u64(7)...))), refused: "type 'L' (0x4c)"},
		{name: "a field of type L in an array", headers: table(entry("a", array(str("x"), append([]byte{'L'}, u64(7)...)))), refused: "type 'L'"},
		{name: "a field of an unprintable type", headers: table(entry("n", []byte{0x01, 0})), refused: "type '?' (0x01)"},
		{name: "a byte array of negative length", headers: table(entry("x", []byte{'x', 0xff, 0xff, 0xff, 0xff})), refused: "cut short"},
		{name: "a table cut short", headers: table(entry("s", []byte{'S', 0, 0, 0, 9, 'a'})), refused: "cut short"},
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range headerCases() {
		t.Run(tc.name, func(t *testing.T) {
			v := check(payloadOf(contentHeader(1, 3, props(tc.headers))))
			if tc.refused == "" {
				if v.why != "" {
					t.Fatalf("refused: %s", v.why)
				}
				return
			}
			if !strings.Contains(v.why, tc.refused) || !v.spliceable {
				t.Fatalf("verdict %+v, want a spliceable refusal saying %q", v, tc.refused)
			}
			if n := len(v.why); n > 120 {
				t.Errorf("reason of %d bytes", n)
			}
		})
	}
}

// Properties around the table are read as the client reads them: a broken
// one refuses the header, and no splice can keep it.
func TestCheckProperties(t *testing.T) {
	prefix := append(u16(60), u16(0)...)
	prefix = append(prefix, u64(0)...)
	cases := []struct {
		name       string
		payload    []byte
		refused    bool
		spliceable bool
	}{
		{name: "no properties", payload: append(append([]byte{}, prefix...), u16(0)...)},
		{name: "every property", payload: append(append([]byte{}, prefix...), concat([][]byte{
			u16(0xfffc), shortstr("text/plain"), shortstr("gzip"), longstr(nil), {2}, {9}, shortstr("c"), shortstr("r"),
			shortstr("60000"), shortstr("m"), u64(1), shortstr("T"), shortstr("u"), shortstr("a"), shortstr("cluster"),
		})...)},
		{name: "trailing bytes the client drains", payload: append(append([]byte{}, prefix...), concat([][]byte{u16(0x0080), shortstr("m"), {1, 2, 3}})...)},
		{name: "a short string cut short", payload: append(append([]byte{}, prefix...), concat([][]byte{u16(0x0080), {9, 'm'}})...), refused: true},
		{name: "a timestamp cut short", payload: append(append([]byte{}, prefix...), concat([][]byte{u16(0x0040), {0, 0, 1}})...), refused: true},
		{name: "a table whose length runs past the frame", payload: append(append([]byte{}, prefix...), concat([][]byte{u16(flagHeaders), u32(40), {1}})...), refused: true},
		{name: "a bad table, then a property cut short", payload: append(append([]byte{}, prefix...), concat([][]byte{u16(flagHeaders | 0x0080), longstr(entry("n", []byte{'L', 0, 0, 0, 0, 0, 0, 0, 0})), {5}})...), refused: true},
		{name: "no flags", payload: prefix, refused: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := check(tc.payload)
			if (v.why != "") != tc.refused || v.spliceable != tc.spliceable {
				t.Errorf("verdict %+v, want refused %v, spliceable %v", v, tc.refused, tc.spliceable)
			}
		})
	}
}

func TestCheckDoesNotAllocate(t *testing.T) {
	payload := payloadOf(contentHeader(1, 3, props(table(entry("x-lily-version", []byte{'b', 1}), entry("trace", str("00-abc"))))))
	if n := testing.AllocsPerRun(100, func() { check(payload) }); n != 0 {
		t.Errorf("%v allocations per check", n)
	}
}

// wideChain is a header table of more than maxEntries entries, all of one
// key (so the client keeps one and decodes it), whose first entry is another
// such table, depth tables deep: what the client accepts and a walk that
// steps into each nested table once per level above it pays for twice over.
func wideChain(depth int) []byte {
	wide := func(first []byte) []byte {
		entries := [][]byte{entry("", first)}
		for range maxEntries {
			entries = append(entries, entry("", []byte{'V'}))
		}
		return table(entries...)
	}
	t := wide([]byte{'V'})
	for range depth - 1 {
		t = wide(t)
	}
	return t
}

// TestCheckOfNestedWideTablesIsLinear: counting the keys of a wide table
// steps over its values without walking into them again, so a chain of
// wide tables costs one key count each, not one per table above it too; and
// a count's set grows with the keys found, so seven tables of one key each
// cost less than the header's own size. Before, each count made a set for
// 8192 keys: seven, 3 MB for a header of 115 KB.
func TestCheckOfNestedWideTablesIsLinear(t *testing.T) {
	one := payloadOf(contentHeader(1, 3, props(wideChain(1))))
	seven := payloadOf(contentHeader(1, 3, props(wideChain(7))))
	if v := check(seven); v.why != "" {
		t.Fatalf("refused %d bytes the client decodes: %s", len(seven), v.why)
	}
	a1 := testing.AllocsPerRun(3, func() { check(one) })
	a7 := testing.AllocsPerRun(3, func() { check(seven) })
	if a7 > 7*max(a1, 1) {
		t.Errorf("%v allocations for one wide table, %v for seven nested: want at most 7 times one", a1, a7)
	}
	if n := allocated(func() { check(seven) }); n > uint64(len(seven)) {
		t.Errorf("the check of a %d-byte header allocated %d bytes", len(seven), n)
	}
}

// allocated is how many bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
