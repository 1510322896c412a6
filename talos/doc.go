// Package talos owns everything RezusCloud derives from a tenant's Talos PKI:
// the per-tenant secrets bundle (PKI), machine-config rendering with the
// tenant's ConfigPatches, and the talosconfig and kubeconfig credentials;
// and what is done with them through the Talos API: the on-demand health
// probes (HealthService) and the rolling upgrade saga (UpgradeSaga) among them.
//
// It builds on github.com/siderolabs/talos/pkg/machinery and reads objects
// from the projections cache; it imports domain, eventstore and projections
// only. The HTTP handlers and the apply worker import it.
// The Talos node emulator lives in talos/emulator.
package talos
