// Package upgrade is the rolling Talos upgrade saga: it turns changes of a
// tenant's or node group's talosVersion into Upgrade runs and carries each
// out machine by machine through the Talos API (control planes first,
// health-gated, rolled back on failure), recording every step as an event so
// that a run resumes after a crash on whichever replica leads next.
//
// The decisions are pure and table-tested (plan.go); the saga (saga.go,
// controller.go) runs on the controller runtime of internal/controller; a
// run's stages are in run.go and step.go, the Talos calls in node.go. It
// imports domain, eventstore, projections and internal/controller; the server
// wiring and the HTTP handlers (cancel) import it.
package upgrade
