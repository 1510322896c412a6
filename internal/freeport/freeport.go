// Package freeport finds loopback ports for a child process that must be
// told its port (and its peers') before it starts, so cannot listen on
// port 0 and say where: etcd and kube-apiserver in tests, the route
// listeners of a NATS cluster's replicas.
//
// A port is free a moment ago only; what keeps another socket from taking
// it before the child binds it is where it is taken from: below the
// kernel's ephemeral range (ip_local_port_range), from which neither a
// listener on port 0 nor an outgoing connection's local port is given. A
// route port from inside that range was once taken by another
// connection's local port, and a replica never joined its cluster.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// span is how many ports below the ephemeral range are tried.
const span = 10000

// Loopback returns n distinct ports on 127.0.0.1, each free a moment ago
// and below the ephemeral range.
func Loopback(n int) ([]int, error) {
	low := ephemeralLow()
	var (
		ports []int
		held  []net.Listener
	)
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries == 100*n+1000 {
			return nil, fmt.Errorf("no %d free ports on 127.0.0.1 in [%d, %d)", n, low-span, low)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(low-span+rand.IntN(span))))
		if err != nil {
			continue
		}
		held = append(held, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default where it cannot be read).
func ephemeralLow() int {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > span+1024 {
				low = n
			}
		}
	}
	return low
}
