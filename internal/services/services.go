// Package services names the RabbitMQ and PostgreSQL that Lily's tests run
// against, and marks the tests that need them. Under go test -short such a
// test is skipped, so the quick tier runs on a machine with neither; otherwise
// it runs, and a service it cannot reach fails it (the test's own dial says
// how to start it): make test never skips one.
package services

import (
	"os"
	"strings"
	"testing"
)

// The services of this machine, unless LILY_AMQP_URL or LILY_PG_DSN name others.
const (
	LocalRabbitMQ   = "amqp://guest:guest@127.0.0.1:5672/"
	LocalPostgreSQL = "host=127.0.0.1 port=5432 user=postgres dbname=test sslmode=disable"
)

// RabbitMQ returns the URL of the broker t talks to, or skips t under -short.
func RabbitMQ(t testing.TB) string {
	t.Helper()
	need(t, "RabbitMQ")
	return orDefault("LILY_AMQP_URL", LocalRabbitMQ)
}

// PostgreSQL returns the connection string (keyword or URL form) of the
// database t talks to, or skips t under -short.
func PostgreSQL(t testing.TB) string {
	t.Helper()
	need(t, "PostgreSQL")
	return orDefault("LILY_PG_DSN", LocalPostgreSQL)
}

// Cluster returns the AMQP URLs of the three-node cluster that .ci/cluster
// starts (make cluster-up), from LILY_CLUSTER_URLS (comma-separated), or
// skips t: the cluster is not a service of the machine, so only make test's
// cluster step, which starts it and sets the variable, runs such a test.
func Cluster(t testing.TB) []string {
	t.Helper()
	need(t, "the three-node RabbitMQ cluster")
	urls := os.Getenv("LILY_CLUSTER_URLS")
	if urls == "" {
		t.Skip("needs the three-node RabbitMQ cluster: make cluster-up, then LILY_CLUSTER_URLS=$(.ci/cluster urls) (make test does both)")
	}
	return strings.Split(urls, ",")
}

// Slow skips t under -short: a test that needs no service but waits out
// real time (a settlement budget, a recycle), seconds the quick tier does
// not spend. make test runs it.
func Slow(t testing.TB, waits string) {
	t.Helper()
	if testing.Short() {
		t.Skip("waits out " + waits + ": go test -short runs the quick tests only")
	}
}

func need(t testing.TB, service string) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs " + service + ": go test -short runs the tests that need no service")
	}
}

func orDefault(env, local string) string {
	if v := os.Getenv(env); v != "" {
		return v
	}
	return local
}
