package emulator

import (
	"github.com/siderolabs/talos/pkg/machinery/config"
)

// kubeView is what the real-control-plane supervisor sees of one node at a
// moment: a copy taken under the node's lock.
type kubeView struct {
	exists bool
	// node is the node itself: a node deleted and created again under the
	// same name (a machine replaced) is another node, whose Kubernetes
	// data starts empty.
	node   *node
	st     NodeStatus
	cfg    config.Provider
	bootID string
	// bootstrapped: the node's cluster has been bootstrapped (its etcd exists).
	bootstrapped bool
}

// kubeWant is what should run on a node: the pure decision of decideKube.
type kubeWant struct {
	// controlPlane: etcd, kube-apiserver, controller-manager and scheduler.
	controlPlane bool
	// cpKey names the control plane that should run; a different key than
	// the running one's restarts it (a reboot, another Kubernetes version).
	cpKey string
	// cpVersion is the Kubernetes version of the control plane's images.
	cpVersion string
	kubelet   bool
	// kubeletKey, like cpKey, restarts the kubelet when it changes.
	kubeletKey     string
	kubeletVersion string
	// wipe: the node lost its config (Reset) or is gone: its etcd data and
	// member go too.
	wipe bool
	// wipeEtcd: the node is a control plane of a cluster that is not
	// bootstrapped (its etcd was lost: WipeEtcd), so etcd data it still
	// holds is not the cluster's any more.
	wipeEtcd bool
}

// decideKube decides what runs on a node from what the emulator says of it.
// A machine runs its Kubernetes parts only while it is up and configured: a
// node that is down (rebooting, upgrading, unreachable) runs nothing and its
// kubelet reports NotReady; a control plane runs etcd only once its cluster
// is bootstrapped and only while it has not left etcd; every boot, and every
// change of the Kubernetes version in the config, restarts what runs.
func decideKube(v kubeView) kubeWant {
	if !v.exists {
		return kubeWant{wipe: true}
	}
	if v.cfg == nil {
		// Maintenance mode: never configured, or reset.
		return kubeWant{wipe: v.st.Phase == PhaseMaintenance}
	}
	if v.st.Phase != PhaseRunning {
		return kubeWant{}
	}
	var w kubeWant
	if v.st.Role == "controlplane" && !v.bootstrapped {
		w.wipeEtcd = true
	}
	if v.st.Role == "controlplane" && v.bootstrapped && !v.st.EtcdLeft {
		if ver, ok := versionFromImage(v.cfg.Cluster().APIServer().Image()); ok && !v.st.Faults.kubernetesDown(ver) {
			w.controlPlane, w.cpVersion = true, ver
			w.cpKey = v.bootID + "/" + ver
		}
	}
	if v.bootstrapped && v.st.KubernetesVersion != "" {
		w.kubelet, w.kubeletVersion = true, v.st.KubernetesVersion
		w.kubeletKey = v.bootID + "/" + v.st.KubernetesVersion
	}
	return w
}
