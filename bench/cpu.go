package main

import (
	neturl "net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The broker runs on the same two cores as the consumer under test, so a
// consumer's throughput depends on how much CPU it leaves the broker. Each run
// therefore also records the broker's CPU time and the machine's idle time,
// read from /proc (zero where they cannot be read, as with a remote broker).

// clockTick is the unit of /proc's CPU times: USER_HZ, 100 on Linux.
const clockTick = 10 * time.Millisecond

// brokerCPU is the CPU time (user and system) so far of the local RabbitMQ
// node that url reaches, and whether it was found: the process listening on
// url's port, which other nodes on the machine (a cluster's, started by
// tests) and rabbitmqctl's own Erlang VM are not, however alike their command
// lines. Another user's sockets can be told apart only by root; otherwise
// the node is the one Erlang VM started with "-s rabbit boot", when there is
// exactly one.
func brokerCPU(url string) (time.Duration, bool) {
	pid := listener(url)
	if pid == "" {
		pid = onlyNode()
	}
	if pid == "" {
		return 0, false
	}
	stat, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0, false
	}
	// The fields after the command name (which may hold spaces) start with
	// the state; utime and stime are fields 14 and 15 of the line.
	_, rest, _ := strings.Cut(string(stat), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0, false
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * clockTick, true
}

// onlyNode is the pid of the one RabbitMQ node on the machine by its command
// line, "" when there is none or more than one.
func onlyNode() string {
	var found []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err == nil && strings.Contains(string(cmdline), "beam.smp") && strings.Contains(string(cmdline), "\x00-s\x00rabbit\x00boot\x00") {
			found = append(found, filepath.Base(dir))
		}
	}
	if len(found) != 1 {
		return ""
	}
	return found[0]
}

// listener is the pid of the local process listening on url's TCP port, ""
// when none is found (a remote broker, or /proc not readable).
func listener(url string) string {
	u, err := neturl.Parse(url)
	if err != nil {
		return ""
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		port = 5672
		if u.Scheme == "amqps" {
			port = 5671
		}
	}
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, _ := os.ReadFile(table)
		for _, inode := range listening(string(b), port) {
			inodes["socket:["+inode+"]"] = true
		}
	}
	if len(inodes) == 0 {
		return ""
	}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		if target, err := os.Readlink(fd); err == nil && inodes[target] {
			return strings.Split(fd, "/")[2]
		}
	}
	return ""
}

// listening reads a /proc/net/tcp table: the inodes of the sockets
// listening (state 0A) on port.
func listening(table string, port int) []string {
	var inodes []string
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) < 10 || f[3] != "0A" {
			continue
		}
		_, hex, _ := strings.Cut(f[1], ":")
		if p, err := strconv.ParseInt(hex, 16, 32); err == nil && int(p) == port {
			inodes = append(inodes, f[9])
		}
	}
	return inodes
}

// machineCPU returns the machine's idle and total CPU time so far, over all cores.
func machineCPU() (idle, total time.Duration) {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(stat), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		total += time.Duration(n) * clockTick
		if i == 3 || i == 4 { // idle, iowait
			idle += time.Duration(n) * clockTick
		}
	}
	return idle, total
}

// selfCPU is this process's CPU time so far: in the live scenario the parent
// publishes while the child consumes, and its share is not another process's.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The machine counts as quiet when at least quietShare of its CPU was idle
// over a quarter of a second; quiesce waits for that up to quietLimit.
const (
	quietShare = 0.8
	quietLimit = 20 * time.Second
)

// quiesce waits, up to quietLimit, until the machine is quiet: the broker
// has finished deleting the last run's queues and writing this run's fill,
// so that neither is charged to the next drain. It reports whether the
// machine was; a drain that starts anyway is marked in the report.
func quiesce() bool {
	for deadline := time.Now().Add(quietLimit); time.Now().Before(deadline); {
		idle0, total0 := machineCPU()
		time.Sleep(250 * time.Millisecond)
		idle1, total1 := machineCPU()
		if total := total1 - total0; total > 0 && float64(idle1-idle0) >= quietShare*float64(total) {
			return true
		}
	}
	return false
}
