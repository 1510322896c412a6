// Package drain cordons and drains a Kubernetes Node before RezusCloud
// disrupts its machine (a reboot, a reset, a destroy), as `kubectl drain`
// and `talosctl upgrade` do: mark the Node unschedulable, evict every pod
// through the Eviction API so that PodDisruptionBudgets are honoured (a
// DaemonSet's pods and mirror pods stay: they belong to the node), each pod
// with its own grace period, and wait until they are gone; after the
// machine is back, wait for the Node to be Ready and uncordon it.
//
// Which pods to evict and what an eviction's answer means are pure
// functions (plan.go), table-tested; Drainer carries them out with a
// client-go clientset. Every call is idempotent, so a saga step that was
// cut short (kill -9) runs it again from the start. kube/kubeclient gives
// the clientset of a tenant; the sagas (controllers/upgrade, controllers/apply) import
// this package.
package drain
