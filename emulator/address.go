package emulator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/rezuscloud/rezuscloud/domain"
)

// kindAddress names address reservations in errors.
const kindAddress = "EmulatedAddress"

// errNoLoopback explains why reservations need loopback addressing.
const errNoLoopback = "address reservations need loopback addressing (a loopback IP per node), " +
	"and this emulator gives each node a port on one IP instead"

// AddressSpec is what ReserveAddress needs.
type AddressSpec struct {
	// Name identifies the reservation, unique in the emulator (a DNS-1123 label).
	Name string `json:"name"`
}

// Address is a reserved loopback IP a node can boot on (NodeSpec.Address),
// like a cloud's reserved or floating IP: known before the node exists, so a
// control plane's endpoint can be written into the configs that boot it.
type Address struct {
	Name string `json:"name"`
	// Address is the IP; a node on it serves the Talos API on Config.Port.
	Address string `json:"address"`
	// Node is the node booted on the address, if any.
	Node string `json:"node,omitempty"`
}

// reservation is an Address and, while no node is on it, the listener that
// keeps the address bound, so no other node or process takes it meanwhile.
// Guarded by Emulator.mu.
type reservation struct {
	Address
	lis net.Listener
}

// ReserveAddress reserves a free loopback IP. It is refused in ports mode,
// where nodes cannot have an address of their own.
func (e *Emulator) ReserveAddress(ctx context.Context, spec AddressSpec) (Address, error) {
	select {
	case <-e.ready:
	case <-ctx.Done():
		return Address{}, ctx.Err()
	}
	if causes := domain.ValidateName(spec.Name, "name"); causes != nil {
		return Address{}, domain.NewInvalid(kindAddress, spec.Name, causes)
	}
	e.mu.Lock()
	if !e.loopback {
		e.mu.Unlock()
		return Address{}, domain.NewForbidden(kindAddress, spec.Name, errNoLoopback)
	}
	if _, ok := e.addresses[spec.Name]; ok {
		e.mu.Unlock()
		return Address{}, domain.NewAlreadyExists(kindAddress, spec.Name)
	}
	lis, err := e.listenLoopbackLocked()
	if err != nil {
		e.mu.Unlock()
		return Address{}, fmt.Errorf("reserving address %s: %w", spec.Name, err)
	}
	host, _, _ := net.SplitHostPort(lis.Addr().String())
	r := &reservation{Address: Address{Name: spec.Name, Address: host}, lis: lis}
	e.addresses[spec.Name] = r
	a := r.Address
	e.mu.Unlock()
	if err := e.persistAddress(a); err != nil {
		e.cfg.Logf("persisting address %s: %v", a.Name, err)
	}
	return a, nil
}

// GetAddress returns one reservation.
func (e *Emulator) GetAddress(name string) (Address, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.addresses[name]
	if !ok {
		return Address{}, domain.NewNotFound(kindAddress, name)
	}
	return r.Address, nil
}

// ListAddresses returns every reservation, sorted by name.
func (e *Emulator) ListAddresses() []Address {
	e.mu.Lock()
	out := make([]Address, 0, len(e.addresses))
	for _, r := range e.addresses {
		out = append(out, r.Address)
	}
	e.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ReleaseAddress gives a reservation up. One a node is booted on is refused
// with a Conflict: delete the node first, as a cloud keeps an attached IP.
func (e *Emulator) ReleaseAddress(name string) error {
	e.mu.Lock()
	r, ok := e.addresses[name]
	if !ok {
		e.mu.Unlock()
		return domain.NewNotFound(kindAddress, name)
	}
	if r.Node != "" {
		e.mu.Unlock()
		return domain.NewConflict(kindAddress, name, fmt.Sprintf("address %s is in use by node %q", r.Address.Address, r.Node))
	}
	delete(e.addresses, name)
	lis := r.lis
	r.lis = nil
	e.mu.Unlock()
	if lis != nil {
		lis.Close()
	}
	if e.cfg.StateDir != "" {
		if err := os.Remove(filepath.Join(e.cfg.StateDir, "addresses", name+".json")); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("releasing address %s: %w", name, err)
		}
	}
	return nil
}

// reservedListenerLocked checks that a new node may boot on ip and hands it
// the reservation's listener (binding the address again if the reservation
// holds none). Caller holds e.mu.
func (e *Emulator) reservedListenerLocked(node, ip string) (net.Listener, error) {
	invalid := func(msg string) error {
		return domain.NewInvalid(kindNode, node, []domain.Cause{{Field: "address", Type: domain.CauseInvalid, Message: msg}})
	}
	if !e.loopback {
		return nil, invalid(errNoLoopback)
	}
	r := e.reservationLocked(ip)
	if r == nil {
		return nil, invalid(fmt.Sprintf("%s is not a reserved address (reserve one with POST /v1/addresses)", ip))
	}
	if r.Node != "" {
		return nil, domain.NewConflict(kindNode, node, fmt.Sprintf("address %s (reservation %q) is in use by node %q", ip, r.Name, r.Node))
	}
	lis := r.lis
	if lis == nil {
		var err error
		if lis, err = net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(e.cfg.Port))); err != nil {
			return nil, fmt.Errorf("binding reserved address %s: %w", ip, err)
		}
	}
	r.lis, r.Node = nil, node
	return lis, nil
}

// reservationLocked returns the reservation of ip, if any. Caller holds e.mu.
func (e *Emulator) reservationLocked(ip string) *reservation {
	for _, r := range e.addresses {
		if r.Address.Address == ip {
			return r
		}
	}
	return nil
}

// releaseNodeAddress takes a reserved address back from a deleted node and
// keeps it bound for the next one.
func (e *Emulator) releaseNodeAddress(node, addr string) {
	ip, _, _ := net.SplitHostPort(addr)
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.reservationLocked(ip)
	if r == nil || r.Node != node {
		return
	}
	r.Node = ""
	lis, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(e.cfg.Port)))
	if err != nil {
		// The next node on it binds it again (or says why it cannot).
		e.cfg.Logf("holding reserved address %s: %v", ip, err)
		return
	}
	r.lis = lis
}

// listenLoopbackLocked binds the first free 127.0.N.M:Port that no node and
// no reservation has, skipping addresses another process holds. Caller holds e.mu.
func (e *Emulator) listenLoopbackLocked() (net.Listener, error) {
	used := map[string]bool{}
	for _, n := range e.nodes {
		n.mu.Lock()
		host, _, _ := net.SplitHostPort(n.st.Address)
		n.mu.Unlock()
		used[host] = true
	}
	for _, r := range e.addresses {
		used[r.Address.Address] = true
	}
	var lastErr error
	for n := range loopbackSlots {
		i := (e.scanFrom + n) % loopbackSlots
		ip := net.IPv4(127, 0, byte(1+i/254), byte(1+i%254)).String()
		if used[ip] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(e.cfg.Port)))
		if err == nil {
			return l, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("no free loopback address: %w", lastErr)
}

// loopbackSlots is how many loopback IPs nodes can get: 127.0.1-255.1-254.
const loopbackSlots = 255 * 254

// loopbackScanStart is where an emulator starts looking for free loopback
// IPs. Emulators on one machine (a server's, `rezusctl boot`, tests running in
// parallel) that all scanned from 127.0.1.1 would hand an IP one of them frees
// while it restarts to another at once, and its restored node could not bind
// it again. So each scans from its own place: derived from the state dir (the
// same data dir keeps to the same neighbourhood across restarts), or random
// for an emulator that keeps no state.
func loopbackScanStart(stateDir string) int {
	if stateDir == "" {
		return rand.IntN(loopbackSlots)
	}
	if abs, err := filepath.Abs(stateDir); err == nil {
		stateDir = abs
	}
	h := fnv.New32a()
	h.Write([]byte(stateDir))
	return int(h.Sum32() % loopbackSlots)
}

// persistAddress writes a reservation to the state dir.
func (e *Emulator) persistAddress(a Address) error {
	if e.cfg.StateDir == "" {
		return nil
	}
	a.Node = "" // derived from the nodes on restore
	b, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Join(e.cfg.StateDir, "addresses")
	persistMu.Lock()
	defer persistMu.Unlock()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, a.Name+".json"), b)
}

// restoreAddressesLocked brings the persisted reservations back and binds
// them again; restore then hands each to the node booted on it. A
// reservation whose address another process took stays (its node reports
// why it cannot boot). Caller holds e.mu.
func (e *Emulator) restoreAddressesLocked() error {
	dir := filepath.Join(e.cfg.StateDir, "addresses")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading emulator addresses: %w", err)
	}
	for _, ent := range entries {
		if !strings.HasSuffix(ent.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, ent.Name()))
		if err != nil {
			return fmt.Errorf("reading emulator addresses: %w", err)
		}
		var a Address
		if err := json.Unmarshal(b, &a); err != nil {
			return fmt.Errorf("reading %s: %w", ent.Name(), err)
		}
		r := &reservation{Address: a}
		if !e.loopback {
			e.cfg.Logf("address %s (%s) kept but unusable: %s", a.Name, a.Address, errNoLoopback)
		} else if r.lis, err = net.Listen("tcp", net.JoinHostPort(a.Address, strconv.Itoa(e.cfg.Port))); err != nil {
			e.cfg.Logf("restoring address %s: %v", a.Name, err)
		}
		e.addresses[a.Name] = r
	}
	return nil
}

// adoptReservationLocked marks the reservation of a restored node's address
// as used by it and returns the listener it held, if any. Caller holds e.mu.
func (e *Emulator) adoptReservationLocked(node, addr string) net.Listener {
	ip, _, _ := net.SplitHostPort(addr)
	r := e.reservationLocked(ip)
	if r == nil {
		return nil
	}
	lis := r.lis
	r.lis, r.Node = nil, node
	return lis
}

// closeReservations unbinds every reservation's held address when the emulator stops.
func (e *Emulator) closeReservations() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range e.addresses {
		if r.lis != nil {
			r.lis.Close()
			r.lis = nil
		}
	}
}
