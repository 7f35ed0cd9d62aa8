package main

import (
	"net"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

// The table's listening sockets on the port, and no others: not another
// port's, not a connection's to it.
func TestListening(t *testing.T) {
	const table = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1628 00000000:0000 0A 00000000:00000000 00:00000000 00000000   106        0 7106 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1629 00000000:0000 0A 00000000:00000000 00:00000000 00000000   106        0 7107 1 0000000000000000 100 0 0 10 0
   2: 0100007F:D2F0 0100007F:1628 01 00000000:00000000 00:00000000 00000000     0        0 7108 1 0000000000000000 20 4 30 10 -1
`
	if got := listening(table, 5672); !slices.Equal(got, []string{"7106"}) {
		t.Errorf("listening on 5672: %v, want [7106]", got)
	}
}

// A port this process listens on is found to be this process's: the run
// reads the CPU of the node serving its URL, not of another node alike.
func TestListenerIsTheProcessOnThePort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	url := "amqp://guest:guest@" + l.Addr().String() + "/"
	if got, want := listener(url), strconv.Itoa(os.Getpid()); got != want {
		t.Errorf("listener of %s: pid %q, want %q", url, got, want)
	}
	for selfCPU() < 50*time.Millisecond {
		// /proc counts in ticks of 10 ms: spend a few.
	}
	if got, found := brokerCPU(url); !found || got <= 0 {
		t.Errorf("brokerCPU of this process: %v (found %v), want above 0", got, found)
	}
}
