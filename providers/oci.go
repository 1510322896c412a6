package providers

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/rezuscloud/rezuscloud/domain"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ociVersion pins oracle/oci: 6.34.0 (April 2025) is the newest release we
// have checked the resource schemas used here against.
const ociVersion = "6.34.0"

// ociType builds machines with Oracle's oracle/oci provider.
//
// Provider.spec.config (non-secret settings):
//
//	region          e.g. eu-frankfurt-1 (required)
//	compartmentID   the compartment everything is created in (required)
//	auth            ApiKey (default), InstancePrincipal, SecurityToken or ResourcePrincipal
//	allowedCIDRs    who may reach 6443 and 50000; default ["0.0.0.0/0"]
//
// NodeGroup.spec.providerConfig:
//
//	shape                e.g. VM.Standard.E5.Flex (required)
//	ocpus, memoryGBs     for flexible shapes
//	imageID              a Talos image OCID (required)
//	subnetID             the subnet OCID (required)
//	availabilityDomains  at least one; machines are spread across them round-robin, by index
//	assignPublicIP       give the machines public IPs (default false)
//	bootVolumeSizeGBs    50..32768
//	nsgIDs               more network security groups besides the generated one
//
// What is generated per Provider: a network security group in the VCN of the
// groups' subnets (they must share one VCN; a precondition says so) allowing
// 6443/tcp and 50000/tcp from allowedCIDRs, all traffic between members, and
// all egress. Per node group, instances with the user data in
// metadata.user_data (base64).
//
// The control-plane endpoint, when the tenant declares none, is a network
// load balancer in the first control-plane group's subnet (public when that
// group assigns public IPs) with TCP listeners 6443 (Kubernetes API), 50000
// (Talos API) and 50001 (trustd, for joining workers), the group's instances as
// backends. Its IP exists before any instance does, so it can go into their
// configs; unlike a fixed private IP it needs no free address picked by hand,
// and it survives the loss of the first control-plane machine. Source
// preservation is off so that a control-plane node reaching the endpoint is
// not sent back to itself unanswerable (NLB hairpinning); the balancer is a
// member of the security group, so the member rule lets it in.
var ociType = ProviderType{
	Type:      domain.ProviderOCI,
	LocalName: "oci",
	Source:    "oracle/oci",
	Version:   ociVersion,
	// The provider reads each setting from TF_VAR_<attribute> or
	// OCI_<ATTRIBUTE> (provider.go, MultiEnvDefaultFunc of tfVarName and
	// ociVarName): API-key auth needs the tenancy, user, fingerprint and the
	// private key (or its path, and its password if any).
	CredentialEnv: []string{
		"OCI_TENANCY_OCID", "OCI_USER_OCID", "OCI_FINGERPRINT",
		"OCI_PRIVATE_KEY", "OCI_PRIVATE_KEY_PATH", "OCI_PRIVATE_KEY_PASSWORD",
		"OCI_REGION", "OCI_AUTH", "OCI_CONFIG_FILE_PROFILE",
		"TF_VAR_tenancy_ocid", "TF_VAR_user_ocid", "TF_VAR_fingerprint",
		"TF_VAR_private_key", "TF_VAR_private_key_path", "TF_VAR_private_key_password",
	},
	Machines: MachineMapping{
		ResourceType:   "oci_core_instance",
		AddressAttrs:   []string{"public_ip", "private_ip"},
		ProviderIDAttr: "id",
		ShapeAttr:      "shape",
		HostnameAttr:   "display_name",
	},
	GroupConfig: ociGroupConfig{},
	config:      ociGen{},
	gen:         ociGen{},
}

type ociGen struct{}

type ociConfig struct {
	Region        string   `json:"region"`
	CompartmentID string   `json:"compartmentID"`
	Auth          string   `json:"auth,omitempty"`
	AllowedCIDRs  []string `json:"allowedCIDRs,omitempty"`
}

type ociGroupConfig struct {
	domain.TalosInstall
	Shape               string   `json:"shape"`
	OCPUs               float64  `json:"ocpus,omitempty"`
	MemoryGBs           float64  `json:"memoryGBs,omitempty"`
	ImageID             string   `json:"imageID"`
	SubnetID            string   `json:"subnetID"`
	AvailabilityDomains []string `json:"availabilityDomains"`
	AssignPublicIP      bool     `json:"assignPublicIP,omitempty"`
	BootVolumeSizeGBs   int      `json:"bootVolumeSizeGBs,omitempty"`
	NSGIDs              []string `json:"nsgIDs,omitempty"`
}

// ocid checks that a required value is an OCID of one of the kinds.
func (c *fieldCauses) ocid(name, value string, kinds ...string) {
	if !c.required(name, value) {
		return
	}
	for _, k := range kinds {
		if strings.HasPrefix(value, "ocid1."+k+".") {
			return
		}
	}
	c.add(name, domain.CauseInvalid, "%q must be an OCID (ocid1.%s.…)", value, strings.Join(kinds, "|"))
}

func (ociGen) decodeConfig(raw json.RawMessage) (any, []domain.Cause) {
	var cfg ociConfig
	if causes := decodeStrictObject(raw, &cfg, "spec.config"); causes != nil {
		return nil, causes
	}
	c := fieldCauses{root: field.NewPath("spec", "config")}
	c.required("region", cfg.Region)
	c.ocid("compartmentID", cfg.CompartmentID, "compartment", "tenancy")
	switch cfg.Auth {
	case "", "ApiKey", "InstancePrincipal", "SecurityToken", "ResourcePrincipal":
	default:
		c.add("auth", domain.CauseNotSupported, "%q must be one of ApiKey, InstancePrincipal, SecurityToken, ResourcePrincipal", cfg.Auth)
	}
	if cfg.AllowedCIDRs == nil {
		cfg.AllowedCIDRs = defaultAllowedCIDRs
	}
	cfg.AllowedCIDRs = c.cidrs("allowedCIDRs", cfg.AllowedCIDRs)
	return cfg, c.causes
}

func (ociGen) decodeGroupConfig(raw json.RawMessage) (any, []domain.Cause) {
	var cfg ociGroupConfig
	if causes := decodeStrictObject(raw, &cfg, "spec.providerConfig"); causes != nil {
		return nil, causes
	}
	c := fieldCauses{root: field.NewPath("spec", "providerConfig")}
	c.required("shape", cfg.Shape)
	c.ocid("imageID", cfg.ImageID, "image")
	c.ocid("subnetID", cfg.SubnetID, "subnet")
	if len(cfg.AvailabilityDomains) == 0 {
		c.add("availabilityDomains", domain.CauseRequired, "required: at least one availability domain, e.g. [\"Uocm:PHX-AD-1\"]")
	}
	c.strings("availabilityDomains", cfg.AvailabilityDomains)
	if cfg.OCPUs < 0 {
		c.add("ocpus", domain.CauseInvalid, "must not be negative")
	}
	if cfg.MemoryGBs < 0 {
		c.add("memoryGBs", domain.CauseInvalid, "must not be negative")
	}
	if cfg.BootVolumeSizeGBs != 0 && (cfg.BootVolumeSizeGBs < 50 || cfg.BootVolumeSizeGBs > 32768) {
		c.add("bootVolumeSizeGBs", domain.CauseInvalid, "must be between 50 and 32768, got %d", cfg.BootVolumeSizeGBs)
	}
	for i, id := range cfg.NSGIDs {
		c.ocid(fmt.Sprintf("nsgIDs[%d]", i), id, "networksecuritygroup")
	}
	return cfg, c.causes
}

func (ociGen) providerArgs(cfg any) map[string]any {
	c := cfg.(ociConfig)
	args := map[string]any{"region": lit(c.Region)}
	if c.Auth != "" {
		args["auth"] = lit(c.Auth)
	}
	return args
}

// ociNSG is the generated network security group of a Provider.
func ociNSG(u *tfProviderUse) string { return ProviderAlias(u.name) }

// ociEndpointPorts are the network load balancer's listeners, by name.
var ociEndpointPorts = map[string]any{"k8s-api": 6443, "apid": 50000, "trustd": 50001}

func (ociGen) endpoint(b *tfBuilder, cp *tfGroup) (string, error) {
	gc := cp.cfg.(ociGroupConfig)
	cfg := cp.use.cfg.(ociConfig)
	const nlb = "oci_network_load_balancer_network_load_balancer.endpoint"
	b.resource("oci_network_load_balancer_network_load_balancer", "endpoint", map[string]any{
		"//":                         "The control-plane endpoint: a network load balancer in front of the control-plane group.",
		"provider":                   cp.use.ref,
		"compartment_id":             lit(cfg.CompartmentID),
		"display_name":               lit(b.tenant.Metadata.Name + "-endpoint"),
		"subnet_id":                  lit(gc.SubnetID),
		"is_private":                 !gc.AssignPublicIP,
		"network_security_group_ids": []any{fmt.Sprintf("${oci_core_network_security_group.%s.id}", ociNSG(cp.use))},
	})
	b.resource("oci_network_load_balancer_backend_set", "endpoint", map[string]any{
		"provider":                 cp.use.ref,
		"for_each":                 ociEndpointPorts,
		"network_load_balancer_id": "${" + nlb + ".id}",
		"name":                     "${each.key}",
		"policy":                   "FIVE_TUPLE",
		"is_preserve_source":       false,
		"health_checker":           map[string]any{"protocol": "TCP", "port": "${each.value}"},
	})
	b.resource("oci_network_load_balancer_listener", "endpoint", map[string]any{
		"provider":                 cp.use.ref,
		"for_each":                 ociEndpointPorts,
		"network_load_balancer_id": "${" + nlb + ".id}",
		"name":                     "${each.key}",
		"default_backend_set_name": "${oci_network_load_balancer_backend_set.endpoint[each.key].name}",
		"port":                     "${each.value}",
		"protocol":                 "TCP",
	})
	backends := map[string]any{}
	for _, set := range sortedKeys(ociEndpointPorts) {
		for _, m := range cp.machines {
			backends[set+"/"+m.Name] = map[string]any{"set": set, "port": ociEndpointPorts[set], "machine": m.Name}
		}
	}
	b.resource("oci_network_load_balancer_backend", "endpoint", map[string]any{
		"provider":                 cp.use.ref,
		"for_each":                 backends,
		"network_load_balancer_id": "${" + nlb + ".id}",
		"backend_set_name":         "${oci_network_load_balancer_backend_set.endpoint[each.value.set].name}",
		"name":                     "${each.value.machine}",
		"port":                     "${each.value.port}",
		"target_id":                fmt.Sprintf("${oci_core_instance.%s[each.value.machine].id}", cp.res),
	})
	want := "!ip.is_public"
	if gc.AssignPublicIP {
		want = "ip.is_public"
	}
	return fmt.Sprintf("[for ip in %s.ip_addresses : ip.ip_address if %s][0]", nlb, want), nil
}

func (ociGen) resources(b *tfBuilder, u *tfProviderUse) error {
	var active []*tfGroup
	for _, g := range u.groups {
		if len(g.machines) > 0 {
			active = append(active, g)
		}
	}
	if len(active) == 0 {
		return nil
	}
	cfg := u.cfg.(ociConfig)
	nsg := ociNSG(u)
	nsgRef := "oci_core_network_security_group." + nsg
	for _, g := range active {
		b.data("oci_core_subnet", g.res, map[string]any{"provider": u.ref, "subnet_id": lit(g.cfg.(ociGroupConfig).SubnetID)})
	}
	b.resource("oci_core_network_security_group", nsg, map[string]any{
		"//":             "The tenant's machines on this provider: Kubernetes and Talos APIs from allowedCIDRs, all traffic among members, all egress.",
		"provider":       u.ref,
		"compartment_id": lit(cfg.CompartmentID),
		"vcn_id":         fmt.Sprintf("${data.oci_core_subnet.%s.vcn_id}", active[0].res),
		"display_name":   lit("rezus-" + b.tenant.Metadata.Name),
	})
	ingress := map[string]any{}
	for _, port := range []int{6443, 50000} {
		for _, cidr := range cfg.AllowedCIDRs {
			ingress[fmt.Sprintf("tcp-%d-%s", port, cidr)] = map[string]any{"port": port, "cidr": cidr}
		}
	}
	b.resource("oci_core_network_security_group_security_rule", nsg+"_ingress", map[string]any{
		"provider":                  u.ref,
		"for_each":                  ingress,
		"network_security_group_id": "${" + nsgRef + ".id}",
		"direction":                 "INGRESS",
		"protocol":                  "6",
		"source":                    "${each.value.cidr}",
		"source_type":               "CIDR_BLOCK",
		"tcp_options": map[string]any{
			"destination_port_range": map[string]any{"min": "${each.value.port}", "max": "${each.value.port}"},
		},
	})
	b.resource("oci_core_network_security_group_security_rule", nsg+"_members", map[string]any{
		"provider":                  u.ref,
		"network_security_group_id": "${" + nsgRef + ".id}",
		"direction":                 "INGRESS",
		"protocol":                  "all",
		"source":                    "${" + nsgRef + ".id}",
		"source_type":               "NETWORK_SECURITY_GROUP",
	})
	b.resource("oci_core_network_security_group_security_rule", nsg+"_egress", map[string]any{
		"provider":                  u.ref,
		"network_security_group_id": "${" + nsgRef + ".id}",
		"direction":                 "EGRESS",
		"protocol":                  "all",
		"destination":               "0.0.0.0/0",
		"destination_type":          "CIDR_BLOCK",
	})

	for _, g := range active {
		gc := g.cfg.(ociGroupConfig)
		ads := gc.AvailabilityDomains
		nsgs := []any{"${" + nsgRef + ".id}"}
		nsgs = append(nsgs, lits(gc.NSGIDs)...)
		source := map[string]any{"source_type": "image", "source_id": lit(gc.ImageID)}
		if gc.BootVolumeSizeGBs > 0 {
			source["boot_volume_size_in_gbs"] = gc.BootVolumeSizeGBs
		}
		assignPublic := "false"
		if gc.AssignPublicIP {
			assignPublic = "true"
		}
		inst := map[string]any{
			"provider": u.ref,
			"for_each": b.forEach(g, func(i int, _ MachineInput) map[string]any {
				return map[string]any{"availability_domain": lit(ads[i%len(ads)])}
			}),
			"availability_domain": "${each.value.availability_domain}",
			"compartment_id":      lit(cfg.CompartmentID),
			"display_name":        "${each.value.name}",
			"shape":               lit(gc.Shape),
			"source_details":      source,
			"create_vnic_details": map[string]any{
				"subnet_id":        lit(gc.SubnetID),
				"assign_public_ip": assignPublic,
				"nsg_ids":          nsgs,
			},
			"metadata": map[string]any{"user_data": "${base64encode(" + b.userData(g) + ")}"},
			"freeform_tags": map[string]any{
				"rezuscloud-tenant":    lit(b.tenant.Metadata.Name),
				"rezuscloud-nodegroup": lit(g.name),
			},
			"lifecycle": map[string]any{
				// Config changes and upgrades go through the Talos API; a new
				// image is for new machines (replacing one would wipe it).
				"ignore_changes": []any{"metadata", "source_details"},
				"precondition": map[string]any{
					"condition":     fmt.Sprintf("${data.oci_core_subnet.%s.vcn_id == %s.vcn_id}", g.res, nsgRef),
					"error_message": lit(fmt.Sprintf("The subnet of node group %s is in another VCN than the other node groups on provider %s; they must share one VCN.", g.name, u.name)),
				},
			},
		}
		if gc.OCPUs > 0 || gc.MemoryGBs > 0 {
			sc := map[string]any{}
			if gc.OCPUs > 0 {
				sc["ocpus"] = gc.OCPUs
			}
			if gc.MemoryGBs > 0 {
				sc["memory_in_gbs"] = gc.MemoryGBs
			}
			inst["shape_config"] = sc
		}
		b.resource(u.typ.Machines.ResourceType, g.res, inst)
	}
	return nil
}
