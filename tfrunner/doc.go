// Package tfrunner builds tenants' infrastructure. Its one long-running job
// is the apply worker; the rest is what the worker runs and what the API
// asks of it at write time. Where each part is:
//
//   - The apply worker (worker.go, queue.go, run.go, execution.go,
//     decision.go, lifecycle.go, status.go): a durable consumer of
//     tenant-affecting events, debounced, serial per tenant and parallel
//     across tenants; each run plans and applies with tofu, records an
//     Apply, and runs `tofu destroy` before a deleted tenant's finalizer
//     goes. Its logs: logs.go.
//   - The tofu engine (tofu.go, sandbox*.go, procattr_*.go, encryption.go,
//     statecreds.go, state_decrypt.go, tofuui.go): one work dir per tenant, a
//     clean environment, RezusCloud's HTTP state backend reached with
//     per-apply credentials, state encryption, and the mount-namespace
//     sandbox that keeps module providers' code from the server's files.
//   - The generators (generate.go, generate_check.go, hcl_bounds.go,
//     inputs.go, providers_types.go, providers_emulated.go,
//     providers_openstack.go, providers_oci.go, providers_module.go): a
//     tenant's `.tf.json`, one file per provider type; validate.go and
//     provider_fields.go are the same checks and fields for the API.
//   - The state projection (project.go, machines.go): TF state into
//     Machine objects.
//   - Module providers (module.go checks a module's files when a Provider
//     is written; module_validate.go is the second controller of this
//     package, running `tofu validate` on each module after a change).
//   - Bare metal (metal.go): metal groups apply configs straight through
//     the Talos API, without tofu, inside the worker's run.
//   - Scale-down (scaledown.go, drain.go): the machines a smaller group
//     gives up, chosen by domain's pure decision, drained through the
//     Kubernetes API and their Nodes removed.
//
// It imports domain, eventstore, projections, talos, internal/controller
// and internal/proctree; handlers serve its logs and cancel its runs through
// the interfaces they declare.
package tfrunner
