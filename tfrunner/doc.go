// Package tfrunner builds tenants' infrastructure with OpenTofu: the provider
// generators that write a tenant's `.tf.json`, the tofu execution engine (one
// work dir per tenant, a clean environment, RezusCloud's HTTP state backend
// reached with per-apply credentials), the apply worker (a durable consumer of
// tenant-affecting events, debounced, serial per tenant and parallel across
// tenants), the apply logs, and the projection of TF state into Machine
// objects.
//
// It imports domain, eventstore, projections and talos; handlers serve its
// logs and cancel its runs through the interfaces they declare.
package tfrunner
