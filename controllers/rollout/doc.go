// Package rollout carries out Rollouts: one change (a Talos version, a
// Kubernetes version or a config patch) rolled across many tenants in waves.
// Its controller fixes the tenants when a rollout starts, writes each
// tenant's own Upgrade or ConfigPatch when its wave reaches it (so the
// tenant's maintenance windows, drains and checks apply as to a change made
// by hand), watches them and the tenants' health, and halts at the first
// failure. The decision is domain.DecideRollout (pure, table-tested); this
// package observes and writes.
//
// Every write is idempotent and named by the rollout and the attempt (an
// Upgrade "<rollout>" or "<rollout>-<attempt>"), and the status records a
// tenant Running before its change is written, so a replica killed at any
// point resumes where it was and never starts a tenant's change twice.
//
// It imports domain, eventstore, projections and internal/controller; the
// health prober and the config progress come in through interfaces
// (talos/health.Service, talos.Service).
package rollout
