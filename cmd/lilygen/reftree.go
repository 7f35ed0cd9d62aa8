package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/lily-mq/lily/internal/linkpath"
)

// refTree reads the files of a repository as a git ref holds them, the way
// the parser reads the working tree's: through the symbolic links git
// holds there (a link is a blob of mode 120000 whose content is where it
// leads, which git show gives as if it were the file), within the
// repository. It lists each directory it looks into once, and reads each
// blob once.
type refTree struct {
	gitDir, ref string
	dirs        map[string]map[string]treeEntry // by directory from the root ("" for the root), then by name
	blobs       map[string][]byte               // by object
	tops        []string                        // the work tree's top, as git gives it and without links; nil until a link needs it
}

// treeEntry is one entry of a tree at the ref.
type treeEntry struct{ mode, object string }

// Modes git gives entries that are no regular file.
const (
	modeTree = "040000"
	modeLink = "120000"
)

func newRefTree(gitDir, ref string) *refTree {
	return &refTree{gitDir: gitDir, ref: ref, dirs: map[string]map[string]treeEntry{}, blobs: map[string][]byte{}}
}

// The kinds of place a path at the ref leads to.
type refKind int

const (
	refMissing   refKind = iota // nothing there: no entry, a dangling link, a file as a directory, too many links
	refFile                     // a regular file
	refDirectory                // a directory
	refOutside                  // outside the repository, by .. or a link
)

// refPath is where a path at the ref leads.
type refPath struct {
	kind   refKind
	real   string    // of a file or directory, its path from the root without links
	object string    // of a file, its blob
	links  []refLink // the links met on the way, in order
	dirs   []string  // the directories passed through, from the root, as the kernel needs them
}

// refLink is a link at the ref: at, its path from the root, and to, what a
// checkout writes in it. That is what git holds, but for an absolute link
// into the repository, whose to is the path from the root it names, and
// fromTop true.
type refLink struct {
	at, to  string
	fromTop bool
}

// resolve follows p, a path from the repository's root, at the ref, one
// name at a time as the kernel does: a link, among p's directories or at
// its end, is followed where git holds it, relative to its directory, and
// a .. after it is taken from where it led. At most linkpath.MaxLinks
// links are followed. An error is git failing to read the tree.
func (t *refTree) resolve(p string) (refPath, error) {
	var r refPath
	todo := strings.Split(p, "/")
	var done []string // the directories reached, none a link
	hops := 0
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			if len(done) == 0 {
				r.kind = refOutside
				return r, nil
			}
			done = done[:len(done)-1]
			continue
		}
		dir := strings.Join(done, "/")
		entries, err := t.list(dir)
		if err != nil {
			return r, err
		}
		e, ok := entries[name]
		at := path.Join(dir, name)
		switch {
		case !ok:
			return r, nil
		case e.mode == modeLink:
			if hops++; hops > linkpath.MaxLinks {
				return r, nil // the working tree's read fails alike
			}
			to, err := t.blob(e.object)
			if err != nil {
				return r, err
			}
			l := refLink{at: at, to: string(to)}
			if l.to == "" {
				return r, nil // leads nowhere, as the kernel takes it
			}
			if strings.HasPrefix(l.to, "/") {
				if l.to, l.fromTop, err = t.fromTop(l.to); err != nil {
					return r, err
				}
				r.links = append(r.links, l)
				if !l.fromTop {
					r.kind = refOutside
					return r, nil
				}
				done = nil
			} else {
				r.links = append(r.links, l)
			}
			todo = append(strings.Split(l.to, "/"), todo...)
		case e.mode == modeTree:
			done = append(done, name)
			r.dirs = append(r.dirs, at)
		case strings.HasPrefix(e.mode, "100") && len(todo) == 0:
			r.kind, r.real, r.object = refFile, at, e.object
			return r, nil
		default:
			// A file taken as a directory, or a submodule, whose content
			// git does not hold here.
			return r, nil
		}
	}
	r.kind, r.real = refDirectory, strings.Join(done, "/")
	return r, nil
}

// fromTop is the path from the repository's root that to, an absolute
// link, names, when it names one in the work tree (as the working tree's
// parser would follow it); inside is false when it leads elsewhere.
func (t *refTree) fromTop(to string) (rel string, inside bool, err error) {
	if t.tops == nil {
		out, err := gitOutput(t.gitDir, "rev-parse", "--show-toplevel")
		if err != nil {
			return "", false, err
		}
		top := strings.TrimSpace(string(out))
		real, err := filepath.EvalSymlinks(top)
		if err != nil {
			return "", false, err
		}
		t.tops = []string{filepath.ToSlash(top), filepath.ToSlash(real)}
	}
	for _, top := range t.tops {
		if rel, ok := strings.CutPrefix(to, top); ok && (rel == "" || strings.HasPrefix(rel, "/")) {
			return strings.TrimPrefix(rel, "/"), true, nil
		}
	}
	return to, false, nil
}

// list is the entries of dir, a directory at the ref from the root.
func (t *refTree) list(dir string) (map[string]treeEntry, error) {
	if entries, ok := t.dirs[dir]; ok {
		return entries, nil
	}
	args := []string{"--literal-pathspecs", "ls-tree", "--full-tree", "-z", t.ref}
	prefix := ""
	if dir != "" {
		prefix = dir + "/"
		args = append(args, "--", prefix)
	}
	out, err := gitOutput(t.gitDir, args...)
	if err != nil {
		return nil, err
	}
	entries := map[string]treeEntry{}
	// Each entry is <mode> SP <type> SP <object> TAB <path>, ended by a NUL.
	for _, line := range strings.Split(string(out), "\x00") {
		info, p, _ := strings.Cut(line, "\t")
		name, ok := strings.CutPrefix(p, prefix)
		if f := strings.Fields(info); ok && len(f) == 3 && name != "" && !strings.Contains(name, "/") {
			entries[name] = treeEntry{mode: f[0], object: f[2]}
		}
	}
	t.dirs[dir] = entries
	return entries, nil
}

// blob is the content of object.
func (t *refTree) blob(object string) ([]byte, error) {
	if data, ok := t.blobs[object]; ok {
		return data, nil
	}
	data, err := gitOutput(t.gitDir, "cat-file", "blob", object)
	if err == nil {
		t.blobs[object] = data
	}
	return data, err
}

// read is the content of the file p, a path from the root, leads to, as
// resolve found it (at); named <ref>:<p>, its error says why there is none,
// as the working tree's Load does.
func (t *refTree) read(p string, at refPath) ([]byte, error) {
	name := t.ref + ":" + p
	switch at.kind {
	case refFile:
		return t.blob(at.object)
	case refOutside:
		return nil, fmt.Errorf("%s: a link to a file outside the repository, which is not read", name)
	case refDirectory:
		return nil, fmt.Errorf("%s: not a regular file", name)
	}
	return nil, fmt.Errorf("%s: no such file or directory", name)
}

// checkout writes the revision at the ref of the repository file rel, and
// of every file it includes, below dir at their paths from the repository's
// root, with the links met on the way as links, so that the parser reads
// the checkout as the working tree: a file reached by two paths is one
// file, and a link that leads outside the repository leads outside dir,
// which the parser refuses (schema.LoadWithin, with dir as the
// repository's root). Included files are found as the parser finds them,
// relative to the path that names the file that includes them; one above
// the repository's root, which the ref cannot hold, or one the ref does
// not hold, is left for the parser to report.
func (t *refTree) checkout(rel, dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	// As the working tree has one, which no tree git holds does: a link
	// into it is refused alike, as git's own.
	if err := os.Mkdir(filepath.Join(dir, ".git"), 0o755); err != nil {
		return err
	}
	todo, seen := []string{rel}, map[string]bool{rel: true}
	written := map[string]bool{} // the files and links written, by path from the root
	for len(todo) > 0 {
		p := todo[0]
		todo = todo[1:]
		at, err := t.resolve(p)
		if err != nil {
			return err
		}
		for _, d := range at.dirs {
			if err := os.MkdirAll(filepath.Join(dir, filepath.FromSlash(d)), 0o755); err != nil {
				return err
			}
		}
		for _, l := range at.links {
			if written[l.at] {
				continue
			}
			written[l.at] = true
			to := l.to
			if l.fromTop {
				to = filepath.Join(abs, filepath.FromSlash(to))
			}
			if err := writeAt(dir, l.at, func(target string) error { return os.Symlink(to, target) }); err != nil {
				return err
			}
		}
		if at.kind != refFile {
			// The parser reports what it cannot read (a directory, which
			// at.dirs made, is no regular file), or refuses.
			continue
		}
		data, err := t.blob(at.object)
		if err != nil {
			return err
		}
		if !written[at.real] {
			written[at.real] = true
			if err := writeAt(dir, at.real, func(target string) error { return os.WriteFile(target, data, 0o644) }); err != nil {
				return err
			}
		}
		var top struct {
			Include []string `yaml:"include"`
		}
		_ = yaml.Unmarshal(data, &top) // a broken file is the parser's to report
		for _, inc := range top.Include {
			q := path.Join(path.Dir(p), filepath.ToSlash(inc))
			if q == ".." || strings.HasPrefix(q, "../") {
				continue // git holds none, and the parser refuses it, as in the working tree
			}
			if !seen[q] {
				seen[q] = true
				todo = append(todo, q)
			}
		}
	}
	return nil
}

// writeAt makes the directory of p, a path from the root, below dir, and
// calls write with p's path there. The directories on the way are none
// that the ref holds as a link, so none leads outside dir.
func writeAt(dir, p string, write func(target string) error) error {
	target := filepath.Join(dir, filepath.FromSlash(p))
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	return write(target)
}
