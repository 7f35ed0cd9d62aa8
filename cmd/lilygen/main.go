// Command lilygen generates typed RabbitMQ consumers from Lily schema files,
// and checks schemas for review: stale generated code, lint conventions,
// breaking changes against an older revision, a Markdown review page, the
// RabbitMQ definitions of the topology and an AsyncAPI document. Run
// lilygen -h for usage; docs/lilygen.md describes the commands,
// docs/schema.md the schema language.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
