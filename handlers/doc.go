// Package handlers is RezusCloud's HTTP surface on echo: the Kubernetes-style
// REST API over the event store and projections, watches as Server-Sent
// Events, errors as Kubernetes Status bodies, authentication, health, version
// and Prometheus metrics. cmd/rezuscloud wires it; nothing imports it but the
// web UI.
package handlers
