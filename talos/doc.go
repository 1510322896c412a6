// Package talos owns everything RezusCloud derives from a tenant's Talos PKI:
// the per-tenant secrets bundle (PKI), machine-config rendering with the
// tenant's ConfigPatches, and the talosconfig and kubeconfig credentials.
//
// It builds on github.com/siderolabs/talos/pkg/machinery and reads objects
// from the projections cache; it imports domain, eventstore and projections
// only. The HTTP handlers, the apply worker and the upgrade saga import it.
// The Talos node emulator lives in talos/emulator.
package talos
