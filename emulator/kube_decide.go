package emulator

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"

	"github.com/siderolabs/crypto/x509"
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
	// etcdKey names the etcd that should run: a different key than the
	// running one's (a reboot, another Kubernetes version, whose etcd comes
	// with it) restarts the whole control plane.
	etcdKey string
	// cpKey is etcdKey and the fingerprint of the Kubernetes PKI in the
	// config (controlPlanePKI): a change of that alone (a rotation's stage,
	// applied in place) restarts kube-apiserver, controller-manager and
	// scheduler with new certificates, etcd running on, as Talos rewrites
	// its static pods.
	cpKey string
	// cpVersion is the Kubernetes version of the control plane's images.
	cpVersion string
	kubelet   bool
	// kubeletKey, like cpKey, restarts the kubelet when it changes: a
	// reboot, another version, or other PKI (kubeletPKI).
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
// change of the Kubernetes version in the config, restarts what runs, and a
// change of the Kubernetes PKI restarts the Kubernetes components and the
// kubelet (not etcd).
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
			w.etcdKey = v.bootID + "/" + ver + "/" + etcdPKI(v.cfg)
			w.cpKey = w.etcdKey + "/" + controlPlanePKI(v.cfg)
		}
	}
	if v.bootstrapped && v.st.KubernetesVersion != "" {
		w.kubelet, w.kubeletVersion = true, v.st.KubernetesVersion
		w.kubeletKey = v.bootID + "/" + v.st.KubernetesVersion + "/" + kubeletPKI(v.cfg)
	}
	return w
}

// etcdPKI fingerprints cluster.etcd.ca, which Talos cannot rotate in place.
func etcdPKI(cfg config.Provider) string {
	f := newFingerprint()
	if e := cfg.Cluster().Etcd(); e != nil {
		f.ca(e.CA())
	}
	return f.sum()
}

// controlPlanePKI fingerprints what Talos writes into the control-plane
// static pods' secrets from the config, etcd's aside: cluster.ca with its
// key and the accepted CAs (kube-apiserver's client CAs, the controller
// manager's signing CA), the aggregator CA, the service account key and
// the encryption secrets.
func controlPlanePKI(cfg config.Provider) string {
	c := cfg.Cluster()
	f := newFingerprint()
	f.ca(c.IssuingCA())
	f.certs(c.AcceptedCAs())
	f.ca(c.AggregatorCA())
	if sa := c.ServiceAccount(); sa != nil {
		f.add(sa.Key)
	}
	f.add([]byte(c.SecretboxEncryptionSecret()), []byte(c.AESCBCEncryptionSecret()))
	return f.sum()
}

// kubeletPKI fingerprints what Talos's kubelet secrets hold from the
// config, whose change restarts the kubelet: the CAs it trusts (cluster.ca
// and the accepted ones; a worker has no key) and the bootstrap token.
func kubeletPKI(cfg config.Provider) string {
	c := cfg.Cluster()
	f := newFingerprint()
	if ca := c.IssuingCA(); ca != nil {
		f.add(ca.Crt)
	}
	f.certs(c.AcceptedCAs())
	f.add([]byte(c.Token().ID()), []byte(c.Token().Secret()))
	return f.sum()
}

// fingerprint is a short hash of length-prefixed fields, so that moving
// bytes from one field to the next changes it.
type fingerprint struct{ h hash.Hash }

func newFingerprint() fingerprint { return fingerprint{h: sha256.New()} }

func (f fingerprint) add(fields ...[]byte) {
	for _, b := range fields {
		_ = binary.Write(f.h, binary.BigEndian, uint64(len(b)))
		f.h.Write(b)
	}
}

func (f fingerprint) ca(ca *x509.PEMEncodedCertificateAndKey) {
	if ca == nil {
		f.add(nil, nil)
		return
	}
	f.add(ca.Crt, ca.Key)
}

func (f fingerprint) certs(cs []*x509.PEMEncodedCertificate) {
	f.add(binary.BigEndian.AppendUint64(nil, uint64(len(cs))))
	for _, c := range cs {
		f.add(c.Crt)
	}
}

func (f fingerprint) sum() string { return hex.EncodeToString(f.h.Sum(nil))[:12] }
