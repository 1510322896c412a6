// Package backup is the etcd backup controller: on the controller runtime
// (one replica at a time through a lease, a durable consumer, a per-tenant
// queue), it takes a tenant's pending EtcdBackups — a snapshot streamed
// through the Talos API from a healthy control plane (not the etcd leader
// when another member is healthy) straight into the rezus-etcd-backups
// object store, sealed with the tenant's key as it streams — runs the
// tenant's backup schedule and retention (spec.etcdBackup), and runs
// Restores (upload to the first control plane, bootstrap with recover,
// wait for the others to join, check the revision). Keys are tenants, so a
// tenant never has two backups, or a backup and a restore, at once.
//
// What to do is decided by pure functions (plan.go), each table-tested;
// the controller performs their Talos and store effects. cmd/rezuscloud
// starts it; it imports domain, eventstore, projections, talos and
// internal/controller.
package backup
