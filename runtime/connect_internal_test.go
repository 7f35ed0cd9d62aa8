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
	err := Config{URLs: []string{"amqp://app:s3cret@node 1:5672/"}}.validateURLs()
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("validateURLs = %v", err)
	}
}
