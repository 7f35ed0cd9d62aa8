// Command lilygen generates typed RabbitMQ consumers from Lily schema files
// and checks that generated files are up to date. Run lilygen -h for usage;
// docs/schema.md describes the schema language.
package main

import "os"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }
