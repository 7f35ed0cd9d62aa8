// Package lilytest is generated from lilytest.lily.yaml for the runtime's
// broker tests: package runtime cannot import generated code (it would be an
// import cycle), so those tests are package runtime_test and use the producers,
// handler interface and routes generated here, as a service would.
package lilytest

//go:generate go run github.com/lily-mq/lily/cmd/lilygen generate lilytest.lily.yaml
