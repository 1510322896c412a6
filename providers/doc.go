// Package providers is the provider registry: for each Provider.spec.type,
// how its configs are validated, the node-group fields the web UI's forms
// offer, and, for the types built with OpenTofu, the `.tf.json` it
// generates and how the resulting state projects into Machines. It is pure
// (domain and the HCL libraries only), so the API (handlers), the web UI and
// the apply worker (controllers/apply) share one set of rules: a config the worker
// would refuse is refused when it is written, with the same causes.
//
// Where each part is:
//
//   - The registry (registry.go): ProviderType and the map of every type by
//     the names domain.ProviderTypes() gives. One file per type declares its
//     ProviderType: emulated.go, openstack.go, oci.go, module.go (a user's
//     OpenTofu module), metal.go (applied through the Talos API by the apply worker,
//     so no generator).
//   - Write-time checks (validate.go) and form fields (fields.go), read from
//     the registry.
//   - The generator (generate.go) with its self-check (generate_check.go) and
//     the bounds on HCL a module may hold (hcl_bounds.go); module_check.go
//     checks a module provider's files against the module contract, and
//     module_guard.go keeps provisioners out unless --allow-module-exec.
//   - The state projection (project.go): TF state into observed machines,
//     by each type's MachineMapping or a module's machines output; and the
//     resource instances a remediation replaces (replace.go).
//
// The built-in `emulated` type is itself a module (modules/emulated,
// embedded). Who imports the package: handlers, webui, tofu and
// controllers/apply.
//
// Adding a provider type: a file declaring its ProviderType (config
// structs with their validation, GroupConfig, generator, MachineMapping),
// its line in registry, its name in domain (ProviderTypes), and a test
// beside it; docs/architecture.md walks through it.
package providers
