// Package talos is RezusCloud's Talos API client: everything derived from a
// tenant's Talos PKI and what is said to nodes through the Talos API.
//
// Where each part is:
//
//   - PKI and credentials: the per-tenant secrets bundle (pki.go,
//     bundle.go), talosconfigs by role, per-user Kubernetes certificates and
//     exec kubeconfigs, the controller certificate (credentials.go).
//   - Rendering: machine configs with the tenant's ConfigPatches (render.go,
//     patch.go, diff.go), the day-2 render inputs (desired.go), secrets left
//     out for readers (redact.go), what a write would do to machines
//     (impact.go), the version rules of runs and the API (versions.go); the
//     Service (service.go) renders from the read model.
//   - The node API: mTLS calls (nodeapi.go), etcd with snapshots and
//     recovery (nodeapi_etcd.go, etcd_snapshot.go), COSI reads (cosi.go),
//     readiness (nodeready.go), running configs for drift (configdrift.go),
//     logs (logs.go), and which metal addresses may be dialled
//     (address_policy.go).
//   - Config bookkeeping every config writer uses: the config-hash
//     annotation and the ConfigApplied condition (record.go,
//     record_pending.go), and a tenant's config progress
//     (configs_pending.go).
//
// Subpackages: talos/health (on-demand probes of every machine, their pure
// assessment and the write-back to statuses), talos/etcdsnapshot (etcd's
// snapshot format, a leaf the emulator and the backups share) and
// talos/factory (the Image Factory client).
//
// It builds on github.com/siderolabs/talos/pkg/machinery and imports domain,
// eventstore and projections only. The controllers (controllers/...), the
// HTTP handlers and kube/kubeclient import it; what is done with the Talos
// API over time (upgrades, day-2 configs, backups) lives in controllers/, and
// the node emulator in emulator/.
package talos
