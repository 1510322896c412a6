package domain

import (
	"encoding/json"
	"fmt"
	"net/url"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Defaults for a tenant's versions and network: the versions Talos machinery
// v1.13.0 was released with, and the subnets Talos uses when none are given.
const (
	DefaultTalosVersion      = "v1.13.0"
	DefaultKubernetesVersion = "v1.35.4"
	DefaultPodSubnet         = "10.244.0.0/16"
	DefaultServiceSubnet     = "10.96.0.0/12"
	DefaultDNSDomain         = "cluster.local"
)

// TenantKind is a Kubernetes cluster that RezusCloud declares and builds.
var TenantKind = register(&KindInfo{
	Kind: "Tenant", Plural: "tenants", Subject: "tenant",
	NormalizeSpec:   func(raw json.RawMessage) (json.RawMessage, []Cause) { return normalizeAs[TenantSpec](raw, "spec") },
	NormalizeStatus: func(raw json.RawMessage) (json.RawMessage, []Cause) { return normalizeAs[TenantStatus](raw, "status") },
	InitialStatus: func() json.RawMessage {
		return json.RawMessage(`{"phase":"Pending","machines":{"total":0,"ready":0,"controlPlane":0,"workers":0}}`)
	},
	CreateSpec: tenantCreateSpec,
	UpdateSpec: tenantUpdateSpec,
})

// Tenant is the typed view of a Tenant object.
type Tenant struct {
	APIVersion string       `json:"apiVersion"`
	Kind       string       `json:"kind"`
	Metadata   ObjectMeta   `json:"metadata"`
	Spec       TenantSpec   `json:"spec"`
	Status     TenantStatus `json:"status"`
}

// TenantSpec is what the user declares about a cluster.
type TenantSpec struct {
	// TalosVersion of every machine unless a node group overrides it; default DefaultTalosVersion.
	TalosVersion string `json:"talosVersion"`
	// KubernetesVersion of the cluster; default DefaultKubernetesVersion.
	KubernetesVersion string           `json:"kubernetesVersion"`
	ControlPlane      ControlPlaneSpec `json:"controlPlane"`
	Network           NetworkSpec      `json:"network"`
	// EtcdBackup is the schedule of etcd backups. A tenant created without
	// it gets DefaultBackupInterval and DefaultBackupKeep; an update without
	// it keeps the current one; an empty one ({}), or none on a tenant
	// created before schedules existed, is off.
	EtcdBackup *EtcdBackupSchedule `json:"etcdBackup,omitempty"`
	// DriftCheck is how often the infrastructure and the machines' configs
	// are compared with the declared ones, and whether drift is corrected;
	// absent: the server's default interval, action report.
	DriftCheck *DriftCheck `json:"driftCheck,omitempty"`
	// Maintenance is when disruptive work that is not urgent (Talos and
	// Kubernetes upgrades) may start; absent: any time.
	Maintenance *Maintenance `json:"maintenance,omitempty"`
	// Schematic is the Image Factory schematic (system extensions, extra
	// kernel arguments, META) of every node group that declares none of its
	// own; absent: the factory's vanilla image.
	Schematic *Schematic `json:"schematic,omitempty"`
}

// ControlPlaneSpec says how clients reach the Kubernetes API.
type ControlPlaneSpec struct {
	// Endpoint is the https URL of the API server (a VIP or load balancer); when
	// empty the first control-plane machine's address is used.
	Endpoint string `json:"endpoint,omitempty"`
}

// NetworkSpec holds the cluster's networks.
type NetworkSpec struct {
	// PodSubnets: at most one IPv4 and one IPv6 CIDR; default DefaultPodSubnet.
	PodSubnets []string `json:"podSubnets"`
	// ServiceSubnets: at most one IPv4 and one IPv6 CIDR; default DefaultServiceSubnet.
	ServiceSubnets []string `json:"serviceSubnets"`
	// DNSDomain is the cluster DNS domain; default DefaultDNSDomain.
	DNSDomain string `json:"dnsDomain"`
}

// Default fills the defaults in, so the stored spec shows what will be built.
func (s *TenantSpec) Default() {
	if s.TalosVersion == "" {
		s.TalosVersion = DefaultTalosVersion
	}
	if s.KubernetesVersion == "" {
		s.KubernetesVersion = DefaultKubernetesVersion
	}
	if _, ok := ParseVersion(s.TalosVersion); ok {
		s.TalosVersion = canonicalVersion(s.TalosVersion)
	}
	if _, ok := ParseVersion(s.KubernetesVersion); ok {
		s.KubernetesVersion = canonicalVersion(s.KubernetesVersion)
	}
	if len(s.Network.PodSubnets) == 0 {
		s.Network.PodSubnets = []string{DefaultPodSubnet}
	}
	if len(s.Network.ServiceSubnets) == 0 {
		s.Network.ServiceSubnets = []string{DefaultServiceSubnet}
	}
	if s.Network.DNSDomain == "" {
		s.Network.DNSDomain = DefaultDNSDomain
	}
	if s.EtcdBackup != nil {
		s.EtcdBackup.Default()
	}
	if s.Schematic != nil {
		s.Schematic.Default()
	}
	if s.DriftCheck != nil {
		s.DriftCheck.Default()
	}
	if s.Maintenance != nil {
		s.Maintenance.Default()
	}
}

// tenantUpdateSpec keeps the backup schedule of an update that leaves it
// out, so that writing back a tenant spec written before schedules existed
// (or by a client that does not know them) neither turns the schedule off
// nor on; {} turns it off.
func tenantUpdateSpec(current, next json.RawMessage) (json.RawMessage, []Cause) {
	var cur, s TenantSpec
	if json.Unmarshal(current, &cur) != nil || json.Unmarshal(next, &s) != nil || s.EtcdBackup != nil || cur.EtcdBackup == nil {
		return next, nil
	}
	s.EtcdBackup = cur.EtcdBackup
	out, err := json.Marshal(&s)
	if err != nil {
		return next, nil
	}
	return out, nil
}

// tenantCreateSpec gives a new tenant the default backup schedule unless
// its spec says otherwise.
func tenantCreateSpec(spec json.RawMessage) (json.RawMessage, []Cause) {
	var s TenantSpec
	if json.Unmarshal(spec, &s) != nil || s.EtcdBackup != nil {
		return spec, nil
	}
	s.EtcdBackup = &EtcdBackupSchedule{Interval: DefaultBackupInterval, Keep: DefaultBackupKeep}
	out, err := json.Marshal(&s)
	if err != nil {
		return spec, nil
	}
	return out, nil
}

// Validate reports every bad field.
func (s *TenantSpec) Validate(root string) []Cause {
	f := field.NewPath(root)
	var causes []Cause
	causes = append(causes, validateVersion(s.TalosVersion, f.Child("talosVersion"))...)
	causes = append(causes, validateVersion(s.KubernetesVersion, f.Child("kubernetesVersion"))...)
	if s.EtcdBackup != nil {
		causes = append(causes, s.EtcdBackup.Validate(f.Child("etcdBackup"))...)
	}
	if s.DriftCheck != nil {
		causes = append(causes, s.DriftCheck.Validate(f.Child("driftCheck"))...)
	}
	if s.Maintenance != nil {
		causes = append(causes, s.Maintenance.Validate(f.Child("maintenance"))...)
	}
	if s.Schematic != nil {
		causes = append(causes, s.Schematic.Validate(f.Child("schematic"))...)
	}
	if s.ControlPlane.Endpoint != "" {
		u, err := url.Parse(s.ControlPlane.Endpoint)
		if err != nil || u.Scheme != "https" || u.Hostname() == "" || (u.Path != "" && u.Path != "/") {
			causes = append(causes, Cause{Field: f.Child("controlPlane", "endpoint").String(), Type: CauseInvalid,
				Message: fmt.Sprintf("%q must be an https URL with a host and no path, e.g. https://10.0.0.10:6443", s.ControlPlane.Endpoint)})
		}
	}
	pods, c := parsePrefixes(s.Network.PodSubnets, f.Child("network", "podSubnets"))
	causes = append(causes, c...)
	svcs, c := parsePrefixes(s.Network.ServiceSubnets, f.Child("network", "serviceSubnets"))
	causes = append(causes, c...)
	for i, p := range pods {
		for j, q := range svcs {
			if p.Overlaps(q) {
				causes = append(causes, Cause{Field: f.Child("network", "serviceSubnets").Index(j).String(), Type: CauseInvalid,
					Message: fmt.Sprintf("%s overlaps pod subnet %s (spec.network.podSubnets[%d])", q, p, i)})
			}
		}
	}
	if !validSubdomain(s.Network.DNSDomain) {
		causes = append(causes, Cause{Field: f.Child("network", "dnsDomain").String(), Type: CauseInvalid, Message: fmt.Sprintf("%q must be a DNS-1123 subdomain", s.Network.DNSDomain)})
	}
	return causes
}

// TenantStatus is what controllers observed about a tenant.
type TenantStatus struct {
	// Phase is Pending, Provisioning, Ready, Degraded, Deleting or Failed.
	Phase              string `json:"phase,omitempty"`
	ObservedGeneration int64  `json:"observedGeneration,omitempty"`
	// EndpointAddress is the control-plane endpoint's host the infrastructure
	// made (a reserved IP or a load balancer), when spec.controlPlane.endpoint is empty.
	EndpointAddress string `json:"endpointAddress,omitempty"`
	// KubernetesVersion is the Kubernetes version the machines' configs
	// carry: set by the first apply, then moved only by a Kubernetes upgrade
	// run that succeeded. Configs are rendered with it (not with
	// spec.kubernetesVersion), so a spec change reaches machines only through
	// an Upgrade, control planes first.
	KubernetesVersion string        `json:"kubernetesVersion,omitempty"`
	Conditions        []Condition   `json:"conditions,omitempty"`
	Machines          MachineCounts `json:"machines"`
	// Drift is what the last drift check found.
	Drift *DriftStatus `json:"drift,omitempty"`
	// Certificates are the tenant's CAs (the accepted ones too during a
	// rotation) and when each ends, as the PKI last read them; absent until
	// the tenant's secrets bundle exists. See ConditionCertificatesExpiring.
	Certificates []CertificateExpiry `json:"certificates,omitempty"`
}

// MachineCounts summarises a tenant's machines.
type MachineCounts struct {
	Total        int `json:"total"`
	Ready        int `json:"ready"`
	ControlPlane int `json:"controlPlane"`
	Workers      int `json:"workers"`
}

// Default writes the Kubernetes version with its leading "v".
func (s *TenantStatus) Default() {
	if _, ok := ParseVersion(s.KubernetesVersion); ok {
		s.KubernetesVersion = canonicalVersion(s.KubernetesVersion)
	}
}

// Validate checks the status a controller wrote.
func (s *TenantStatus) Validate(root string) []Cause {
	f := field.NewPath(root)
	causes := validateConditions(s.Conditions, f.Child("conditions"))
	if s.Phase != "" {
		causes = append(causes, oneOf(s.Phase, f.Child("phase"), "Pending", "Provisioning", "Ready", "Degraded", "Deleting", "Failed")...)
	}
	if s.KubernetesVersion != "" {
		causes = append(causes, validateVersion(s.KubernetesVersion, f.Child("kubernetesVersion"))...)
	}
	causes = append(causes, validateCertificates(s.Certificates, f.Child("certificates"))...)
	if d := s.Drift; d != nil {
		if len(d.Resources) > MaxDriftResources {
			causes = append(causes, Cause{Field: f.Child("drift", "resources").String(), Type: CauseTooLong, Message: fmt.Sprintf("at most %d resources", MaxDriftResources)})
		}
		if len(d.Machines) > MaxDriftMachines {
			causes = append(causes, Cause{Field: f.Child("drift", "machines").String(), Type: CauseTooLong, Message: fmt.Sprintf("at most %d machines", MaxDriftMachines)})
		}
	}
	return causes
}

func validateConditions(conds []Condition, f *field.Path) []Cause {
	var causes []Cause
	seen := map[string]bool{}
	for i, c := range conds {
		p := f.Index(i)
		if c.Type == "" {
			causes = append(causes, Cause{Field: p.Child("type").String(), Type: CauseRequired, Message: "type is required"})
		}
		if seen[c.Type] {
			causes = append(causes, Cause{Field: p.Child("type").String(), Type: CauseDuplicate, Message: fmt.Sprintf("duplicate condition %q", c.Type)})
		}
		seen[c.Type] = true
		causes = append(causes, oneOf(c.Status, p.Child("status"), "True", "False", "Unknown")...)
	}
	return causes
}
