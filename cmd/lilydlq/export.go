package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/lily-mq/lily/internal/linkpath"
	amqp "github.com/rabbitmq/amqp091-go"
)

var exportCmd = &command{
	name: "export", args: "[flags] <dlq>",
	summary: "write every copy as a line of JSON",
	help: `One JSON object per copy, in queue order, each on its own line:

  {"queue": <dlq>, "redelivered": bool, "facts": {what list shows},
   "properties": {"message_id": ..., "type": ..., "timestamp": ..., ...},
   "headers": {<name>: {"type": <AMQP type>, "value": <value>}, ...},
   "body_base64": ..., "body_text": <the body, when it is valid UTF-8>}

Header values keep their AMQP type (string, bytes, bool, int8..int64,
uint8..uint32, float32, float64, decimal, timestamp, table, array, void):
bytes as base64, a table as an object of such values, an array as a list of
them. A timestamp is written as Unix seconds ("unix"; the property as
"timestamp_unix") and as RFC 3339 when its year has four digits (a producer
writing milliseconds where AMQP has seconds makes years past 56000). A string
or property that is not valid UTF-8 is written as "base64" beside its "type"
(for a property, in "properties_base64") instead of a lossy JSON string; a
header or table entry whose name is not, in "headers_with_base64_names" (in a
table, "base64_names"), each with its name in "name_base64". Copies are
written one at a time: export never holds the DLQ in memory.

A copy whose headers the AMQP client cannot decode (nested too deep, too
wide), or not whole (a table that names an entry twice), is written with
"quarantined" in its facts, saying why, and with the
quarantine filter's marker (x-lily-quarantined) as its only header; its body
and properties are its own. The DLQ keeps it as it is, and the export says
"incomplete" and exits 1: its headers exist only in the DLQ.

The count goes to stderr: "N copies written (N ready when the read began)".
An export that wrote fewer copies than were ready when it began (copies
taken or expired meanwhile, an interrupt, a failure, another consumer of
the DLQ: begun with none, export reads with exclusive consumers and stops
for one that begins) says "incomplete" and exits 1. With -o, the file is replaced only by a whole export: an
incomplete one leaves it as it was and writes its copies to <file>.incomplete.
To delete what was exported, and nothing else:
lilydlq purge -confirm <dlq> -expect N <dlq>. lilydlq import -to <dlq> <file>
publishes the copies back.`,
	flags: func(fs *flag.FlagSet) func(*env) int {
		out := fs.String("o", "", "the file to write, replaced only by a whole export; stdout when empty")
		return func(e *env) int { return export(e, *out) }
	},
}

// exported is one copy as export writes it.
type exported = line[any]

// line is one line of an export: a copy, its header values V as export
// writes them (any) or import reads them back (json.RawMessage).
type line[V any] struct {
	Queue       string               `json:"queue"`
	Redelivered bool                 `json:"redelivered"`
	Facts       facts                `json:"facts"`
	Properties  properties           `json:"properties"`
	RawProps    map[string]string    `json:"properties_base64,omitempty"`
	Headers     map[string]tagged[V] `json:"headers"`
	RawHeaders  []named[V]           `json:"headers_with_base64_names,omitempty"`
	Body        []byte               `json:"body_base64"`
	Text        *string              `json:"body_text,omitempty"`
}

// properties are a copy's AMQP properties.
type properties struct {
	ContentType     string `json:"content_type,omitempty"`
	ContentEncoding string `json:"content_encoding,omitempty"`
	DeliveryMode    uint8  `json:"delivery_mode,omitempty"`
	Priority        uint8  `json:"priority,omitempty"`
	CorrelationID   string `json:"correlation_id,omitempty"`
	ReplyTo         string `json:"reply_to,omitempty"`
	Expiration      string `json:"expiration,omitempty"`
	MessageID       string `json:"message_id,omitempty"`
	Timestamp       string `json:"timestamp,omitempty"`
	TimestampUnix   *int64 `json:"timestamp_unix,omitempty"`
	Type            string `json:"type,omitempty"`
	UserID          string `json:"user_id,omitempty"`
	AppID           string `json:"app_id,omitempty"`
}

// tagged is a header value with its AMQP type: Value, or Base64 for bytes
// that JSON cannot carry as a string, or Unix for a timestamp (beside its
// RFC 3339 Value when its year has four digits). A table's entries whose
// names are not UTF-8 are in RawNames.
type tagged[V any] struct {
	Type     string     `json:"type"`
	Value    V          `json:"value"`
	Base64   []byte     `json:"base64,omitempty"`
	Unix     *int64     `json:"unix,omitempty"`
	RawNames []named[V] `json:"base64_names,omitempty"`
}

// named is a table entry whose name is not valid UTF-8: a JSON object's
// keys would turn such names into U+FFFD, and two of them into one.
type named[V any] struct {
	Name []byte `json:"name_base64"`
	tagged[V]
}

func export(e *env, path string) int {
	if path == "" {
		code, _ := exportTo(e, e.stdout, nil)
		return code
	}
	path, err := linkpath.Resolve(path)
	if err != nil {
		return e.fail("export", err)
	}
	info, err := os.Stat(path)
	if err == nil && !info.Mode().IsRegular() {
		// A device, a pipe (-o /dev/stdout, a process substitution): written
		// as it is, since nothing can be renamed over it.
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return e.fail("export", err)
		}
		defer f.Close()
		code, _ := exportTo(e, f, nil)
		return code
	}
	// Written beside path and renamed over it only when whole: a failed or
	// incomplete export must not take the place of an earlier one, which
	// after a purge may be the only copy of the messages.
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return e.fail("export", fmt.Errorf("%w (the export is written beside the file, then renamed over it)", err))
	}
	defer os.Remove(f.Name()) // once renamed, there is nothing to remove
	if info != nil {
		_ = f.Chmod(info.Mode().Perm()) // the file it replaces keeps its mode
	}
	code, written := exportTo(e, f, f)
	if err := f.Close(); err != nil && code == exitOK {
		return e.fail("export", err)
	}
	switch {
	case code == exitOK:
		if err = os.Rename(f.Name(), path); err == nil {
			// The rename is durable once its directory is: a crash after a
			// purge must not find the export under its temporary name.
			err = syncDir(filepath.Dir(path))
		}
	case written > 0:
		err = os.Rename(f.Name(), path+".incomplete")
		fmt.Fprintf(e.stderr, "lilydlq export: %s is left as it was; what was written is in %s.incomplete\n", path, path)
	}
	if err != nil {
		return e.fail("export", err)
	}
	return code
}

// exportTo writes every copy to w, and syncs file when there is one; it
// returns the exit code and how many copies it wrote.
func exportTo(e *env, w io.Writer, file *os.File) (int, int) {
	bw := bufio.NewWriter(w)
	enc := jsonEncoder(bw)
	var maxCount int64
	held := 0 // quarantined copies: exported without their headers
	read := e.read
	read.watch = true
	res, err := readQueue(e.ctx, e.url, e.queue, "export", read, func(d *amqp.Delivery, quarantined string) (verdict, error) {
		if quarantined != "" {
			held++
		}
		x := exportOf(e.queue, d, quarantined)
		maxCount = max(maxCount, x.Facts.Count)
		return keep, enc.Encode(x)
	})
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	if file != nil && err == nil {
		err = file.Sync()
	}
	// The count is the export's result: a purge after it should check that
	// the DLQ still holds as many (purge -expect).
	if err != nil {
		fmt.Fprintf(e.stderr, "lilydlq export: incomplete: stopped after %d of the %d copies ready when the read began\n", res.Read, res.Ready)
		return e.fail("export", err), res.Read
	}
	e.readNote("export", res, maxCount)
	if !res.whole() {
		fmt.Fprintf(e.stderr, "lilydlq export: incomplete: %d copies written of the %d ready when the read began, beside %d other consumer(s)\n", res.Read, res.Ready, res.Consumers)
		return exitFailure, res.Read
	}
	if held > 0 {
		// Their headers live only in the DLQ: a purge would lose them.
		fmt.Fprintf(e.stderr, "lilydlq export: incomplete: %d copies written, %d of them quarantined, their headers not exported (do not purge)\n", res.Read, held)
		return exitFailure, res.Read
	}
	fmt.Fprintf(e.stderr, "lilydlq export: %d copies written (%d ready when the read began)\n", res.Read, res.Ready)
	return exitOK, res.Read
}

// exportOf is one copy as export writes it; quarantined is why the filter
// replaced its headers, or "".
func exportOf(queue string, d *amqp.Delivery, quarantined string) exported {
	x := exported{
		Queue: queue, Redelivered: d.Redelivered, Facts: factsOf(d, quarantined), Body: d.Body,
		Properties: properties{
			DeliveryMode: d.DeliveryMode, Priority: d.Priority,
		},
	}
	if !d.Timestamp.IsZero() {
		x.Properties.Timestamp, _ = rfc3339(d.Timestamp)
		x.Properties.TimestampUnix = unix(d.Timestamp)
	}
	if utf8.Valid(d.Body) {
		s := string(d.Body)
		x.Text = &s
	}
	for _, p := range []struct {
		name string
		from string
		to   *string
	}{
		{"content_type", d.ContentType, &x.Properties.ContentType},
		{"content_encoding", d.ContentEncoding, &x.Properties.ContentEncoding},
		{"correlation_id", d.CorrelationId, &x.Properties.CorrelationID},
		{"reply_to", d.ReplyTo, &x.Properties.ReplyTo},
		{"expiration", d.Expiration, &x.Properties.Expiration},
		{"message_id", d.MessageId, &x.Properties.MessageID},
		{"type", d.Type, &x.Properties.Type},
		{"user_id", d.UserId, &x.Properties.UserID},
		{"app_id", d.AppId, &x.Properties.AppID},
	} {
		if utf8.ValidString(p.from) {
			*p.to = p.from
			continue
		}
		if x.RawProps == nil {
			x.RawProps = map[string]string{}
		}
		x.RawProps[p.name] = base64.StdEncoding.EncodeToString([]byte(p.from))
	}
	x.Headers, x.RawHeaders = entries(d.Headers)
	return x
}

// entries are a table's entries as JSON can hold them: by name, and those
// whose names are not UTF-8 by their bytes, sorted.
func entries(t amqp.Table) (map[string]tagged[any], []named[any]) {
	m := make(map[string]tagged[any], len(t))
	var raw []named[any]
	for k, v := range t {
		if utf8.ValidString(k) {
			m[k] = tag(v)
		} else {
			raw = append(raw, named[any]{Name: []byte(k), tagged: tag(v)})
		}
	}
	slices.SortFunc(raw, func(a, b named[any]) int { return bytes.Compare(a.Name, b.Name) })
	return m, raw
}

// rfc3339 is t in RFC 3339, which has room for years 0 to 9999 only: a
// producer that writes milliseconds where AMQP has seconds makes years past
// 56000. It reports false, and "", for those.
func rfc3339(t time.Time) (string, bool) {
	if y := t.UTC().Year(); y < 0 || y > 9999 {
		return "", false
	}
	return t.UTC().Format(time.RFC3339), true
}

// unix is t in Unix seconds, which always hold an AMQP timestamp.
func unix(t time.Time) *int64 {
	s := t.Unix()
	return &s
}

// tag is an AMQP field value with its type, as JSON can hold it.
func tag(v any) tagged[any] {
	t := tagged[any]{Type: typeName(v), Value: v}
	switch v := v.(type) {
	case string:
		if !utf8.ValidString(v) {
			t.Value, t.Base64 = nil, []byte(v)
		}
	case []byte:
		t.Value, t.Base64 = nil, v
	case time.Time:
		t.Value, t.Unix = nil, unix(v)
		if text, ok := rfc3339(v); ok {
			t.Value = text
		}
	case float32:
		t.Value = finite(float64(v))
	case float64:
		t.Value = finite(v)
	case amqp.Decimal:
		t.Value = map[string]any{"scale": v.Scale, "value": v.Value}
	case amqp.Table:
		t.Value, t.RawNames = entries(v)
	case []any:
		l := make([]tagged[any], len(v))
		for i, e := range v {
			l[i] = tag(e)
		}
		t.Value = l
	}
	return t
}

// finite is f, or its name when JSON has no number for it.
func finite(f float64) any {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Sprint(f)
	}
	return f
}

// typeName names an AMQP field value's type as amqp091-go decodes it.
func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "void"
	case string:
		return "string"
	case []byte:
		return "bytes"
	case bool:
		return "bool"
	case int8:
		return "int8"
	case uint8:
		return "uint8"
	case int16:
		return "int16"
	case uint16:
		return "uint16"
	case int32:
		return "int32"
	case uint32:
		return "uint32"
	case int64, int:
		return "int64"
	case float32:
		return "float32"
	case float64:
		return "float64"
	case amqp.Decimal:
		return "decimal"
	case time.Time:
		return "timestamp"
	case amqp.Table:
		return "table"
	case []any:
		return "array"
	}
	return fmt.Sprintf("%T", v)
}

// syncDir makes the entries of dir, a rename in it among them, durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
