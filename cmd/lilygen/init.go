package main

import (
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode"

	"github.com/lily-mq/lily/schema"
)

// starter is the schema lilygen init writes for package ordersmsg; for
// another package, its package and output lines and its queue's names are
// filled in.
//
//go:embed starter.lily.yaml
var starter string

// The names in starter that init fills in.
const (
	starterPackage = "ordersmsg"
	starterQueue   = "orders.events"
)

var initCmd = &command{
	name: "init", args: "[flags] [file]",
	summary: "write a commented starter schema",
	help: `The file defaults to messages.lily.yaml; init refuses to overwrite one that
exists. The package defaults to the file's name without .lily.yaml, lower
case letters and digits, plus "msg": orders.lily.yaml gives ordersmsg; a
-package must be a lower-case Go package name, as a schema's package. The
starter's queue is named after the package without "msg", so that it meets
no other on a shared broker: ordersmsg and orders give orders.events.`,
	flags: func(fs *flag.FlagSet) func(*env) int {
		pkg := fs.String("package", "", "the Go package of the generated code")
		return func(e *env) int {
			name := "messages.lily.yaml"
			switch len(e.args) {
			case 0:
			case 1:
				name = e.args[0]
			default:
				fmt.Fprintln(e.stderr, "lilygen init: name one file at most")
				return exitUsage
			}
			if *pkg == "" {
				*pkg = packageFor(name)
			}
			return initSchema(name, *pkg, e)
		}
	},
}

// packageFor makes a package name from a schema file's name.
func packageFor(name string) string {
	stem := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(name), ".yaml"), ".lily")
	stem = strings.Map(func(r rune) rune {
		if r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r)) {
			return unicode.ToLower(r)
		}
		return -1
	}, stem)
	if stem == "" || !unicode.IsLetter(rune(stem[0])) {
		stem = "app" + stem
	}
	return stem + "msg"
}

// queueFor names the starter's queue after the package: billing and
// billingmsg give billing.events. A queue name is broker-wide, and one named
// after its service's package meets no other's, nor the orders demo's classic
// orders, which a quorum queue of the same name would meet with 406
// PRECONDITION_FAILED.
func queueFor(pkg string) string {
	base := strings.TrimSuffix(pkg, "msg")
	if base == "" {
		base = pkg
	}
	return base + ".events"
}

// fillStarter gives the starter schema for package pkg.
func fillStarter(pkg string) string {
	q := queueFor(pkg)
	return strings.NewReplacer(
		// The package and its directory carry the same name.
		"package: "+starterPackage, "package: "+pkg,
		"output: "+starterPackage, "output: "+pkg,
		// The queue's key, its retry buckets and its DLQ.
		starterQueue, q,
	).Replace(starter)
}

// readsBack reports whether the starter for package pkg reads as a schema
// of that package: a name generation refuses (BAD-NAME) is refused here,
// and so is one holding YAML (a newline, a comment), which would write
// another schema than the one asked for.
func readsBack(name, pkg string) bool {
	f, err := schema.Parse(name, []byte(fillStarter(pkg)))
	return err == nil && f.Package == pkg && f.Output == pkg
}

func initSchema(name, pkg string, e *env) int {
	if !readsBack(name, pkg) {
		say(e.stderr, "lilygen init: -package %q is not a lower-case Go package name such as ordersmsg", pkg)
		return exitUsage
	}
	out, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		say(e.stderr, "lilygen init: %s exists; init never overwrites a file", name)
		return exitUsage
	}
	if err == nil {
		_, err = fmt.Fprint(out, fillStarter(pkg))
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			// A starter cut short (a full disk) is no file of the user's:
			// left behind, it would make the next init refuse.
			os.Remove(name)
		}
	}
	if err != nil {
		say(e.stderr, "lilygen init: %v", err)
		return exitUsage
	}
	// README.md's set-up runs lilygen as a Go tool, not from the PATH.
	say(e.stderr, "lilygen init: wrote %s; edit it, then run go tool lilygen generate %s", name, name)
	return exitOK
}
