package kubelet

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// maxScan bounds the search for a free address in a large (IPv6) prefix.
const maxScan = 1 << 16

// ipam hands out pod IPs from the node's pod CIDR, one per pod UID, like a
// host-local CNI plugin: the network address, the first host (the bridge's
// gateway) and the IPv4 broadcast address are never handed out.
type ipam struct {
	mu     sync.Mutex
	prefix netip.Prefix
	next   netip.Addr // where the search for a free address starts
	byUID  map[types.UID]netip.Addr
	used   map[netip.Addr]types.UID
}

func newIPAM(prefix netip.Prefix) *ipam {
	a := &ipam{byUID: map[types.UID]netip.Addr{}, used: map[netip.Addr]types.UID{}}
	a.setPrefix(prefix)
	return a
}

// fallbackPodCIDR is a node's pod CIDR until the controller manager gives it
// spec.podCIDR (or when none allocates CIDRs): a /24 of 10.244.0.0/16 chosen
// by the node's name, so nodes rarely share one.
func fallbackPodCIDR(node string) netip.Prefix {
	h := fnv.New32a()
	_, _ = h.Write([]byte(node))
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(h.Sum32()), 0}), 24)
}

// setPrefix makes p the range of new addresses; addresses handed out stay
// with their pods.
func (a *ipam) setPrefix(p netip.Prefix) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p = p.Masked()
	if p == a.prefix {
		return
	}
	a.prefix = p
	a.next = p.Addr().Next().Next() // past the network address and the gateway
}

// reserve records that pod uid has addr (given before a restart), so it is
// not handed to another pod.
func (a *ipam) reserve(uid types.UID, addr netip.Addr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, taken := a.used[addr]; taken {
		return
	}
	a.byUID[uid] = addr
	a.used[addr] = uid
}

// allocate returns pod uid's address, handing out a free one the first time.
func (a *ipam) allocate(uid types.UID) (netip.Addr, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if addr, ok := a.byUID[uid]; ok {
		return addr, nil
	}
	addr := a.next
	for range maxScan {
		if !a.usable(addr) {
			addr = a.prefix.Addr().Next().Next()
		}
		if _, taken := a.used[addr]; !taken && a.usable(addr) {
			a.byUID[uid] = addr
			a.used[addr] = uid
			a.next = addr.Next()
			return addr, nil
		}
		addr = addr.Next()
	}
	return netip.Addr{}, fmt.Errorf("no free pod IP in %s", a.prefix)
}

// usable reports whether addr may be handed out in the current prefix.
func (a *ipam) usable(addr netip.Addr) bool {
	if !addr.IsValid() || !a.prefix.Contains(addr) || addr == a.prefix.Addr() || addr == a.prefix.Addr().Next() {
		return false
	}
	if addr.Is4() {
		// The broadcast address is the last of the prefix: its successor is outside.
		if next := addr.Next(); !next.IsValid() || !a.prefix.Contains(next) {
			return false
		}
	}
	return true
}

// release frees pod uid's address.
func (a *ipam) release(uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if addr, ok := a.byUID[uid]; ok {
		delete(a.byUID, uid)
		delete(a.used, addr)
	}
}
