package providers

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"net/url"

	"github.com/rezuscloud/rezuscloud/domain"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// openstackType builds machines with terraform-provider-openstack.
//
// Provider.spec.config (non-secret settings; credentials come from OS_*):
//
//	authURL            Keystone URL (required)
//	region             region name
//	projectName, projectID, userDomainName, projectDomainName
//	endpointType       public, internal or admin
//	insecure           skip TLS verification of the cloud's API
//	allowedCIDRs       who may reach 6443 and 50000; default ["0.0.0.0/0"]
//
// NodeGroup.spec.providerConfig:
//
//	flavor             flavor name (required)
//	image              image name or id (required)
//	network            network name or id (required)
//	subnetID           the subnet to take the fixed IP from (default: the network's choice)
//	securityGroups     more security groups (names or ids) besides the generated one
//	availabilityZones  machines are spread across them round-robin, by index
//	keyPair            a key pair name (Talos has no SSH; some clouds want one)
//	configDrive        give the user data on a config drive instead of the metadata service
//
// What is generated per Provider: a security group "rezus-<tenant>" allowing
// 6443/tcp (Kubernetes API) and 50000/tcp (Talos API, for the management plane
// and talosctl) from allowedCIDRs, and everything between members of the group
// (etcd, kubelet, trustd 50001, the CNI). Egress is the group's default (all).
// Per machine a port on the network, with the security groups, and an
// instance booted on it; changes of user data and image are ignored (config
// changes and upgrades go through the Talos API; a rebuild would wipe the
// machine), so only new machines get them. Ports are made first, so the first control-plane
// machine's port gives the endpoint address before any instance exists: the
// endpoint is that machine's fixed IP (not highly available; declare
// spec.controlPlane.endpoint with a load balancer for that).
var openstackType = ProviderType{
	Type:      domain.ProviderOpenStack,
	LocalName: "openstack",
	Source:    "terraform-provider-openstack/openstack",
	Version:   "3.4.0",
	// From the provider's schema (openstack/provider.go, v3.4.0). Either a
	// password (OS_USERNAME or OS_USER_ID, OS_PASSWORD, a project, domains) or
	// an application credential (OS_APPLICATION_CREDENTIAL_ID or _NAME, and
	// _SECRET), or a token, or OS_CLOUD with a clouds.yaml.
	CredentialEnv: []string{
		"OS_USERNAME", "OS_USER_ID", "OS_PASSWORD", "OS_TOKEN", "OS_AUTH_TOKEN",
		"OS_APPLICATION_CREDENTIAL_ID", "OS_APPLICATION_CREDENTIAL_NAME", "OS_APPLICATION_CREDENTIAL_SECRET",
		"OS_PROJECT_ID", "OS_PROJECT_NAME", "OS_TENANT_ID", "OS_TENANT_NAME",
		"OS_USER_DOMAIN_NAME", "OS_USER_DOMAIN_ID", "OS_PROJECT_DOMAIN_NAME", "OS_PROJECT_DOMAIN_ID",
		"OS_DOMAIN_ID", "OS_DOMAIN_NAME", "OS_DEFAULT_DOMAIN", "OS_SYSTEM_SCOPE",
		"OS_AUTH_URL", "OS_REGION_NAME", "OS_CLOUD", "OS_CACERT", "OS_CERT", "OS_KEY", "OS_INSECURE",
	},
	Machines: MachineMapping{
		ResourceType:   "openstack_compute_instance_v2",
		AddressAttrs:   []string{"access_ip_v4", "access_ip_v6"},
		ProviderIDAttr: "id",
		ShapeAttr:      "flavor_name",
		HostnameAttr:   "name",
	},
	GroupConfig: openstackGroupConfig{},
	config:      openstackGen{},
	gen:         openstackGen{},
}

type openstackGen struct{}

type openstackConfig struct {
	AuthURL           string   `json:"authURL"`
	Region            string   `json:"region,omitempty"`
	ProjectName       string   `json:"projectName,omitempty"`
	ProjectID         string   `json:"projectID,omitempty"`
	UserDomainName    string   `json:"userDomainName,omitempty"`
	ProjectDomainName string   `json:"projectDomainName,omitempty"`
	EndpointType      string   `json:"endpointType,omitempty"`
	Insecure          bool     `json:"insecure,omitempty"`
	AllowedCIDRs      []string `json:"allowedCIDRs,omitempty"`
}

type openstackGroupConfig struct {
	domain.TalosInstall
	Flavor            string   `json:"flavor"`
	Image             string   `json:"image"`
	Network           string   `json:"network"`
	SubnetID          string   `json:"subnetID,omitempty"`
	SecurityGroups    []string `json:"securityGroups,omitempty"`
	AvailabilityZones []string `json:"availabilityZones,omitempty"`
	KeyPair           string   `json:"keyPair,omitempty"`
	ConfigDrive       bool     `json:"configDrive,omitempty"`
}

func (openstackGen) decodeConfig(raw json.RawMessage) (any, []domain.Cause) {
	var cfg openstackConfig
	if causes := decodeStrictObject(raw, &cfg, "spec.config"); causes != nil {
		return nil, causes
	}
	c := fieldCauses{root: field.NewPath("spec", "config")}
	if c.required("authURL", cfg.AuthURL) {
		u, err := url.Parse(cfg.AuthURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			c.add("authURL", domain.CauseInvalid, "%q must be the http(s) URL of Keystone, e.g. https://keystone.example.com:5000/v3", cfg.AuthURL)
		}
	}
	switch cfg.EndpointType {
	case "", "public", "internal", "admin":
	default:
		c.add("endpointType", domain.CauseNotSupported, "%q must be one of public, internal, admin", cfg.EndpointType)
	}
	if cfg.AllowedCIDRs == nil {
		cfg.AllowedCIDRs = defaultAllowedCIDRs
	}
	cfg.AllowedCIDRs = c.cidrs("allowedCIDRs", cfg.AllowedCIDRs)
	return cfg, c.causes
}

func (openstackGen) decodeGroupConfig(raw json.RawMessage) (any, []domain.Cause) {
	var cfg openstackGroupConfig
	if causes := decodeStrictObject(raw, &cfg, "spec.providerConfig"); causes != nil {
		return nil, causes
	}
	c := fieldCauses{root: field.NewPath("spec", "providerConfig")}
	c.required("flavor", cfg.Flavor)
	c.required("image", cfg.Image)
	c.required("network", cfg.Network)
	if cfg.SubnetID != "" && !isUUID(cfg.SubnetID) {
		c.add("subnetID", domain.CauseInvalid, "%q must be a subnet id (a UUID)", cfg.SubnetID)
	}
	c.strings("securityGroups", cfg.SecurityGroups)
	c.strings("availabilityZones", cfg.AvailabilityZones)
	return cfg, c.causes
}

func (openstackGen) providerArgs(cfg any) map[string]any {
	c := cfg.(openstackConfig)
	args := map[string]any{"auth_url": lit(c.AuthURL)}
	set := func(k, v string) {
		if v != "" {
			args[k] = lit(v)
		}
	}
	set("region", c.Region)
	set("tenant_name", c.ProjectName)
	set("tenant_id", c.ProjectID)
	set("user_domain_name", c.UserDomainName)
	set("project_domain_name", c.ProjectDomainName)
	set("endpoint_type", c.EndpointType)
	if c.Insecure {
		args["insecure"] = true
	}
	return args
}

// endpoint is the (first IPv4) fixed IP of the first control-plane
// machine's port; the port is made by resources. IPv4, because the address
// replaces the host of https://<host>:6443 as it is, where an IPv6 address
// would need brackets, and because the machines' addresses are access_ip_v4.
func (openstackGen) endpoint(b *tfBuilder, cp *tfGroup) (string, error) {
	return fmt.Sprintf(`[for ip in openstack_networking_port_v2.%s[%q].all_fixed_ips : ip if !strcontains(ip, ":")][0]`, cp.res, cp.firstMachine()), nil
}

func (openstackGen) resources(b *tfBuilder, u *tfProviderUse) error {
	var active []*tfGroup
	for _, g := range u.groups {
		if len(g.machines) > 0 {
			active = append(active, g)
		}
	}
	if len(active) == 0 {
		return nil
	}
	cfg := u.cfg.(openstackConfig)
	sg := ProviderAlias(u.name)
	b.resource("openstack_networking_secgroup_v2", sg, map[string]any{
		"//":          "The tenant's machines on this provider: Kubernetes and Talos APIs from allowedCIDRs, all traffic among members.",
		"provider":    u.ref,
		"name":        lit("rezus-" + b.tenant.Metadata.Name),
		"description": lit(fmt.Sprintf("RezusCloud tenant %s (provider %s)", b.tenant.Metadata.Name, u.name)),
	})
	sgID := fmt.Sprintf("openstack_networking_secgroup_v2.%s.id", sg)
	ingress := map[string]any{}
	for _, port := range []int{6443, 50000} {
		for _, cidr := range cfg.AllowedCIDRs {
			ether := "IPv4"
			if netip.MustParsePrefix(cidr).Addr().Is6() {
				ether = "IPv6"
			}
			ingress[fmt.Sprintf("tcp-%d-%s", port, cidr)] = map[string]any{"port": port, "cidr": cidr, "ethertype": ether}
		}
	}
	b.resource("openstack_networking_secgroup_rule_v2", sg+"_ingress", map[string]any{
		"provider":          u.ref,
		"for_each":          ingress,
		"security_group_id": "${" + sgID + "}",
		"direction":         "ingress",
		"ethertype":         "${each.value.ethertype}",
		"protocol":          "tcp",
		"port_range_min":    "${each.value.port}",
		"port_range_max":    "${each.value.port}",
		"remote_ip_prefix":  "${each.value.cidr}",
	})
	b.resource("openstack_networking_secgroup_rule_v2", sg+"_members", map[string]any{
		"provider":          u.ref,
		"for_each":          map[string]any{"IPv4": "IPv4", "IPv6": "IPv6"},
		"security_group_id": "${" + sgID + "}",
		"direction":         "ingress",
		"ethertype":         "${each.value}",
		"remote_group_id":   "${" + sgID + "}",
	})

	for _, g := range active {
		gc := g.cfg.(openstackGroupConfig)
		networkID := lit(gc.Network)
		if !isUUID(gc.Network) {
			b.data("openstack_networking_network_v2", g.res, map[string]any{"provider": u.ref, "name": lit(gc.Network)})
			networkID = fmt.Sprintf("${data.openstack_networking_network_v2.%s.id}", g.res)
		}
		groups := []any{"${" + sgID + "}"}
		for i, s := range gc.SecurityGroups {
			if isUUID(s) {
				groups = append(groups, lit(s))
				continue
			}
			name := fmt.Sprintf("%s_%d", g.res, i)
			b.data("openstack_networking_secgroup_v2", name, map[string]any{"provider": u.ref, "name": lit(s)})
			groups = append(groups, fmt.Sprintf("${data.openstack_networking_secgroup_v2.%s.id}", name))
		}
		port := map[string]any{
			"provider":           u.ref,
			"for_each":           b.forEach(g, nil),
			"name":               "${each.value.name}",
			"network_id":         networkID,
			"admin_state_up":     true,
			"security_group_ids": groups,
		}
		if gc.SubnetID != "" {
			port["fixed_ip"] = map[string]any{"subnet_id": lit(gc.SubnetID)}
		}
		b.resource("openstack_networking_port_v2", g.res, port)

		zones := gc.AvailabilityZones
		inst := map[string]any{
			"provider": u.ref,
			"for_each": b.forEach(g, func(i int, _ MachineInput) map[string]any {
				if len(zones) == 0 {
					return nil
				}
				return map[string]any{"availability_zone": lit(zones[i%len(zones)])}
			}),
			"name":        "${each.value.name}",
			"flavor_name": lit(gc.Flavor),
			"user_data":   "${" + b.userData(g) + "}",
			"network":     map[string]any{"port": fmt.Sprintf("${openstack_networking_port_v2.%s[each.key].id}", g.res)},
			"metadata": map[string]any{
				"rezuscloud-tenant":    lit(b.tenant.Metadata.Name),
				"rezuscloud-nodegroup": lit(g.name),
			},
			// A new image is for new machines: Talos upgrades existing ones in
			// place through its API, and a rebuild would wipe the machine.
			"lifecycle": map[string]any{"ignore_changes": []any{"user_data", "image_id", "image_name"}},
		}
		if isUUID(gc.Image) {
			inst["image_id"] = lit(gc.Image)
		} else {
			inst["image_name"] = lit(gc.Image)
		}
		if len(zones) > 0 {
			inst["availability_zone"] = "${each.value.availability_zone}"
		}
		if gc.KeyPair != "" {
			inst["key_pair"] = lit(gc.KeyPair)
		}
		if gc.ConfigDrive {
			inst["config_drive"] = true
		}
		b.resource(u.typ.Machines.ResourceType, g.res, inst)
	}
	return nil
}
