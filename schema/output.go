package schema

import (
	"fmt"
	"path/filepath"

	"github.com/lily-mq/lily/internal/linkpath"
)

// CheckOutput reports why a tool must not write out, a file f generates
// (slash-separated, relative to f's directory, as output and the AsyncAPI
// file are): as an ErrorList of one BAD-OUTPUT error at the key that names
// it (the AsyncAPI file, else output, else package), or nil. The file a
// write to out reaches, through every symbolic link on the way, one at out
// itself too (dangling or not: a write creates the file it names), must be
// where an include may be (see Parse): inside the repository, and in no
// .git directory. A schema from a pull request, generated in CI, would
// otherwise write wherever the runner can. A path of more than 4,096
// bytes is refused before its links are resolved. f is one Load or Parse
// returned.
func (f *File) CheckOutput(out string) error {
	path := filepath.Join(filepath.Dir(f.Name), filepath.FromSlash(out))
	at, what := f.outputAt, fmt.Sprintf("output %q", shorten(f.Output))
	named := path + " is"
	if f.AsyncAPI != nil && out == f.AsyncAPI.File {
		at, what, named = f.asyncAPIAt, fmt.Sprintf("asyncapi file %q", shorten(out)), "it is"
	}
	e := &Error{File: at.File, Line: at.Line, Column: at.Column, Rule: RuleOutput}
	if len(path) > maxPath {
		// Refused before its links are resolved, as an include is.
		e.Msg = fmt.Sprintf("%s leads to a path of %d bytes: at most %d, the longest a system opens: it is not written", what, len(path), maxPath)
		return ErrorList{e}
	}
	real, err := linkpath.Resolve(path)
	id := fileID(real)
	switch {
	case err != nil:
		e.Msg = clip(what + ": " + unwrapPath(err).Error() + ": " + named + " not written")
	case !f.bound.holds(id):
		e.Msg = clip(what + " leads outside " + f.bound.what + ": " + named + " not written")
	case inGit(f.bound.dir, id):
		e.Msg = clip(what + " leads into a .git directory, git's own: " + named + " not written")
	default:
		return nil
	}
	e.Hint = "the file a write reaches through symbolic links is what counts, as for an include"
	return ErrorList{e}
}
