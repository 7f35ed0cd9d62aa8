package gen

import (
	"go/token"
	"go/types"
	"slices"
	"strconv"
	"strings"
)

// scope hands out the local variable names of one generated function: a
// block's names, then those of the blocks around it.
type scope struct {
	names  []string
	parent *scope
}

// reserved are never used for a local: the generated functions' own names,
// the imported packages and every one of Go's predeclared identifiers (a
// field named uint8 would hide the conversion its own value needs).
var reserved = func() map[string]bool {
	m := map[string]bool{}
	for _, name := range strings.Fields(`r o out err n header raw ok p body msg messageID
		base64 context encoding errors json maps regexp runtime slices strconv time utf8 wire`) {
		m[name] = true
	}
	for _, name := range types.Universe.Names() {
		m[name] = true
	}
	return m
}()

func newScope() *scope { return &scope{} }

// block is the scope of a block inside s: its names may be reused once the
// block ends.
func (s *scope) block() *scope { return &scope{parent: s} }

func (s *scope) taken(name string) bool {
	if reserved[name] || token.IsKeyword(name) {
		return true
	}
	for b := s; b != nil; b = b.parent {
		if slices.Contains(b.names, name) {
			return true
		}
	}
	return false
}

func (s *scope) name(base string) string {
	name := base
	for i := 2; s.taken(name); i++ {
		name = base + strconv.Itoa(i)
	}
	s.names = append(s.names, name)
	return name
}
