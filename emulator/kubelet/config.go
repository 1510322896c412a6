package kubelet

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"time"

	"github.com/google/uuid"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
)

// Defaults of Config.
const (
	DefaultOSImage                 = "Talos (v1.13.0)"
	DefaultContainerRuntimeVersion = "containerd://2.1.5"
	DefaultLeaseDuration           = 40 * time.Second
	DefaultStatusEvery             = 10 * time.Second
	DefaultMaxGrace                = 2 * time.Second
)

// DefaultCapacity is a node's capacity unless Config.Capacity says otherwise.
func DefaultCapacity() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("4"),
		corev1.ResourceMemory:           resource.MustParse("8Gi"),
		corev1.ResourcePods:             resource.MustParse("110"),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
}

// StaticPod is one static pod of the node, e.g. {"kube-apiserver",
// "registry.k8s.io/kube-apiserver:v1.36.1"}: the kubelet keeps a mirror pod
// <Name>-<node> for it in kube-system.
type StaticPod struct {
	Name  string
	Image string
}

// Config configures a Kubelet. The zero value of each optional field means its default.
type Config struct {
	// NodeName is the Node's name and its kubernetes.io/hostname label. Required.
	NodeName string
	// Address is the node's IP: its InternalIP in status.addresses and the
	// hostIP (and, for hostNetwork pods, the podIP) of its pods. Required.
	Address string
	// Client talks to the API server as the node (user system:node:<NodeName>,
	// group system:nodes), so the Node authorizer and NodeRestriction
	// admission hold it to what a real kubelet may do. Required.
	Client kubernetes.Interface
	// Version is status.nodeInfo.kubeletVersion, e.g. "v1.36.1". Required.
	Version string
	// OSImage is status.nodeInfo.osImage; default DefaultOSImage.
	OSImage string
	// KernelVersion is status.nodeInfo.kernelVersion; default the kernel
	// Talos v1.13 ships (machinery's constants.DefaultKernelVersion).
	KernelVersion string
	// ContainerRuntimeVersion is status.nodeInfo.containerRuntimeVersion;
	// default DefaultContainerRuntimeVersion.
	ContainerRuntimeVersion string
	// Architecture is status.nodeInfo.architecture and the
	// kubernetes.io/arch label; default runtime.GOARCH.
	Architecture string
	// MachineID and SystemUUID identify the machine; default derived from
	// NodeName, so they survive a reboot.
	MachineID, SystemUUID string
	// BootID identifies this boot; default random, so every Kubelet (a reboot
	// makes a new one) reports a new boot, as a real node does.
	BootID string
	// ProviderID is spec.providerID of the Node it registers (the
	// kubelet's --provider-id); empty leaves it for a cloud controller.
	ProviderID string
	// Capacity is status.capacity; keys it lacks of cpu (4), memory (8Gi),
	// pods (110) and ephemeral-storage (100Gi) take those defaults.
	// status.allocatable is the same: no resources are reserved.
	Capacity corev1.ResourceList
	// StaticPods are the node's static pods, which get mirror pods; a
	// control plane has kube-apiserver, kube-controller-manager and
	// kube-scheduler.
	StaticPods []StaticPod
	// LeaseDuration is the node Lease's leaseDurationSeconds; default
	// DefaultLeaseDuration. The Lease is renewed every quarter of it, as the
	// kubelet does (10s by default).
	LeaseDuration time.Duration
	// StatusEvery is how often the node's status (its conditions' heartbeat)
	// is posted; default DefaultStatusEvery.
	StatusEvery time.Duration
	// MaxGrace caps the grace period of a deleted pod: its "containers stop"
	// after min(deletionGracePeriodSeconds, MaxGrace), then the pod is
	// deleted. Nothing runs, so waiting the full 30 seconds would only slow
	// drains and tests down. Default DefaultMaxGrace.
	MaxGrace time.Duration
	// Now is the clock of status times; default time.Now.
	Now func() time.Time
	// Logf receives what goes wrong (API errors, retried); default discarded.
	Logf func(format string, args ...any)
}

// Validate reports what is missing or malformed.
func (c *Config) Validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("node name is required"))
	}
	if _, err := netip.ParseAddr(c.Address); err != nil {
		errs = append(errs, fmt.Errorf("address %q is not an IP", c.Address))
	}
	if c.Client == nil {
		errs = append(errs, errors.New("client is required"))
	}
	if c.Version == "" {
		errs = append(errs, errors.New("kubelet version is required"))
	}
	for i, sp := range c.StaticPods {
		if sp.Name == "" || sp.Image == "" {
			errs = append(errs, fmt.Errorf("static pod %d needs a name and an image", i))
		}
	}
	return errors.Join(errs...)
}

func (c *Config) setDefaults() {
	if c.OSImage == "" {
		c.OSImage = DefaultOSImage
	}
	if c.KernelVersion == "" {
		c.KernelVersion = constants.DefaultKernelVersion
	}
	if c.ContainerRuntimeVersion == "" {
		c.ContainerRuntimeVersion = DefaultContainerRuntimeVersion
	}
	if c.Architecture == "" {
		c.Architecture = runtime.GOARCH
	}
	if c.MachineID == "" {
		id := uuid.NewSHA1(uuid.NameSpaceOID, []byte("machine-id/"+c.NodeName))
		c.MachineID = fmt.Sprintf("%x", id[:])
	}
	if c.SystemUUID == "" {
		c.SystemUUID = uuid.NewSHA1(uuid.NameSpaceOID, []byte("system-uuid/"+c.NodeName)).String()
	}
	if c.BootID == "" {
		c.BootID = uuid.NewString()
	}
	capacity := DefaultCapacity()
	for name, q := range c.Capacity {
		capacity[name] = q
	}
	c.Capacity = capacity
	if c.LeaseDuration <= 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.StatusEvery <= 0 {
		c.StatusEvery = DefaultStatusEvery
	}
	if c.MaxGrace <= 0 {
		c.MaxGrace = DefaultMaxGrace
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
}
