// Package domain holds RezusCloud's resource model: the kinds (Tenant, NodeGroup,
// Machine, ConfigPatch, Provider) with their metadata, spec and status, their
// validation and defaults, the commands the API accepts, the events they turn
// into, and the pure functions Decide(state, command) -> events and
// Evolve(state, event) -> state.
//
// It is pure on purpose: no I/O, no NATS, no HTTP. Everything else in the
// repository imports it; it imports only the standard library and the small
// pure libraries DESIGN.md names (uuid, apimachinery's labels and validation,
// sigs.k8s.io/json, Masterminds semver). The CLI shares these types, so keep
// them light.
package domain
