// Package upgrade is the rolling upgrade saga: it turns changes of a
// tenant's or node group's Talos or Kubernetes version (and of a group's
// schematic) into Upgrade runs and carries each out machine by machine
// through the Talos API (control planes first, drained, health-gated,
// rolled back on failure), recording every step as an event so that a run
// resumes after a crash on whichever replica leads next.
//
// Where each part is: the controller on internal/controller's builder
// (saga.go, controller.go); Upgrades made from version changes
// (trigger.go) and cancels (cancel.go); a run planned (run_plan.go) and
// carried out (run.go, run_carryout.go, maintenance.go); one machine's
// named stages (step.go; kubernetes.go for Kubernetes runs), each wait
// recorded on the step with its deadline (wait.go), the node's drain
// (drain.go) and its Talos calls (node.go, install.go); re-images
// (reimage.go, driftreimage.go) and the versions a Succeeded run writes
// back (writeback.go). What a step does next is a pure, table-tested
// decision (plan.go), so every step is safe to run twice.
// docs/architecture.md walks through adding a stage.
//
// It imports domain, eventstore, projections, internal/controller, talos
// and kube/drain; the server wiring, the apply worker's gate (through an
// interface of its own) and the HTTP handlers (cancel) reach it.
package upgrade
