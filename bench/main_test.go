package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCPUPerMessage reads the two CPU times a child prints and works out
// its CPU per message from them, refusing a result that lacks either.
func TestCPUPerMessage(t *testing.T) {
	var out strings.Builder
	if err := json.NewEncoder(&out).Encode(result{N: 4000, CPUFirst: 30_000_000, CPUEnd: 230_000_000}); err != nil {
		t.Fatal(err)
	}
	var res result
	if err := json.Unmarshal([]byte(out.String()), &res); err != nil {
		t.Fatal(err)
	}
	// 200 ms over 4,000 messages.
	if got, err := cpuPerMessage(res); err != nil || got != 50 {
		t.Errorf("cpuPerMessage(%s) = %v, %v; want 50", out.String(), got, err)
	}
	for _, bad := range []result{
		{N: 4000, CPUEnd: 230_000_000},                       // no first delivery noted
		{N: 4000, CPUFirst: 30_000_000},                      // no N-th settlement
		{N: 4000, CPUFirst: 230_000_000, CPUEnd: 30_000_000}, // the wrong way round
		{CPUFirst: 30_000_000, CPUEnd: 230_000_000},          // no messages
	} {
		if got, err := cpuPerMessage(bad); err == nil {
			t.Errorf("cpuPerMessage(%+v) = %v, want an error", bad, got)
		}
	}
}
