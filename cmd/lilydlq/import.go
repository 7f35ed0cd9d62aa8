package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/envelope"
	"github.com/lily-mq/lily/internal/frame"
	"github.com/lily-mq/lily/internal/queue"
	"github.com/lily-mq/lily/internal/sanitize"
	"github.com/lily-mq/lily/runtime"
)

var importCmd = &command{
	name: "import", args: "-to <queue> [flags] <file>", file: true,
	summary: "publish the copies an export wrote to a queue, as they were exported",
	help: `import publishes each copy of an export file (one JSON object a line, as
export writes them) to the queue -to names, as it was exported: its body, its
properties but for user_id and expiration (the broker refuses a foreign
user_id, and a TTL would apply again), and every header it was exported with
but CC and BCC (they would route it to more queues), a quorum DLQ's counts
of its reads (x-delivery-count, x-acquired-count) and x-lily-handoff-id (the
publisher writes its own). To restore a purged DLQ:
lilydlq import -to <dlq> <export file>.

import restores a DLQ as it was: x-death and the failure facts stay.
To send copies back to the queues they failed in, use redrive (from the
DLQ, or from a queue the export was imported to), which strips them: RabbitMQ
before 3.13 reads a published message's x-death in its cycle check, and
drops, without a word, a message that expires from a retry bucket into a
queue its x-death says it already left, so an imported copy can vanish at
its first retry.

The whole file is read and checked first: a line that is not an export's,
a quarantined copy's (its headers were not exported), one the publisher
would refuse (a delivery mode other than 0, 1 or 2, a header the broker
closes the channel on), or one with an x-death the broker's
dead-lettering cannot read (an entry that is not a table, a count that
is not an integer: no broker writes one, and the queue that dead-letters
the copy would crash), stops the import before anything is published. A file that can be read only once (a pipe:
zcat dlq.jsonl.gz | lilydlq import -to <dlq> /dev/stdin; a FIFO) is
copied as it is checked into a temporary file ($TMPDIR), removed at the
end, and published from that copy; one over 1 GiB is refused before
anything is published: write it to a file first. A file that changes
between its check and its publish ends the import (exit 1). Then each
line is published through the
default exchange, mandatory, on a confirm-mode channel, one at a time: the
next only once the broker confirmed the last and returned nothing. The first
line that is not so ends the import, which says where it stands: the lines
before it are in the queue, the lines after it were not sent, and it is not
in the queue (returned: the queue does not exist; refused; not written), or
may be (unconfirmed: look for it with lilydlq show -id). -skip N then goes on
after line N.

A direct reply-to address (amq.rabbitmq.reply-to.*) is refused as -to
(exit 2): it is a requester's channel, not a queue, and the broker drops
what it cannot hand on there without a word. So is a re-drive's lock
(lilydlq.redrive.*): it is deleted, with what it holds, when its re-drive
ends.

-step bounds each broker step of a publish, as in redrive.`,
	flags: func(fs *flag.FlagSet) func(*env) int {
		o := importOptions{}
		fs.StringVar(&o.to, "to", "", "the queue to publish every copy to (required): the DLQ it was exported from, to restore it")
		fs.IntVar(&o.skip, "skip", 0, "lines of the file not to publish, from its start: those an earlier import published")
		stepFlag(fs, &o.step)
		return func(e *env) int {
			switch {
			case o.to == "":
				return e.usageError("import", "-to is required: the queue to publish to")
			case len(o.to) > maxQueue:
				return e.usageError("import", "-to names no queue: longer than 255 bytes")
			case frame.DirectReply("", o.to):
				return e.usageError("import", "-to names %s", directReplyWhy)
			case isLock(o.to):
				return e.usageError("import", "-to names %s", lockWhy)
			case o.skip < 0:
				return e.usageError("import", "-skip must not be negative")
			case o.step <= 0 || o.step > queue.MaxDuration:
				return e.usageError("import", "-step must be positive, at most %s", queue.MaxDuration)
			}
			return importFile(e, o)
		}
	},
}

type importOptions struct {
	to   string
	skip int
	step time.Duration
}

// imported is one line of an export, as import reads it back; taggedIn
// and namedIn are its header values and its entries whose names are bytes.
type (
	imported = line[json.RawMessage]
	taggedIn = tagged[json.RawMessage]
	namedIn  = named[json.RawMessage]
)

func importFile(e *env, o importOptions) int {
	// Nothing is sent unless every line can be: an import that stopped at a
	// bad line halfway would leave the operator to find out which went.
	in, lines, err := openChecked(e.ctx, e.file, func(line int, p amqp.Publishing) error {
		// What the Publisher would refuse at its turn, refused now.
		if err := frame.CheckPublish("", o.to, p); err != nil {
			return fmt.Errorf("%s, line %d: not publishable: %s", sanitize.Text(e.file, maxQueue), line, sanitize.Text(err.Error(), maxReason))
		}
		return nil
	})
	if err != nil {
		return e.fail("import", fmt.Errorf("%w; nothing was imported", err))
	}
	defer in.close()
	if o.skip > lines {
		return e.fail("import", fmt.Errorf("-skip %d: %s has %d lines", o.skip, sanitize.Text(e.file, maxQueue), lines))
	}
	pub, err := newPublisher(e, o.step)
	if err != nil {
		return e.fail("import", err)
	}
	defer pub.Close()
	to := sanitize.Text(o.to, maxQueue)
	done := o.skip // the lines that are in the queue: the skipped ones, then each confirmed
	read, err := eachLine(e.file, in.f, func(line int, p amqp.Publishing) error {
		if line > lines {
			return fmt.Errorf("%s changed since it was checked: it has more than the %d lines counted; the lines up to %d are in %s, those after it were not sent", sanitize.Text(e.file, maxQueue), lines, done, to)
		}
		if line <= o.skip {
			return nil
		}
		if e.ctx.Err() != nil {
			return fmt.Errorf("stopped (%w) after line %d of %d: the lines up to it are in %s, those after it were not sent; run again with -skip %d", context.Cause(e.ctx), done, lines, to, done)
		}
		id := fmt.Sprintf("line %d of %d, %s (%s)", line, lines, orDash(sanitize.Text(p.MessageId, maxID)), orDash(sanitize.Text(p.Type, maxID)))
		err := send(e.ctx, pub, o.step, o.to, p)
		switch {
		case err == nil:
			done = line
			fmt.Fprintf(e.stdout, "imported %s -> %s\n", id, to)
			return nil
		case errors.Is(err, runtime.ErrUnconfirmed):
			return fmt.Errorf("%s -> %s: %s; it may be in %s or not: the lines before it are, those after it were not sent. Look for it (lilydlq show -id), then run again with -skip %d if it is there, -skip %d if not (else it would be there twice). %s",
				id, to, sanitize.Text(err.Error(), maxReason), to, line, line-1, stepAdvice(len(p.Body), o.step))
		case errors.Is(err, runtime.ErrNacked):
			// As redrive says: a queue that dead-letters what it refuses
			// (reject-publish-dlx) holds the refused copy in its DLQ.
			return fmt.Errorf("%s -> %s: %s; it is not in %s (if %s dead-letters what it refuses, reject-publish-dlx, the refused copy is in its DLQ): the lines before it are, it and those after it were not imported; run again with -skip %d once that is mended", id, to, sanitize.Text(err.Error(), maxReason), to, to, line-1)
		default:
			return fmt.Errorf("%s -> %s: %s; it is not in %s: the lines before it are, it and those after it were not imported; run again with -skip %d once that is mended", id, to, sanitize.Text(err.Error(), maxReason), to, line-1)
		}
	})
	if err == nil && read != lines {
		err = fmt.Errorf("%s changed since it was checked: %d lines counted, %d read to publish; the lines up to %d are in %s", sanitize.Text(e.file, maxQueue), lines, read, done, to)
	}
	e.summary("import", fmt.Sprintf("%s: imported %d of %d lines to %s (%d skipped)", sanitize.Text(e.file, maxQueue), done-o.skip, lines, to, o.skip))
	if err != nil {
		return e.fail("import", err)
	}
	return exitOK
}

// maxSpool bounds the copy import keeps of an input that can be read only
// once: 1 GiB.
var maxSpool int64 = 1 << 30

// checkedFile is an export file whose lines were all checked, open at its
// start to be read again; for an input that can be read only once, the copy
// kept of it, removed when closed.
type checkedFile struct {
	f     *os.File
	spool bool
}

func (c checkedFile) close() {
	_ = c.f.Close()
	if c.spool {
		_ = os.Remove(c.f.Name())
	}
}

// openChecked opens the export file path, once, reads each of its lines,
// checks it is an export's and passes it to check, and returns it open at
// its start, with how many lines it has.
// A file that is not a regular one (a pipe, /dev/stdin, a FIFO) can be read
// only once, so it is copied as it is checked, into a temporary file of at
// most maxSpool bytes, which is returned in its place. The first interrupt
// ends the check before its next line, and a read that waits for its
// writer.
func openChecked(ctx context.Context, path string, check func(line int, p amqp.Publishing) error) (checkedFile, int, error) {
	in, err := os.Open(path)
	if err != nil {
		return checkedFile{}, 0, err
	}
	info, err := in.Stat()
	if err != nil {
		_ = in.Close()
		return checkedFile{}, 0, err
	}
	// The first interrupt ends the check before its next line: a large
	// file is not read to its end first.
	check = stoppable(ctx, path, check)
	if info.Mode().IsRegular() {
		lines, err := eachLine(path, in, check)
		if err == nil {
			_, err = in.Seek(0, io.SeekStart)
		}
		if err != nil {
			_ = in.Close()
			return checkedFile{}, 0, err
		}
		return checkedFile{f: in}, lines, nil
	}
	defer in.Close()
	// Not every file can have a deadline; those that cannot wait for their
	// writer, or for the second interrupt.
	defer context.AfterFunc(ctx, func() { _ = in.SetReadDeadline(time.Now()) })()
	spool, err := os.CreateTemp("", "lilydlq-import-*.jsonl")
	if err != nil {
		return checkedFile{}, 0, fmt.Errorf("%s is not a regular file, and it can be read only once: a copy of it could not be kept: %w", sanitize.Text(path, maxQueue), err)
	}
	c := checkedFile{f: spool, spool: true}
	limited := &io.LimitedReader{R: in, N: maxSpool + 1}
	lines, err := eachLine(path, io.TeeReader(limited, spool), check)
	switch {
	case limited.N == 0:
		err = fmt.Errorf("%s is not a regular file, and it holds more than the %d bytes import copies of such an input before it publishes anything: write it to a file first, and import that", sanitize.Text(path, maxQueue), maxSpool)
	case ctx.Err() != nil:
		err = fmt.Errorf("stopped (%w) while reading %s", context.Cause(ctx), sanitize.Text(path, maxQueue))
	case err == nil:
		_, err = spool.Seek(0, io.SeekStart)
	}
	if err != nil {
		c.close()
		return checkedFile{}, 0, err
	}
	return c, lines, nil
}

// stoppable is check, which may be nil, that first returns an error once
// ctx ends.
func stoppable(ctx context.Context, path string, check func(line int, p amqp.Publishing) error) func(line int, p amqp.Publishing) error {
	return func(line int, p amqp.Publishing) error {
		if ctx.Err() != nil {
			return fmt.Errorf("stopped (%w) while checking %s, at line %d", context.Cause(ctx), sanitize.Text(path, maxQueue), line)
		}
		if check == nil {
			return nil
		}
		return check(line, p)
	}
}

// eachLine calls f, unless it is nil, with each line of the export r, read
// from path, numbered from 1, as the message to publish; it returns how many
// lines there were. It stops at the first line that is not an export's, or
// a quarantined copy's, and at f's first error.
func eachLine(path string, in io.Reader, f func(line int, p amqp.Publishing) error) (int, error) {
	r := bufio.NewReader(in)
	line := 0
	for {
		raw, err := r.ReadBytes('\n')
		if len(raw) == 0 && errors.Is(err, io.EOF) {
			return line, nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return line, err
		}
		line++
		p, perr := publishingOf(bytes.TrimSuffix(raw, []byte("\n")))
		if perr != nil {
			return line, fmt.Errorf("%s, line %d: %w", sanitize.Text(path, maxQueue), line, perr)
		}
		if f == nil {
			continue
		}
		if err := f(line, p); err != nil {
			return line, err
		}
	}
}

// publishingOf is the message an export line describes.
func publishingOf(raw []byte) (amqp.Publishing, error) {
	var x imported
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&x); err != nil {
		return amqp.Publishing{}, fmt.Errorf("not a line of an export: %s", sanitize.Text(err.Error(), maxReason))
	}
	if x.Queue == "" {
		return amqp.Publishing{}, errors.New("not a line of an export: no queue")
	}
	if x.Facts.Quarantined != "" {
		return amqp.Publishing{}, fmt.Errorf("a quarantined copy (%s): its headers were not exported, so it cannot be published as it was; its original is in the DLQ it was exported from (remove the line to import the others)", sanitize.Text(x.Facts.Quarantined, maxReason))
	}
	pr := x.Properties
	p := amqp.Publishing{
		ContentType: pr.ContentType, ContentEncoding: pr.ContentEncoding,
		DeliveryMode: pr.DeliveryMode, Priority: pr.Priority,
		CorrelationId: pr.CorrelationID, ReplyTo: pr.ReplyTo,
		MessageId: pr.MessageID, Type: pr.Type, AppId: pr.AppID,
		Body: x.Body,
	}
	if pr.TimestampUnix != nil {
		p.Timestamp = time.Unix(*pr.TimestampUnix, 0)
	}
	for name, to := range map[string]*string{
		"content_type": &p.ContentType, "content_encoding": &p.ContentEncoding,
		"correlation_id": &p.CorrelationId, "reply_to": &p.ReplyTo,
		"message_id": &p.MessageId, "type": &p.Type, "app_id": &p.AppId,
	} {
		if v, ok := x.RawProps[name]; ok {
			b, err := base64.StdEncoding.DecodeString(v)
			if err != nil {
				return amqp.Publishing{}, fmt.Errorf("property %s: %w", name, err)
			}
			*to = string(b)
		}
	}
	h, err := tableOf(x.Headers, x.RawHeaders)
	if err != nil {
		return amqp.Publishing{}, err
	}
	for k := range h {
		// CC and BCC would route the copy to more queues; a quorum DLQ's
		// counts of its reads belong to that queue, not to the message.
		if envelope.Routing(k) || k == headerDeliveryCount || k == "x-acquired-count" {
			delete(h, k)
		}
	}
	p.Headers = h
	return p, nil
}

// tableOf is the AMQP table of entries as export wrote them, by name and by
// bytes.
func tableOf(m map[string]taggedIn, raw []namedIn) (amqp.Table, error) {
	t := make(amqp.Table, len(m)+len(raw))
	for k, v := range m {
		val, err := valueOf(v)
		if err != nil {
			return nil, fmt.Errorf("header %s: %w", sanitize.Text(k, maxID), err)
		}
		t[k] = val
	}
	for _, n := range raw {
		val, err := valueOf(n.tagged)
		if err != nil {
			return nil, fmt.Errorf("header %s: %w", sanitize.Text(string(n.Name), maxID), err)
		}
		t[string(n.Name)] = val
	}
	return t, nil
}

// valueOf is the AMQP field value export wrote as v: the inverse of tag.
func valueOf(v taggedIn) (any, error) {
	switch v.Type {
	case "void":
		return nil, nil
	case "string":
		if v.Base64 != nil {
			return string(v.Base64), nil
		}
		return valueAs[string](v)
	case "bytes":
		if v.Base64 == nil {
			return []byte{}, nil
		}
		return v.Base64, nil
	case "bool":
		return valueAs[bool](v)
	case "int8":
		return valueAs[int8](v)
	case "uint8":
		return valueAs[uint8](v)
	case "int16":
		return valueAs[int16](v)
	case "uint16":
		return valueAs[uint16](v)
	case "int32":
		return valueAs[int32](v)
	case "uint32":
		return valueAs[uint32](v)
	case "int64":
		return valueAs[int64](v)
	case "float32":
		f, err := floatOf(v)
		return float32(f), err
	case "float64":
		return floatOf(v)
	case "decimal":
		d, err := valueAs[struct {
			Scale uint8 `json:"scale"`
			Value int32 `json:"value"`
		}](v)
		return amqp.Decimal{Scale: d.Scale, Value: d.Value}, err
	case "timestamp":
		if v.Unix == nil {
			return nil, errors.New("a timestamp without its unix seconds")
		}
		return time.Unix(*v.Unix, 0), nil
	case "table":
		m, err := valueAs[map[string]taggedIn](v)
		if err != nil {
			return nil, err
		}
		return tableOf(m, v.RawNames)
	case "array":
		l, err := valueAs[[]taggedIn](v)
		if err != nil {
			return nil, err
		}
		a := make([]any, len(l))
		for i, e := range l {
			if a[i], err = valueOf(e); err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
		}
		return a, nil
	}
	return nil, fmt.Errorf("a value of type %s, which export does not write", sanitize.Text(v.Type, maxID))
}

// valueAs decodes v's value as a T: the Go type of its AMQP type, whose
// bounds encoding/json checks.
func valueAs[T any](v taggedIn) (T, error) {
	var x T
	if err := json.Unmarshal(v.Value, &x); err != nil {
		return x, fmt.Errorf("a %s value: %s", sanitize.Text(v.Type, maxID), sanitize.Text(err.Error(), maxReason))
	}
	return x, nil
}

// floatOf is a float export wrote as a number, or as its name when JSON has
// none for it (NaN, +Inf, -Inf).
func floatOf(v taggedIn) (float64, error) {
	if name, err := valueAs[string](v); err == nil {
		f, err := strconv.ParseFloat(name, 64)
		if err != nil || !math.IsNaN(f) && !math.IsInf(f, 0) {
			return 0, fmt.Errorf("a %s value: %q", v.Type, sanitize.Text(name, maxID))
		}
		return f, nil
	}
	return valueAs[float64](v)
}
