package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/lily-mq/lily/internal/printable"
)

const (
	diffContext = 3   // unchanged lines around each change
	diffLines   = 200 // hunk lines printed per file at most
	// lcsCells bounds the LCS table; a larger changed middle shows as one
	// replacement, which is still correct, only less tidy.
	lcsCells = 4 << 20
)

// op is one line of an edit script: ' ' kept, '-' only in the old text, '+'
// only in the new.
type op struct {
	kind byte
	text string
}

// unifiedDiff writes a unified-style diff from old (on disk) to new
// (generated) for file name, at most diffLines hunk lines.
func unifiedDiff(w io.Writer, name string, old, new []byte) {
	ops := diffLinesOf(splitLines(string(old)), splitLines(string(new)))
	fmt.Fprintf(w, "--- %s (on disk)\n+++ %s (generated)\n", diffLine(name), diffLine(name))
	// before[k] counts the old and new lines that ops[:k] hold.
	oldBefore, newBefore := make([]int, len(ops)+1), make([]int, len(ops)+1)
	for k, o := range ops {
		oldBefore[k+1], newBefore[k+1] = oldBefore[k], newBefore[k]
		if o.kind != '+' {
			oldBefore[k+1]++
		}
		if o.kind != '-' {
			newBefore[k+1]++
		}
	}
	printed := 0
	for start, end := hunk(ops, 0); start < len(ops); start, end = hunk(ops, end) {
		fmt.Fprintf(w, "@@ -%s +%s @@\n",
			span(oldBefore[start], oldBefore[end]), span(newBefore[start], newBefore[end]))
		for _, o := range ops[start:end] {
			if printed == diffLines {
				fmt.Fprintf(w, "... (diff cut at %d lines)\n", diffLines)
				return
			}
			text, cut := strings.CutSuffix(o.text, noNewline)
			fmt.Fprintf(w, "%c%s\n", o.kind, diffLine(text))
			if cut {
				fmt.Fprintln(w, `\ No newline at end of file`)
			}
			printed++
		}
	}
}

// diffLine is a line of a file as the diff prints it: escaped, as every line
// lilygen prints is, since a file on disk (one in a pull request) may hold an
// escape sequence or a carriage return that forges what the terminal shows,
// or a workflow command (noCommands); its tabs, which indent Go code, stay as
// they are.
func diffLine(s string) string {
	parts := strings.Split(s, "\t")
	for i, p := range parts {
		parts[i] = printable.String(p)
	}
	return noCommands(strings.Join(parts, "\t"))
}

// hunk finds the next hunk at or after ops[from]: the changes, the unchanged
// runs short enough to join them, and diffContext lines either side. start is
// len(ops) when no change is left.
func hunk(ops []op, from int) (start, end int) {
	i := from
	for i < len(ops) && ops[i].kind == ' ' {
		i++
	}
	if i == len(ops) {
		return len(ops), len(ops)
	}
	start, end = max(from, i-diffContext), i
	for {
		for end < len(ops) && ops[end].kind != ' ' {
			end++
		}
		same := end
		for same < len(ops) && ops[same].kind == ' ' {
			same++
		}
		if same == len(ops) || same-end > 2*diffContext {
			return start, min(end+diffContext, len(ops))
		}
		end = same
	}
}

// span is a hunk header's range of lines: first line and count, where an
// empty range names the line before it.
func span(before, after int) string {
	if after == before {
		return fmt.Sprintf("%d,0", before)
	}
	return fmt.Sprintf("%d,%d", before+1, after-before)
}

// noNewline ends the last line of a text that has no final newline, as
// splitLines returns it: no line holds a newline, so that line differs from
// the same line with one, and the diff shows it as diff -u does.
const noNewline = "\n"

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	if !strings.HasSuffix(s, "\n") {
		lines[len(lines)-1] += noNewline
	}
	return lines
}

// diffLinesOf is the edit script from a to b: common prefix and suffix kept,
// the middle matched by longest common subsequence.
func diffLinesOf(a, b []string) []op {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	var ops []op
	keep := func(lines []string) {
		for _, l := range lines {
			ops = append(ops, op{' ', l})
		}
	}
	keep(a[:pre])
	ops = append(ops, lcs(a[pre:len(a)-suf], b[pre:len(b)-suf])...)
	keep(a[len(a)-suf:])
	return ops
}

func lcs(a, b []string) []op {
	var ops []op
	if (len(a)+1)*(len(b)+1) > lcsCells {
		for _, l := range a {
			ops = append(ops, op{'-', l})
		}
		for _, l := range b {
			ops = append(ops, op{'+', l})
		}
		return ops
	}
	// n[i][j] is the LCS length of a[i:] and b[j:].
	w := len(b) + 1
	n := make([]int32, (len(a)+1)*w)
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				n[i*w+j] = n[(i+1)*w+j+1] + 1
			} else {
				n[i*w+j] = max(n[(i+1)*w+j], n[i*w+j+1])
			}
		}
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			ops = append(ops, op{' ', a[i]})
			i, j = i+1, j+1
		case j == len(b) || i < len(a) && n[(i+1)*w+j] >= n[i*w+j+1]:
			ops = append(ops, op{'-', a[i]})
			i++
		default:
			ops = append(ops, op{'+', b[j]})
			j++
		}
	}
	return ops
}
