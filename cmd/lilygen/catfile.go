package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
)

// catFile reads a repository's objects through one git cat-file --batch
// process, started on first use, rather than one git process an object.
type catFile struct {
	dir    string
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr bytes.Buffer
}

// object is an object git read: its id and content.
type object struct {
	id   string
	data []byte
}

// read is the object name names (an object id, or <rev>^{tree}), of type
// kind; what names it in an error. One git has not (missing, or unreadable:
// damaged, or in a partial clone that cannot fetch it), or of another type,
// is an error, as is git failing.
func (c *catFile) read(name, kind, what string) (object, error) {
	if strings.ContainsAny(name, "\n\x00") {
		// A line is one request; git never names an object so.
		return object{}, fmt.Errorf("git cat-file --batch: %s: no object is named %q", what, name)
	}
	if c.cmd == nil {
		if err := c.start(); err != nil {
			return object{}, c.fail(what, err)
		}
	}
	if _, err := io.WriteString(c.in, name+"\n"); err != nil {
		return object{}, c.fail(what, err)
	}
	// The answer is <id> SP <type> SP <size> LF <content> LF, or a line
	// that says why there is none: <name> SP missing LF.
	line, err := c.out.ReadString('\n')
	if err != nil {
		return object{}, c.fail(what, err)
	}
	line = strings.TrimSuffix(line, "\n")
	f := strings.Split(line, " ")
	size, sizeErr := strconv.Atoi(f[len(f)-1])
	if len(f) != 3 || sizeErr != nil || size < 0 {
		// The batch says only missing, also of an object it cannot read:
		// git reading it alone says why.
		if _, err := gitOutput(c.dir, "cat-file", kind, name); err != nil {
			return object{}, fmt.Errorf("git cat-file --batch: %s: %s (%v)", what, line, err)
		}
		return object{}, fmt.Errorf("git cat-file --batch: %s: %s", what, line)
	}
	data := make([]byte, size+1)
	if _, err := io.ReadFull(c.out, data); err != nil {
		return object{}, c.fail(what, err)
	}
	if f[1] != kind {
		return object{}, fmt.Errorf("git cat-file --batch: %s: object %s is a %s, not a %s", what, f[0], f[1], kind)
	}
	return object{id: f[0], data: data[:size]}, nil
}

func (c *catFile) start() error {
	cmd := exec.Command("git", "cat-file", "--batch")
	cmd.Dir = c.dir
	cmd.Stderr = &c.stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	c.cmd, c.in, c.out = cmd, in, bufio.NewReader(out)
	return nil
}

// fail ends the process, which can answer no more (the next read starts
// another), and is the error that err, met reading what, and git's own
// say.
func (c *catFile) fail(what string, err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	if c.cmd != nil {
		c.in.Close()
		if waitErr := c.cmd.Wait(); waitErr != nil {
			err = waitErr
		}
		c.cmd = nil
	}
	err = fmt.Errorf("git cat-file --batch: %s: %v: %s", what, err, strings.TrimSpace(c.stderr.String()))
	c.stderr.Reset()
	return err
}

// close ends the process: git reads no more requests, and exits.
func (c *catFile) close() {
	if c.cmd != nil {
		c.in.Close()
		_ = c.cmd.Wait() // every answer asked for was read whole
		c.cmd = nil
	}
}
