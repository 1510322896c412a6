package apply

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/rezuscloud/rezuscloud/domain"
)

// A metal run gives a machine in maintenance mode the tenant's PKI, so the
// address it dials decides whose machine it takes (issue 42, finding 5).
// The API refuses an address another tenant holds when it is written; a
// run checks again right before it dials, because a write can race
// another tenant's registration, and because a DNS name is only known by
// what it resolves to now. A run dials the very address it checked.

// Resolver finds the addresses of a DNS name; net.DefaultResolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

func (w *Worker) resolver() Resolver {
	if w.cfg.Resolver != nil {
		return w.cfg.Resolver
	}
	return net.DefaultResolver
}

// metalDialAddress is the address a metal machine of tenant at address may
// be dialled on: address itself when it is an IP address, else the first
// address its name resolves to. It refuses an address, or any address the
// name resolves to, that another tenant holds (a Machine or a node group's
// listed machine) or that the metal address rule refuses.
func (w *Worker) metalDialAddress(ctx context.Context, tenant, address string) (string, error) {
	if err := w.checkMetalIP(tenant, address, address); err != nil {
		return "", err
	}
	if _, err := netip.ParseAddr(address); err == nil {
		return address, nil
	}
	ips, err := w.resolver().LookupNetIP(ctx, "ip", address)
	if err != nil {
		return "", fmt.Errorf("resolving %s: %w", address, err)
	}
	if len(ips) == 0 {
		return "", fmt.Errorf("resolving %s: no address", address)
	}
	for _, ip := range ips {
		if err := w.checkMetalIP(tenant, address, ip.Unmap().String()); err != nil {
			return "", err
		}
	}
	return ips[0].Unmap().String(), nil
}

// checkMetalIP checks one of address's forms (itself, or an IP address it
// resolves to): not held by another tenant, and allowed by the rule when it
// is an IP address.
func (w *Worker) checkMetalIP(tenant, address, form string) error {
	if c, ok := domain.ForeignClaim(tenant, w.cfg.Cache.AddressClaims(form)); ok {
		what := address
		if form != address {
			what = address + " (" + form + ")"
		}
		return fmt.Errorf("refusing to dial %s: %s", what, domain.AddressConflictMessage(form, tenant, c))
	}
	if ip, err := netip.ParseAddr(form); err == nil {
		if err := w.cfg.MetalAddresses.Check(ip); err != nil {
			return fmt.Errorf("refusing to dial %s: %w (serve --metal-networks)", address, err)
		}
	}
	return nil
}
