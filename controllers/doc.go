// Package controllers is the wing where every long-running controller of
// RezusCloud lives, one package each, built on internal/controller's
// builder so a controller file holds only its decisions and effects:
//
//   - apply: the apply worker (tofu plans and applies, scale-down, metal,
//     remediation's replacement, drift checks)
//   - modulecheck: `tofu validate` of module providers
//   - upgrade: the rolling Talos and Kubernetes upgrade saga
//   - configsync: day-2 machine configs through the Talos API
//   - backup: etcd backups and restores
//   - remediation: replaces unhealthy machines
//   - rollout: one change across many tenants in waves
//
// A controller imports the libraries beneath the wing (talos, kube, tofu,
// providers, projections, eventstore, domain) and never another
// controller: they ask each other through events. domain/imports_test.go
// enforces it.
package controllers
