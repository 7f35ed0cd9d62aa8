package runtime

import (
	"strings"
	"testing"
)

// No error says a URL's password.
func TestURLErrorsHidePasswords(t *testing.T) {
	if got := redact("amqp://app:s3cret@node-1:5672/billing"); got != "amqp://app@node-1:5672/billing" || strings.Contains(got, "s3cret") {
		t.Errorf("redact = %q", got)
	}
	for _, u := range []string{"amqp://app:s3cret@node 1:5672/", "amqp://app:s3cr/et@node-1/", "amqp://app:s3c#ret@node-1/", "amqp://app:%zzs3cret@node-1/"} {
		err := Config{URLs: []string{u}}.validateURLs()
		if err == nil || strings.Contains(err.Error(), "s3c") {
			t.Errorf("validateURLs(%q) = %v", u, err)
		}
	}
}
