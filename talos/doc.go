// Package talos owns everything RezusCloud derives from a tenant's Talos PKI:
// the per-tenant secrets bundle (PKI), machine-config rendering with the
// tenant's ConfigPatches, and the talosconfig and kubeconfig credentials;
// and the node logs read through the Talos API.
//
// It builds on github.com/siderolabs/talos/pkg/machinery and reads objects
// from the projections cache; it imports domain, eventstore and projections
// only. The HTTP handlers and the apply worker import it. What is done with
// the Talos API at scale lives in subpackages: the on-demand health probes in
// talos/health, the rolling upgrade saga in controllers/upgrade, and the Talos node
// emulator in emulator.
package talos
