package main

import (
	"net"
	"strings"

	"github.com/urfave/cli/v2"
)

// allPeersFlag lets every replica of a StatefulSet take the same setting:
// the route addresses of all replicas, its own included, which it drops.
// --peers lists only the others, so each pod would need its own list, which
// a container without a shell (the distroless image) cannot work out.
func allPeersFlag() cli.Flag {
	return &cli.StringFlag{Name: "all-peers", EnvVars: []string{"REZUSCLOUD_ALL_PEERS"},
		Usage: "every replica's route address, this one's included, comma-separated host:port; the one whose host is this host's name, " +
			"or whose first DNS label is (a StatefulSet pod's <pod>.<service>), is dropped and the rest are the peers (instead of --peers)"}
}

// withoutSelf returns addrs without the ones naming this host: host:port
// whose host is hostname or starts with hostname and a dot. It does not
// resolve names (the other pods' records may not exist yet).
func withoutSelf(addrs []string, hostname string) []string {
	var out []string
	for _, a := range addrs {
		host, _, err := net.SplitHostPort(a)
		first, _, _ := strings.Cut(host, ".")
		if err == nil && hostname != "" && net.ParseIP(host) == nil && strings.EqualFold(first, hostname) {
			continue
		}
		out = append(out, a)
	}
	return out
}

// splitList splits a comma-separated flag value, dropping empty entries.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
