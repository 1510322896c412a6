package talos

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
)

// AddressPolicy says which hosts the server may dial as metal machines.
// Their addresses are written by tenant editors (a metal group's listed
// machines, a registered Machine's spec.address), so they are untrusted
// input: without a rule an editor makes the server connect to any host of
// its choosing, such as the cloud metadata service or a service on the
// server's own loopback (issue 42). The port is never the editor's: it is
// always the Talos API's (APIPort).
//
// The zero value is the default rule: any unicast address except loopback,
// link-local (the cloud metadata service 169.254.169.254 is there), the
// other well-known cloud metadata addresses, unspecified, multicast and
// broadcast addresses. Networks, when set, replaces it: only addresses
// inside them (loopback too, when listed).
type AddressPolicy struct {
	// Networks, when not empty, are the only networks metal machines may be
	// on (serve --metal-networks).
	Networks []netip.Prefix
	// AllowLoopback lets the default rule take loopback addresses: the
	// in-process emulator's nodes are there (serve --with-emulator).
	AllowLoopback bool
	// Own are this server's own (non-loopback) addresses: refused whatever
	// the rule, the server is never its own metal machine.
	Own []netip.Addr
}

// cloudMetadata are the metadata services of clouds outside link-local
// (AWS's IPv6 one, Alibaba's, Azure's wire server).
var cloudMetadata = []netip.Addr{
	netip.MustParseAddr("fd00:ec2::254"),
	netip.MustParseAddr("100.100.100.200"),
	netip.MustParseAddr("168.63.129.16"),
}

// thisNetwork is 0.0.0.0/8, "this host on this network": never a machine.
var thisNetwork = netip.MustParsePrefix("0.0.0.0/8")

// ParseNetworks reads a comma-separated list of CIDR prefixes (or single
// addresses) such as "10.20.0.0/16,192.168.7.0/24".
func ParseNetworks(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if !strings.Contains(part, "/") {
			a, err := netip.ParseAddr(part)
			if err != nil {
				return nil, fmt.Errorf("%q is neither a CIDR prefix nor an IP address", part)
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(part)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR prefix: %v", part, err)
		}
		out = append(out, netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-ipv4MappedBits(p)).Masked())
	}
	return out, nil
}

// ipv4MappedBits is how many bits of an IPv4-mapped prefix (::ffff:a.b.c.d/n)
// are the mapping's.
func ipv4MappedBits(p netip.Prefix) int {
	if p.Addr().Is4In6() {
		return 96
	}
	return 0
}

// Check refuses an IP address the rule does not allow, saying why.
func (p AddressPolicy) Check(ip netip.Addr) error {
	ip = ip.Unmap().WithZone("")
	for _, own := range p.Own {
		if own.Unmap().WithZone("") == ip {
			return fmt.Errorf("%s is this server's own address", ip)
		}
	}
	if len(p.Networks) > 0 {
		for _, n := range p.Networks {
			if n.Contains(ip) {
				return nil
			}
		}
		return fmt.Errorf("%s is outside the networks metal machines may be on (%s)", ip, p.networks())
	}
	switch {
	case !ip.IsValid():
		return fmt.Errorf("no address")
	case ip.IsLoopback():
		if p.AllowLoopback {
			return nil
		}
		return fmt.Errorf("%s is a loopback address (the server's own services)", ip)
	case ip.IsLinkLocalUnicast():
		return fmt.Errorf("%s is a link-local address (the cloud metadata service is there)", ip)
	case ip.IsUnspecified() || thisNetwork.Contains(ip):
		return fmt.Errorf("%s is an unspecified address", ip)
	case ip.IsMulticast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() || ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return fmt.Errorf("%s is a multicast or broadcast address", ip)
	}
	for _, m := range cloudMetadata {
		if ip == m {
			return fmt.Errorf("%s is a cloud metadata service", ip)
		}
	}
	return nil
}

func (p AddressPolicy) networks() string {
	s := make([]string, len(p.Networks))
	for i, n := range p.Networks {
		s[i] = n.String()
	}
	return strings.Join(s, ", ")
}

// CheckAddress checks an address as written (an IP address or a DNS name):
// an IP address against the rule; a name passes here, its resolved
// addresses are checked where it is dialled (Control).
func (p AddressPolicy) CheckAddress(address string) error {
	ip, err := netip.ParseAddr(strings.TrimSpace(address))
	if err != nil {
		return nil
	}
	return p.Check(ip)
}

// Control is a net.Dialer Control function that refuses a connection to an
// address the rule does not allow: it sees the address actually dialled,
// after name resolution, so a DNS name pointing at a refused address (or
// rebinding to one) is refused too.
func (p AddressPolicy) Control(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		host = address
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("dialling %s: not an IP address", address)
	}
	if err := p.Check(ip); err != nil {
		return fmt.Errorf("refusing to dial %s: %w", address, err)
	}
	return nil
}
