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
)

// starter is the schema lilygen init writes; its package and output lines
// are filled in.
//
//go:embed starter.lily.yaml
var starter string

var initCmd = &command{
	name: "init", args: "[flags] [file]",
	summary: "write a commented starter schema",
	help: `The file defaults to messages.lily.yaml; init refuses to overwrite one that
exists. The package defaults to the file's name without .lily.yaml, lower
case letters and digits, plus "msg": orders.lily.yaml gives ordersmsg.`,
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

func initSchema(name, pkg string, e *env) int {
	out, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		fmt.Fprintf(e.stderr, "lilygen init: %s exists; init never overwrites a file\n", name)
		return exitUsage
	}
	if err == nil {
		// The package and its directory carry the same name.
		filled := strings.NewReplacer("package: ordersmsg", "package: "+pkg, "output: ordersmsg", "output: "+pkg).Replace(starter)
		_, err = fmt.Fprint(out, filled)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "lilygen init: %v\n", err)
		return exitUsage
	}
	fmt.Fprintf(e.stderr, "lilygen init: wrote %s; edit it, then run lilygen generate %s\n", name, name)
	return exitOK
}
