package emulator

// The resources a node serves, derived from its facts (cosi.go keeps them
// current): what each is made of, as Talos's controllers would make it.

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/extensions"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
)

// nodeIP is the IP a node's status address carries.
func nodeIP(st NodeStatus) netip.Addr {
	host, _, _ := net.SplitHostPort(st.Address)
	ip, _ := netip.ParseAddr(host)
	return ip
}

// desiredResources derives a node's resources from its facts.
func desiredResources(f nodeFacts) []resource.Resource {
	st := f.st
	ip := nodeIP(st)
	var out []resource.Resource

	ms := runtime.NewMachineStatus()
	ms.TypedSpec().Stage = runtime.MachineStageBooting
	ms.TypedSpec().Status.UnmetConditions = []runtime.UnmetCondition{{Name: "services", Reason: "services are starting"}}
	if st.Phase == PhaseRunning {
		ms.TypedSpec().Stage = runtime.MachineStageRunning
		ms.TypedSpec().Status = runtime.MachineStatusStatus{Ready: true, UnmetConditions: []runtime.UnmetCondition{}}
	}
	out = append(out, ms)

	v := runtime.NewVersion()
	v.TypedSpec().Name, v.TypedSpec().Version = "Talos", st.Version
	out = append(out, v)

	for i, x := range f.extensions {
		es := runtime.NewExtensionStatus(runtime.NamespaceName, fmt.Sprint(i))
		es.TypedSpec().Image = fmt.Sprintf("%03d.sqsh", i)
		es.TypedSpec().Metadata = extensions.Metadata{Name: x.name, Version: x.version, Author: "Sidero Labs", Description: x.description}
		out = append(out, es)
	}

	hs := network.NewHostnameStatus(network.NamespaceName, "hostname")
	hs.TypedSpec().Hostname = st.Name
	out = append(out, hs)

	nn := k8s.NewNodename(k8s.NamespaceName, k8s.NodenameID)
	nn.TypedSpec().Nodename, nn.TypedSpec().HostnameVersion = st.Name, "1"
	out = append(out, nn)

	if ip.IsValid() {
		prefix := netip.PrefixFrom(ip, ip.BitLen())
		for _, id := range []resource.ID{network.NodeAddressDefaultID, network.NodeAddressCurrentID, network.NodeAddressRoutedID, network.NodeAddressAccumulativeID} {
			na := network.NewNodeAddress(network.NamespaceName, id)
			na.TypedSpec().Addresses = []netip.Prefix{prefix}
			out = append(out, na)
		}
		for _, a := range []struct {
			link   string
			index  uint32
			prefix netip.Prefix
		}{{"lo", 1, netip.MustParsePrefix("127.0.0.1/8")}, {"eth0", 2, prefix}} {
			as := network.NewAddressStatus(network.NamespaceName, network.AddressID(a.link, a.prefix))
			spec := as.TypedSpec()
			spec.Address, spec.Local, spec.LinkName, spec.LinkIndex = a.prefix, a.prefix.Addr(), a.link, a.index
			spec.Family, spec.Scope, spec.Flags = nethelpers.FamilyInet4, nethelpers.ScopeGlobal, nethelpers.AddressFlags(nethelpers.AddressPermanent)
			if a.link == "lo" {
				spec.Scope = nethelpers.ScopeHost
			}
			out = append(out, as)
		}
	}

	for _, sv := range f.services {
		s := v1alpha1.NewService(sv.ID)
		s.TypedSpec().Running, s.TypedSpec().Healthy, s.TypedSpec().Unknown = sv.State == "Running", sv.Healthy, sv.Unknown
		out = append(out, s)
	}

	if f.cfg.cfg != nil {
		out = append(out, config.NewMachineConfig(f.cfg.cfg))
	}

	if f.etcd {
		em := etcd.NewMember(etcd.NamespaceName, etcd.LocalMemberID)
		em.TypedSpec().MemberID = etcd.FormatMemberID(f.etcdID)
		out = append(out, em)
	}

	for _, m := range f.members {
		out = append(out, memberResource(m))
	}

	out = append(out, healthResources(f.cfg.cfg)...)

	for _, p := range staticPods(f.cfg) {
		out = append(out, staticPodStatus(st, ip, f.times, p))
	}
	return out
}

// memberResource is a node as the discovery service shows it to the others.
func memberResource(m NodeStatus) *cluster.Member {
	mb := cluster.NewMember(cluster.NamespaceName, m.Name)
	spec := mb.TypedSpec()
	spec.NodeID = fmt.Sprintf("%016x", memberID("node/"+m.Name))
	if a := nodeIP(m); a.IsValid() {
		spec.Addresses = []netip.Addr{a}
	}
	spec.Hostname, spec.OperatingSystem = m.Name, "Talos ("+m.Version+")"
	spec.MachineType = machine.TypeWorker
	if m.Role == "controlplane" {
		spec.MachineType = machine.TypeControlPlane
		spec.ControlPlane = &cluster.ControlPlane{APIServerPort: 6443}
	}
	return mb
}

// staticPodStatus is the kubelet's view of one static pod: a running, ready
// pod whose container runs the image of the config, which is what a
// Kubernetes upgrade verifies.
func staticPodStatus(st NodeStatus, ip netip.Addr, t bootTimes, p staticPod) *k8s.StaticPodStatus {
	started := t.running.UTC().Format("2006-01-02T15:04:05Z")
	ready := []any{}
	for _, c := range []string{"Initialized", "Ready", "ContainersReady", "PodScheduled"} {
		ready = append(ready, map[string]any{"type": c, "status": "True", "lastTransitionTime": started})
	}
	s := k8s.NewStaticPodStatus(k8s.NamespaceName, "kube-system/"+p.name+"-"+st.Name)
	s.TypedSpec().PodStatus = map[string]any{
		"phase":      "Running",
		"conditions": ready,
		"hostIP":     ip.String(),
		"podIP":      ip.String(),
		"startTime":  started,
		"qosClass":   "Burstable",
		"containerStatuses": []any{map[string]any{
			"name": p.name, "image": p.image, "imageID": imageDigest(p.image), "ready": true, "started": true, "restartCount": 0,
			"containerID": "containerd://" + imageDigest(st.Name + "/" + p.name)[7:],
			"state":       map[string]any{"running": map[string]any{"startedAt": started}},
		}},
	}
	return s
}
