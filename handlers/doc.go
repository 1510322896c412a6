// Package handlers is RezusCloud's HTTP surface on echo: the Kubernetes-style
// REST API over the event store and projections, watches as Server-Sent
// Events, the Terraform HTTP state backend, health, version and Prometheus
// metrics. Handlers and middleware return errors; echo's HTTPErrorHandler
// (errorHandler in status.go) is the one place an error becomes a Kubernetes
// Status body and code. Who the caller is comes from the identity package;
// what their role allows is rbac.go's. cmd/rezuscloud wires it; nothing
// imports it but the web UI.
package handlers
