// Package kube is the room of RezusCloud's use of managed clusters'
// Kubernetes API: kube/kubeclient gives one client-go clientset per tenant
// on a short-lived controller certificate and keeps the ClusterRoleBindings
// of per-user credentials; kube/drain cordons, drains (PDBs honoured) and
// uncordons Nodes. Controllers import them; they import domain and talos.
package kube
