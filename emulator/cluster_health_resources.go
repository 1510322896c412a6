package emulator

// The resources Talos's cluster checks read beyond those the everyday
// commands do: the bootstrap manifests' config of a control plane (which
// CNI, whether kube-proxy and CoreDNS are deployed), the EPHEMERAL volume's
// status and the node's diagnostics (none).

import (
	"maps"
	"slices"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/dustin/go-humanize"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/imager/quirks"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
)

// emulatedDiskSize is the size of a node's system disk (StorageService.Disks).
const emulatedDiskSize = 20 << 30

// healthResources are a configured node's resources the checks read.
func healthResources(cfg config.Provider) []resource.Resource {
	if cfg == nil {
		return nil
	}
	// EPHEMERAL takes the disk but for the partitions before it and the GPT.
	ps := quirks.New("").PartitionSizes()
	vs := block.NewVolumeStatus(block.NamespaceName, constants.EphemeralPartitionLabel)
	spec := vs.TypedSpec()
	spec.Phase, spec.Type, spec.Filesystem = block.VolumePhaseReady, block.VolumeTypePartition, block.FilesystemTypeXFS
	spec.Location, spec.ParentLocation, spec.PartitionIndex = "/dev/sda6", "/dev/sda", 6
	spec.MountLocation = spec.Location
	spec.Size = emulatedDiskSize - (ps.UKIEFISize() + ps.StateSize() + ps.METASize() + 10<<20)
	spec.PrettySize = humanize.IBytes(spec.Size)
	out := []resource.Resource{vs}
	if cfg.Machine().Type().IsControlPlane() {
		bmc := k8s.NewBootstrapManifestsConfig()
		*bmc.TypedSpec() = bootstrapManifestsSpec(cfg)
		out = append(out, bmc)
	}
	return out
}

// bootstrapManifestsSpec is what Talos's control-plane controller derives
// from the config for the manifests it applies at bootstrap.
func bootstrapManifestsSpec(cfg config.Provider) k8s.BootstrapManifestsConfigSpec {
	c := cfg.Cluster()
	spec := k8s.BootstrapManifestsConfigSpec{
		Server:         c.Endpoint().String(),
		ClusterDomain:  c.Network().DNSDomain(),
		PodCIDRs:       c.Network().PodCIDRs(),
		ProxyEnabled:   c.Proxy().Enabled(),
		ProxyImage:     c.Proxy().Image(),
		ProxyArgs:      proxyArgs(cfg),
		CoreDNSEnabled: c.CoreDNS().Enabled(),
		CoreDNSImage:   c.CoreDNS().Image(),
		CNIName:        c.Network().CNI().Name(),
	}
	spec.FlannelEnabled = spec.CNIName == constants.FlannelCNI
	if ips, err := c.Network().DNSServiceIPs(); err == nil {
		for _, ip := range ips {
			switch {
			case ip.Is4() && spec.DNSServiceIP == "":
				spec.DNSServiceIP = ip.String()
			case ip.Is6() && spec.DNSServiceIPv6 == "":
				spec.DNSServiceIPv6 = ip.String()
			}
		}
	}
	return spec
}

// proxyArgs are kube-proxy's flags as Talos sets them.
func proxyArgs(cfg config.Provider) []string {
	c := cfg.Cluster()
	args := []string{
		"--cluster-cidr=" + joinComma(c.Network().PodCIDRs()),
		"--hostname-override=$(NODE_NAME)",
		"--kubeconfig=/etc/kubernetes/kubeconfig",
		"--proxy-mode=" + c.Proxy().Mode(),
		"--conntrack-max-per-core=0",
	}
	for _, k := range slices.Sorted(maps.Keys(c.Proxy().ExtraArgs())) {
		args = append(args, "--"+k+"="+joinComma(c.Proxy().ExtraArgs()[k]))
	}
	return args
}

func joinComma(s []string) string { return strings.Join(s, ",") }
