// Package health answers how a tenant's cluster is: on-demand probes of
// every machine through the real Talos API (mTLS, cached for a TTL, no
// background scrapers), assessed into a TenantHealth (assess.go, pure), and
// what changed written back to the Machine, NodeGroup and Tenant statuses
// (status.go decides, writeback.go writes).
//
// It imports domain, eventstore and projections. Only the server wiring
// imports it: the HTTP handlers and the web UI reach it through the small
// interfaces they declare (handlers.TenantHealthProber).
package health
