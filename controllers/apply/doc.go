// Package apply is the apply worker: the controller that builds tenants'
// infrastructure. Where each part is:
//
//   - The controller (worker.go, queue.go, config.go): a durable consumer of
//     tenant-affecting events, debounced, serial per tenant and parallel
//     across tenants, on internal/controller.
//   - A run (run.go, decision.go, inputs.go, execution.go, status.go,
//     lifecycle.go): what a run must do is a pure decision; a run plans and
//     applies with the tofu engine (package tofu) in the tenant's work dir,
//     records an Apply, and runs `tofu destroy` before a deleted tenant's
//     finalizer goes. What it generates is the provider registry's
//     (package providers); inputs.go gathers a run's GenerateInput from the
//     read model, and machines.go records the projected machines.
//   - Drift (drift.go, plan_change.go): a run queued by the resync alone
//     plans instead of applying and records status.drift. It stays a mode
//     of the apply run rather than a controller of its own: a plan needs the
//     tenant's work dir and state lock, which the apply worker holds
//     serially per tenant.
//   - The metal path (metal.go, metal_guard.go): metal groups apply configs
//     straight through the Talos API, without tofu, inside the worker's run.
//   - Scale-down (scaledown.go, drain.go): the machines a smaller group
//     gives up, chosen by domain's pure decision, drained through the
//     Kubernetes API (kube/drain) and their Nodes removed.
//   - Remediation (remediate.go): the machines the remediation controller
//     (controllers/remediation) decided to replace are taken out of the
//     cluster as in a scale-down and replaced by `tofu apply -replace`.
//
// It imports the libraries beneath the controllers/ wing (domain,
// eventstore, projections, internal/controller, talos, kube, tofu,
// providers); handlers serve its logs and cancel its runs through the
// interfaces they declare, and cmd/rezuscloud wires it.
package apply
