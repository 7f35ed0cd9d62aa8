// Package linkpath follows a path through its symbolic links as a write to
// it would, for commands that write a file beside its path and rename it
// into place: the rename would otherwise replace a link instead of its
// target.
package linkpath

import (
	"fmt"
	"os"
	"path/filepath"
)

// MaxLinks bounds the symbolic links one path is followed through, as
// Linux bounds them: Resolve's, and lilygen's at a git ref.
const MaxLinks = 40

// Resolve is the file path names, through symbolic links, as os.Create
// would write it. A link to a file not there yet (which EvalSymlinks
// refuses) is followed by hand, relative to its directory.
func Resolve(path string) (string, error) {
	for range MaxLinks {
		if resolved, err := filepath.EvalSymlinks(path); err == nil {
			return resolved, nil
		}
		info, err := os.Lstat(path)
		if err != nil || info.Mode()&os.ModeSymlink == 0 {
			// Not there (created as named), or not to be resolved here:
			// what follows says why, if it fails.
			return path, nil
		}
		to, err := os.Readlink(path)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(to) {
			// Relative to the link's real directory: ".." in it is the
			// kernel's, not a lexical one.
			dir, err := filepath.EvalSymlinks(filepath.Dir(path))
			if err != nil {
				return "", err
			}
			to = filepath.Join(dir, to)
		}
		path = to
	}
	return "", fmt.Errorf("%s: too many symbolic links", path)
}
