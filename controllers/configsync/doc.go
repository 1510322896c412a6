// Package configsync is the day-2 config controller: from the moment a
// machine holds its day-0 config (user data, or the metal path's
// maintenance-mode apply), the management plane owns that machine's config
// through the Talos API, whatever provider built it. Whenever a machine's
// rendered config (talos.Desired.Config) differs from the one it holds (its
// rezuscloud.io/config-hash annotation), the controller applies it with
// ApplyConfiguration mode AUTO over mTLS — control-plane groups first, one
// machine at a time, then worker groups by their updateStrategy.maxParallelism
// — and records the outcome on the Machine (talos.ConfigRecorder): the hash,
// status.configUpToDate and the ConfigApplied condition, whose reason says
// whether Talos applied it in place or with a reboot.
//
// It runs on the controller runtime (internal/controller): keys are tenants,
// queued by the events that can change a tenant's rendered configs; a tenant
// with an Upgrade in flight is held back until the upgrade ends. The decisions
// (what to do with a machine, in which order) are pure and table-tested
// (plan.go); reconcile.go performs them. cmd/rezuscloud wires it.
package configsync
