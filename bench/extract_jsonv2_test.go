//go:build goexperiment.jsonv2

package main

import (
	jsonv2 "encoding/json/v2"

	"github.com/lily-mq/lily/examples/orders/ordersmsg"
)

// encoding/json/v2 is in the standard library of Go 1.26 behind
// GOEXPERIMENT=jsonv2:
//
//	GOEXPERIMENT=jsonv2 go test -run '^$' -bench Extract -count 10 .
func init() {
	decoders["encoding-json-v2"] = func(body []byte) (any, error) {
		msg := new(ordersmsg.OrderPlacedV2)
		return msg, jsonv2.Unmarshal(body, msg)
	}
}
