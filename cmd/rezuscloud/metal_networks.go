package main

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/talos"
)

// metalNetworksFlag is where metal machines may be (issue 42, finding 5):
// their addresses are written by tenant editors, and the server dials them.
var metalNetworksFlag = &cli.StringFlag{Name: "metal-networks", EnvVars: []string{"REZUSCLOUD_METAL_NETWORKS"},
	Usage: "the networks (comma-separated CIDRs) metal machines may be on; the server dials no other address as a metal machine. " +
		"Default: any address but loopback (allowed with --with-emulator, whose nodes are there), link-local (the cloud metadata service), " +
		"other cloud metadata addresses, multicast and this host's own; give 127.0.0.0/8 for `rezusctl boot` machines on loopback"}

// metalAddressPolicy is the rule for metal machine addresses from
// --metal-networks, --with-emulator and this host's own addresses.
func metalAddressPolicy(networks string, withEmulator bool) (talos.AddressPolicy, error) {
	nets, err := talos.ParseNetworks(networks)
	if err != nil {
		return talos.AddressPolicy{}, fmt.Errorf("--metal-networks: %w", err)
	}
	p := talos.AddressPolicy{Networks: nets, AllowLoopback: withEmulator}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return talos.AddressPolicy{}, fmt.Errorf("listing this host's addresses for --metal-networks: %w", err)
	}
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if ip, ok := netip.AddrFromSlice(n.IP); ok && !ip.Unmap().IsLoopback() {
			p.Own = append(p.Own, ip.Unmap())
		}
	}
	return p, nil
}
