// Package kubelet is the emulated kubelet of an emulated Talos node: it
// speaks to a real kube-apiserver as the node does, but runs no containers,
// in the spirit of kwok (sigs.k8s.io/kwok).
//
// A Kubelet registers its Node, renews its Lease in kube-node-lease and
// posts the node's status (Ready and the pressure conditions, nodeInfo,
// capacity, addresses) on a heartbeat. It watches the pods bound to the node
// and reports each one running and ready at once, with a pod IP from the
// node's spec.podCIDR; a deleted (or evicted) pod "stops" after its grace
// period, capped by Config.MaxGrace, and is then deleted as a real kubelet
// deletes it once its containers are gone. It keeps a mirror pod for each of
// the node's static pods (the control plane's components on a control
// plane).
//
// It writes only status (the Node's and pods' status subresources, the
// Lease, mirror pods), never a Node's spec, so a cordon or a taint set by
// someone else stays. Pods never finish on their own: a pod of a Job runs
// until it is deleted.
//
// ApplyNodeMetadata is the other half of what Talos does for a node: with
// admin credentials, machined sets the role label, machine.nodeLabels and
// machine.nodeTaints, which NodeRestriction forbids a kubelet to set.
//
// The emulator (package emulator's kube supervisor) imports it; tests run it
// against a real apiserver from internal/kubetest.
package kubelet
