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
//   - What the worker generates is tfrunner/providers' (the provider
//     registry: per type validation, form fields, `.tf.json` generator and
//     state projection); inputs.go gathers a run's GenerateInput from the
//     read model, and machines.go records the projected machines.
//   - The module validator (module_validate.go): the second controller of
//     this package, running `tofu validate` on each module provider after a
//     change and recording the Provider's Validated condition; a run
//     refuses a module that failed it (checkModules).
//   - The metal path (metal.go): metal groups apply configs straight
//     through the Talos API, without tofu, inside the worker's run (which
//     machines a metal group wants is providers.MetalTargets).
//   - Scale-down (scaledown.go, drain.go): the machines a smaller group
//     gives up, chosen by domain's pure decision, drained through the
//     Kubernetes API and their Nodes removed.
//   - Remediation (remediate.go): the machines the remediation controller
//     (talos/remediation) decided to replace are taken out of the cluster
//     as in a scale-down and replaced by `tofu apply -replace` in the run.
//
// It imports domain, eventstore, projections, talos, internal/controller,
// internal/proctree and tfrunner/providers; handlers serve its logs and
// cancel its runs through the interfaces they declare.
package tfrunner
