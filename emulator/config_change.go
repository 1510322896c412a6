package emulator

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
)

// configHash is the hex SHA-256 of a config's exact bytes: what a management
// plane compares with the config it rendered to know what a node holds.
func configHash(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// needsReboot decides mode AUTO: a change is applied in place when the two
// v1alpha1 documents are equal once their hot-reloadable sections are left
// out, and needs a reboot otherwise. The hot-reloadable sections are those
// Talos reconciles live and that day-2 work touches: machine.network,
// machine.kubelet (image, extra args, …), machine.nodeLabels, nodeTaints,
// nodeAnnotations, machine.certSANs, machine.install, the control-plane components
// (cluster.apiServer — with its certSANs —, controllerManager, scheduler,
// proxy), so a Kubernetes upgrade by config is in place, and the PKI Talos
// rotates live (pkiInPlace). Everything else — disks, machine type, the etcd
// CA, cluster identity, kernel, sysctls — reboots. Documents other than v1alpha1 (network, hostname, …) are applied
// in place. It is a simplification of Talos's per-controller rules, chosen to
// be easy to predict in tests.
func needsReboot(running, next config.Provider) (bool, error) {
	a, err := rebootRelevant(running)
	if err != nil {
		return false, err
	}
	b, err := rebootRelevant(next)
	if err != nil {
		return false, err
	}
	return a != b, nil
}

// rebootRelevant encodes the v1alpha1 document without its hot-reloadable sections.
func rebootRelevant(cfg config.Provider) (string, error) {
	raw := cfg.RawV1Alpha1()
	if raw == nil {
		return "", nil
	}
	c := raw.DeepCopy()
	if m := c.MachineConfig; m != nil {
		//lint:ignore SA1019 configs still carry the deprecated machine.network, and Talos still applies it live
		m.MachineNetwork, m.MachineKubelet = nil, nil
		m.MachineNodeLabels, m.MachineNodeTaints, m.MachineNodeAnnotations = nil, nil, nil
		m.MachineCertSANs = nil
		// Talos reads machine.install only when it installs or upgrades, so a
		// new installer image (after a Talos upgrade) is taken in place.
		m.MachineInstall = nil
	}
	if cl := c.ClusterConfig; cl != nil {
		cl.APIServerConfig, cl.ControllerManagerConfig, cl.SchedulerConfig, cl.ProxyConfig = nil, nil, nil, nil
	}
	pkiInPlace(c)
	b, err := encoder.NewEncoder(c, encoder.WithComments(encoder.CommentsDisabled)).Encode()
	if err != nil {
		return "", fmt.Errorf("encoding the config: %w", err)
	}
	return string(b), nil
}

// pkiInPlace leaves out of a v1alpha1 document the PKI Talos takes without a
// reboot: its secrets controllers reissue apid's and the kubelet's
// certificates and rewrite the control-plane static pods when they change,
// which is how `talosctl rotate-ca` rotates the Talos and Kubernetes CAs
// with mode NO_REBOOT. The etcd CA (cluster.etcd.ca) stays: Talos cannot
// rotate it (no accepted-CAs phase for etcd).
func pkiInPlace(c *v1alpha1.Config) {
	if m := c.MachineConfig; m != nil {
		m.MachineCA, m.MachineAcceptedCAs, m.MachineToken = nil, nil, ""
	}
	if cl := c.ClusterConfig; cl != nil {
		cl.ClusterCA, cl.ClusterAcceptedCAs, cl.ClusterAggregatorCA = nil, nil, nil
		cl.ClusterServiceAccount, cl.BootstrapToken = nil, ""
		cl.ClusterSecretboxEncryptionSecret, cl.ClusterAESCBCEncryptionSecret = "", ""
	}
}
