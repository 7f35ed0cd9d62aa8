package main

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/lily-mq/lily/internal/linkpath"
)

// refTree reads the files of a repository as a git ref holds them, the way
// the parser reads the working tree's: through the symbolic links git
// holds there (a link is a blob of mode 120000 whose content is where it
// leads), within the repository. It reads git's trees and blobs through one
// git cat-file --batch process, which close ends, each object once; a run
// has one for each repository and ref (gitRun.tree).
type refTree struct {
	git         *gitRun
	gitDir, ref string
	objects     catFile
	dirs        map[string][]treeEntry // by directory from the root ("" for the root), in git's order
	blobs       map[string][]byte      // by object
	tops        []string               // the work tree's top, as git gives it and without links; nil until a link needs it
}

// treeEntry is one entry of a tree at the ref.
type treeEntry struct{ name, mode, object string }

// Modes git gives entries that are no regular file, as git ls-tree shows
// them.
const (
	modeTree   = "040000"
	modeLink   = "120000"
	modeCommit = "160000" // a submodule's commit
)

func newRefTree(git *gitRun, gitDir, ref string) *refTree {
	return &refTree{git: git, gitDir: gitDir, ref: ref, objects: catFile{dir: gitDir}, dirs: map[string][]treeEntry{}, blobs: map[string][]byte{}}
}

// close ends the git process reading the objects.
func (t *refTree) close() { t.objects.close() }

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
		e, ok, err := t.entry(dir, name)
		if err != nil {
			return r, err
		}
		at := path.Join(dir, name)
		switch {
		case !ok:
			return r, nil
		case e.mode == modeLink:
			if hops++; hops > linkpath.MaxLinks {
				return r, nil // the working tree's read fails alike
			}
			to, err := t.blob(e.object, at)
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
		out, err := t.git.revParse(t.gitDir, "--show-toplevel")
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
func (t *refTree) list(dir string) ([]treeEntry, error) {
	if entries, ok := t.dirs[dir]; ok {
		return entries, nil
	}
	name, what := t.ref+"^{tree}", t.ref
	if dir != "" {
		parent, base := path.Split(dir)
		e, ok, err := t.entry(strings.TrimSuffix(parent, "/"), base)
		if err != nil {
			return nil, err
		}
		if !ok || e.mode != modeTree {
			return nil, fmt.Errorf("%s:%s: not a directory", t.ref, dir)
		}
		name, what = e.object, t.ref+":"+dir
	}
	o, err := t.objects.read(name, "tree", what)
	if err != nil {
		return nil, err
	}
	entries, err := parseTree(o)
	if err != nil {
		return nil, fmt.Errorf("git cat-file --batch: %s: %v", what, err)
	}
	t.dirs[dir] = entries
	return entries, nil
}

// entry is the entry name of dir, a directory at the ref from the root.
func (t *refTree) entry(dir, name string) (treeEntry, bool, error) {
	entries, err := t.list(dir)
	if err != nil {
		return treeEntry{}, false, err
	}
	i := slices.IndexFunc(entries, func(e treeEntry) bool { return e.name == name })
	if i < 0 {
		return treeEntry{}, false, nil
	}
	return entries[i], true, nil
}

// parseTree reads the entries of o, a tree: each <mode> SP <name> NUL and
// the object's id, as many bytes as the ids git gives (20 for SHA-1, 32
// for SHA-256). Modes are those git ls-tree shows.
func parseTree(o object) ([]treeEntry, error) {
	size := len(o.id) / 2
	var entries []treeEntry
	for data := o.data; len(data) > 0; {
		head, rest, ok := bytes.Cut(data, []byte{0})
		mode, name, ok2 := strings.Cut(string(head), " ")
		m, err := strconv.ParseUint(mode, 8, 32)
		if !ok || !ok2 || err != nil || name == "" || len(rest) < size {
			return nil, fmt.Errorf("tree %s is damaged", o.id)
		}
		entries = append(entries, treeEntry{name: name, mode: canonicalMode(m), object: hex.EncodeToString(rest[:size])})
		data = rest[size:]
	}
	return entries, nil
}

// canonicalMode is the mode git takes an entry's mode for, as git ls-tree
// shows it: a tree's, a link's, a regular file's (executable or not), or
// else a submodule's.
func canonicalMode(m uint64) string {
	switch m & 0o170000 {
	case 0o040000:
		return modeTree
	case 0o120000:
		return modeLink
	case 0o100000:
		if m&0o100 != 0 {
			return "100755"
		}
		return "100644"
	}
	return modeCommit
}

// blob is the content of object, the blob at p, a path from the root.
func (t *refTree) blob(object, p string) ([]byte, error) {
	if data, ok := t.blobs[object]; ok {
		return data, nil
	}
	o, err := t.objects.read(object, "blob", t.ref+":"+p)
	if err != nil {
		return nil, err
	}
	t.blobs[object] = o.data
	return o.data, nil
}

// files are the regular files at the ref below dir, a directory from the
// root ("" for all), by path from the root, in git's order, as git ls-tree
// -r lists them; none when the ref has no directory there.
func (t *refTree) files(dir string) ([]treeEntry, error) {
	var files []treeEntry
	var walk func(dir string) error
	walk = func(dir string) error {
		entries, err := t.list(dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			e.name = path.Join(dir, e.name)
			switch {
			case e.mode == modeTree:
				if err := walk(e.name); err != nil {
					return err
				}
			case strings.HasPrefix(e.mode, "100"):
				files = append(files, e)
			}
		}
		return nil
	}
	// Only a directory, reached through directories, holds files there.
	done := ""
	for _, name := range strings.Split(dir, "/") {
		if name == "" {
			continue
		}
		e, ok, err := t.entry(done, name)
		if err != nil || !ok || e.mode != modeTree {
			return nil, err
		}
		done = path.Join(done, name)
	}
	return files, walk(done)
}

// read is the content of the file p, a path from the root, leads to, as
// resolve found it (at); named <ref>:<p>, its error says why there is none,
// as the working tree's Load does.
func (t *refTree) read(p string, at refPath) ([]byte, error) {
	name := t.ref + ":" + p
	switch at.kind {
	case refFile:
		return t.blob(at.object, at.real)
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
		data, err := t.blob(at.object, at.real)
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
