package main

import (
	"flag"
	"fmt"

	"github.com/lily-mq/lily/gen/asyncapi"
	"github.com/lily-mq/lily/schema"
)

var asyncapiCmd = &command{
	name: "asyncapi", args: "[flags] <schema.lily.yaml>", schemas: true,
	summary: "print the schema as an AsyncAPI 3.0.0 document (YAML)",
	help: `The document has a channel per queue and per exchange (address: its name,
with its AMQP binding), a receive operation per queue, a send operation per
queue for the messages Lily generates producers for (through the default
exchange), and a message per message version with its headers and payload
as JSON Schema, its examples and its AMQP binding. Lily's own facts (retry,
DLQ, delivery limit, inbox, ordering, envelope profile) are x-lily-*
extensions.

It is the document generate writes, and check verifies, when the schema
names one under asyncapi: {file: ...}, without the lines that mark a file
lilygen generated: a printed document is yours, and generate never replaces
or deletes it. info.version is --api-version, else that key's version, else
1.0.0.

  lilygen asyncapi orders.lily.yaml > orders.asyncapi.yaml`,
	flags: func(fs *flag.FlagSet) func(*env) int {
		apiVersion := fs.String("api-version", "", "the document's info.version (default: the schema's asyncapi version, else "+schema.DefaultAsyncAPIVersion+")")
		return func(e *env) int {
			if !e.needSchemas("asyncapi") {
				return exitUsage
			}
			if len(e.args) > 1 {
				fmt.Fprintf(e.stderr, "lilygen asyncapi: name one schema file: each is one document\n")
				return exitUsage
			}
			f, ok := e.loadOne(e.args[0])
			if !ok {
				return exitUsage
			}
			version := *apiVersion
			if version == "" {
				version = schema.DefaultAsyncAPIVersion
				if f.AsyncAPI != nil {
					version = f.AsyncAPI.Version
				}
			}
			doc, err := asyncapi.Document(f, version)
			if err != nil {
				say(e.stderr, "lilygen asyncapi: %v", err)
				return exitUsage
			}
			// Lost to a full disk or a closed pipe, the document must not
			// pass for printed, as doc's page does not.
			if _, err := e.stdout.Write(doc); err != nil {
				say(e.stderr, "lilygen asyncapi: %v", err)
				return exitUsage
			}
			return exitOK
		}
	},
}
