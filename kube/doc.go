// Package kube is the room of RezusCloud's use of managed clusters'
// Kubernetes API: kube/kubeclient gives one client-go clientset per tenant
// on a short-lived controller certificate and keeps the ClusterRoleBindings
// of per-user credentials; kube/drain cordons, drains (PDBs honoured) and
// uncordons Nodes, with its pure decisions (plan.go, policy.go). The
// controllers import kube/drain (upgrade, configsync, apply) and cmd wires
// kube/kubeclient; kube/kubeclient imports talos (for the certificate),
// kube/drain domain only.
package kube
