// Package kubecp runs the real Kubernetes control plane of one emulated
// Talos control-plane node: etcd, kube-apiserver, kube-controller-manager
// and kube-scheduler as child processes, from the binaries hack/kube.sh
// builds into the tools dir (`go tool task tools`).
//
// It imitates what Talos does on a control plane: every certificate is
// issued from the cluster's CAs in the node's machine config (PKIFromConfig)
// with the names Talos gives them, the components run with Talos's flags, and
// a node joins etcd as a learner that is promoted once in sync. What differs
// is the addressing: several nodes share one host, so each binds everything
// (etcd's 2379/2380, the apiserver's 6443, the controller manager's 10257 and
// the scheduler's 10259) to its own loopback IP instead of 0.0.0.0 and
// 127.0.0.1.
//
// The package owns processes, not decisions: the emulator (package
// emulator's kube supervisor) decides when a node bootstraps, joins, restarts
// or is wiped, and calls Start, Stop and WipeData, and Reissue when the
// Kubernetes PKI of the node's config changes in place (a CA rotation's
// stages): the Kubernetes components restart with certificates from the new
// CAs, kube-apiserver trusting client certificates of cluster.ca and
// cluster.acceptedCAs (PKI.KubeTrust), while etcd runs on. Like a kubelet with static
// pods, a Node restarts a child that exits on its own, with backoff, until
// Stop. Children get SIGKILL when the emulator dies (Pdeathsig), so a killed
// emulator leaves no orphans.
//
// Data of a node lives in Config.DataDir:
//
//	etcd/          etcd's data dir (etcd/member once it holds a member)
//	pki/           certificates, keys and kubeconfigs, issued again at every Start
//	               (the Kubernetes components' at every Reissue)
//	logs/<name>.log each child's output, rotated at 4 MiB (one older file kept)
package kubecp
