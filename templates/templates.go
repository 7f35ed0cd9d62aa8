// Package templates holds the text/template files of the documents lilygen
// writes, embedded so that the command needs no files at run time.
package templates

import "embed"

// FS holds every *.tmpl file of this directory.
//
//go:embed *.tmpl
var FS embed.FS
