package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestUsage: bad arguments exit 2 before any broker is asked, and say why.
func TestUsage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "Usage:"},
		{[]string{"peek", "q"}, `unknown command "peek"`},
		{[]string{"list"}, "name one queue"},
		{[]string{"list", "a", "b"}, "name one queue"},
		{[]string{"list", "q", "-window", "0"}, "-window must be 1..65535"},
		{[]string{"list", "q", "-window", "70000"}, "-window must be 1..65535"},
		{[]string{"list", "q", "-sample", "-1"}, "-sample must not be negative"},
		{[]string{"show", "q"}, "-id is required"},
		{[]string{"redrive", "q"}, "choose copies: -all, or -id"},
		{[]string{"redrive", "q", "-all", "-id", "x"}, "-all chooses every copy: give it alone"},
		{[]string{"redrive", "q", "-all", "-reason", "x"}, "-all chooses every copy: give it alone"},
		{[]string{"redrive", "q", "-reason-contains", "x", "-all"}, "-all chooses every copy: give it alone"},
		{[]string{"redrive", "q", "-all", "-type", "x"}, "-all chooses every copy: give it alone"},
		{[]string{"redrive", "q", "-all", "-since", "1h"}, "-all chooses every copy: give it alone"},
		{[]string{"redrive", "q", "-all", "-until", "1h", "-dry-run"}, "-all chooses every copy: give it alone"},
		{[]string{"redrive", "q", "-all", "-rate", "-1"}, "-rate must not be negative"},
		{[]string{"redrive", "q", "-all", "-rate", "NaN"}, "-rate must be 0 (no limit) or copies a second from 1/3600 (one an hour) to 1e6"},
		{[]string{"redrive", "q", "-all", "-rate", "Inf"}, "-rate must be 0 (no limit) or copies a second"},
		{[]string{"redrive", "q", "-all", "-rate", "1e-10"}, "-rate must be 0 (no limit) or copies a second"},
		{[]string{"redrive", "q", "-all", "-rate", "2e6"}, "-rate must be 0 (no limit) or copies a second"},
		{[]string{"redrive", "q", "-since", "yesterday"}, "want an RFC 3339 time"},
		{[]string{"redrive", "q", "-all", "-to", "amq.rabbitmq.reply-to.g1h2AA1yZXBseUA5.8aE0ilzreJ"}, "-to names a direct reply-to address, not a queue"},
		{[]string{"redrive", "q", "-all", "-to", "lilydlq.redrive.q"}, "-to names a re-drive's lock"},
		{[]string{"purge", "q", "-all"}, "refusing to purge q without -confirm q"},
		{[]string{"purge", "q", "-confirm", "q"}, "say which copies: -expect N"},
		{[]string{"list", "q", "-nope"}, "flag provided but not defined"},
	} {
		var out, errs bytes.Buffer
		args := c.args
		if len(args) > 0 {
			args = append(args, "-url", "amqp://127.0.0.1:1/")
		}
		if code := run(context.Background(), args, &out, &errs); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", c.args, code, exitUsage)
		}
		if !strings.Contains(errs.String(), c.want) {
			t.Errorf("%v: stderr %q lacks %q", c.args, errs.String(), c.want)
		}
	}
}

// TestHelp: -h and help print to stdout and exit 0.
func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-h"}, {"help"}, {"help", "redrive"}, {"redrive", "-h"}} {
		var out, errs bytes.Buffer
		if code := run(context.Background(), args, &out, &errs); code != exitOK || out.Len() == 0 || errs.Len() != 0 {
			t.Errorf("%v: exit %d, %d bytes out, stderr %q", args, code, out.Len(), errs.String())
		}
	}
}

// TestImportHelpSendsSourcesToRedrive: import keeps x-death, which a broker
// before 3.13 reads in its cycle check, dropping the message at its first
// retry through a bucket back to its source: its help says to send copies
// back to their queues with redrive, which strips it.
func TestImportHelpSendsSourcesToRedrive(t *testing.T) {
	t.Parallel()
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"import", "-h"}, &out, &errs); code != exitOK ||
		!strings.Contains(out.String(), "To send copies back to the queues they failed in, use redrive") {
		t.Errorf("import -h: exit %d, lacks the advice to use redrive:\n%s", code, out.String())
	}
}

// TestWindowDefault: -window is small by default, and its help says what it
// costs: a window of the largest bodies.
func TestWindowDefault(t *testing.T) {
	t.Parallel()
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"list", "-h"}, &out, &errs); code != exitOK {
		t.Fatalf("list -h: exit %d", code)
	}
	if want := "memory is about window × the largest body (default 64)"; !strings.Contains(out.String(), want) {
		t.Errorf("list -h lacks %q:\n%s", want, out.String())
	}
}

// TestNoBroker: a broker that cannot be reached is a failure, exit 1.
func TestNoBroker(t *testing.T) {
	t.Parallel()
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"list", "q", "-url", "amqp://guest:guest@127.0.0.1:1/"}, &out, &errs); code != exitFailure || !strings.Contains(errs.String(), "connect to the broker") {
		t.Errorf("exit %d, stderr %q", code, errs.String())
	}
}

// TestUsageHidesTheURL: the URL in $LILY_AMQP_URL, password and all, is not
// printed as -url's default in any command's help or usage error; it is
// still the broker asked.
func TestUsageHidesTheURL(t *testing.T) {
	const secret = "S3cretPass"
	t.Setenv("LILY_AMQP_URL", "amqp://ops:"+secret+"@127.0.0.1:1/prod")
	for _, c := range commands {
		for _, args := range [][]string{{c.name, "-h"}, {c.name, "-bogus", "q"}} {
			var out, errs bytes.Buffer
			run(context.Background(), args, &out, &errs)
			if all := out.String() + errs.String(); !strings.Contains(all, "-url") || strings.Contains(all, secret) {
				t.Errorf("%v prints the password, or no -url:\n%s", args, all)
			}
		}
	}
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"list", "q"}, &out, &errs); code != exitFailure || !strings.Contains(errs.String(), "connect to the broker") || strings.Contains(errs.String(), secret) {
		t.Errorf("list with $LILY_AMQP_URL: exit %d, stderr %q", code, errs.String())
	}
}
