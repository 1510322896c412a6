package providers

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"sort"

	"github.com/rezuscloud/rezuscloud/domain"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ProviderType is one Provider.spec.type: how its configs are validated,
// the node-group fields its forms show, and, for the types built with
// OpenTofu, what is generated and read back. Each type is one file of this
// package (emulated.go, oci.go, openstack.go, module.go, metal.go) holding
// its value; the registry below lists them by the names domain gives.
type ProviderType struct {
	// Type is the Provider.spec.type (domain.ProviderEmulated, ...).
	Type string
	// GroupConfig is the struct a node group's spec.providerConfig decodes
	// into (its zero value): the keys forms offer are its json tags
	// (GroupConfigFields). Nil for free-form config (module).
	GroupConfig any
	// LocalName is the provider's local name in required_providers, and the
	// prefix of its resource types. Empty for metal, which is not built
	// with OpenTofu (the apply worker applies it through the Talos API).
	LocalName string
	// Source and Version pin the registry provider (exact version).
	Source  string
	Version string
	// CredentialEnv names the environment variables the provider reads its
	// credentials from: a Provider's credentialsRef secret holds some of them
	// (keys are these names), and the runner passes them to tofu. Nothing secret
	// is ever written into the generated files.
	CredentialEnv []string
	// Machines says which resources are machines and where their fields are.
	Machines MachineMapping

	// config validates the type's configs (every type).
	config configDecoder
	// gen generates its .tf.json; nil for a type not built with OpenTofu.
	gen providerGenerator
}

// Tofu reports whether the type is built with OpenTofu (generated here);
// metal is not.
func (t ProviderType) Tofu() bool { return t.gen != nil }

// MachineMapping maps one TF resource type to Machine objects.
type MachineMapping struct {
	// ResourceType is the TF resource type of a machine, e.g. "emulated_machine".
	ResourceType string
	// AddressAttrs are the attributes that may carry the management (Talos API)
	// address, in order of preference: the first non-empty one is used.
	AddressAttrs []string
	// ProviderIDAttr carries the infrastructure's id of the machine.
	ProviderIDAttr string
	// ShapeAttr carries the machine's size (flavor, shape); when empty, Shape
	// is used as a constant.
	ShapeAttr string
	Shape     string
	// HostnameAttr carries the machine's hostname.
	HostnameAttr string
}

// configDecoder is one provider type's validation.
type configDecoder interface {
	// decodeConfig strictly decodes a Provider's spec.config; causes are rooted at "spec.config".
	decodeConfig(raw json.RawMessage) (any, []domain.Cause)
	// decodeGroupConfig strictly decodes a node group's spec.providerConfig;
	// causes are rooted at "spec.providerConfig".
	decodeGroupConfig(raw json.RawMessage) (any, []domain.Cause)
}

// providerGenerator is the generator of a type built with OpenTofu.
type providerGenerator interface {
	configDecoder
	// providerArgs are the provider block's arguments for a decoded spec.config
	// (the alias is added by the caller).
	providerArgs(cfg any) map[string]any
	// endpoint adds what makes the control-plane endpoint address for the
	// first machine of cp, a group built by this type, and returns the HCL
	// expression of the address. It runs before resources.
	endpoint(b *tfBuilder, cp *tfGroup) (string, error)
	// resources adds the resources of every group of u (and what they share).
	resources(b *tfBuilder, u *tfProviderUse) error
}

// registry is every provider type, by Provider.spec.type: the names are
// domain.ProviderTypes() (TestEveryProviderTypeIsRegistered), what each does
// is here. Adding a type is one file declaring its ProviderType, its line
// here and its name in domain.
var registry = map[string]*ProviderType{
	domain.ProviderEmulated:  &emulatedType,
	domain.ProviderOpenStack: &openstackType,
	domain.ProviderOCI:       &ociType,
	domain.ProviderModule:    &moduleType,
	domain.ProviderMetal:     &metalType,
}

// LookupProviderType returns a Provider.spec.type's ProviderType, and false
// for a type domain does not name.
func LookupProviderType(typ string) (ProviderType, bool) {
	t, ok := registry[typ]
	if !ok {
		return ProviderType{}, false
	}
	return *t, true
}

// tofuType returns a type built with OpenTofu.
func tofuType(typ string) (*ProviderType, bool) {
	t, ok := registry[typ]
	if !ok || t.gen == nil {
		return nil, false
	}
	return t, true
}

// TofuTypeNames lists the Provider.spec.types built with OpenTofu, sorted.
func TofuTypeNames() []string {
	out := make([]string, 0, len(registry))
	for name, t := range registry {
		if t.Tofu() {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// mappingsByResourceType indexes every type's machine mapping by TF resource type.
func mappingsByResourceType() map[string]MachineMapping {
	out := make(map[string]MachineMapping, len(registry))
	for _, t := range registry {
		if t.Machines.ResourceType != "" {
			out[t.Machines.ResourceType] = t.Machines
		}
	}
	return out
}

// decodeStrictObject decodes a JSON object (absent counts as {}) into v,
// reporting unknown fields and wrong types at paths under root.
func decodeStrictObject(raw json.RawMessage, v any, root string) []domain.Cause {
	if len(raw) == 0 || string(raw) == "null" {
		raw = json.RawMessage("{}")
	}
	return domain.DecodeStrict(raw, v, root)
}

// fieldCauses collects the causes of one decoded config.
type fieldCauses struct {
	root   *field.Path
	causes []domain.Cause
}

// add reports a cause at the field name under root.
func (c *fieldCauses) add(name, typ, format string, args ...any) {
	c.addAt(c.root.Child(name), typ, format, args...)
}

func (c *fieldCauses) addAt(p *field.Path, typ, format string, args ...any) {
	c.causes = append(c.causes, domain.Cause{Field: p.String(), Type: typ, Message: fmt.Sprintf(format, args...)})
}

func (c *fieldCauses) required(name, value string) bool {
	if value == "" {
		c.add(name, domain.CauseRequired, "required")
		return false
	}
	return true
}

// strings checks a list of non-empty, distinct strings.
func (c *fieldCauses) strings(name string, values []string) {
	seen := map[string]bool{}
	for i, v := range values {
		f := c.root.Child(name).Index(i)
		switch {
		case v == "":
			c.addAt(f, domain.CauseRequired, "must not be empty")
		case seen[v]:
			c.addAt(f, domain.CauseDuplicate, "duplicate %q", v)
		}
		seen[v] = true
	}
}

// cidrs checks a list of CIDRs (allowedCIDRs) and returns them canonical.
func (c *fieldCauses) cidrs(name string, values []string) []string {
	out := make([]string, 0, len(values))
	seen := map[string]bool{}
	for i, v := range values {
		f := c.root.Child(name).Index(i)
		p, err := netip.ParsePrefix(v)
		if err != nil {
			c.addAt(f, domain.CauseInvalid, "%q must be a CIDR, e.g. 203.0.113.0/24", v)
			continue
		}
		p = p.Masked()
		if seen[p.String()] {
			c.addAt(f, domain.CauseDuplicate, "duplicate %q", v)
			continue
		}
		seen[p.String()] = true
		out = append(out, p.String())
	}
	return out
}

// defaultAllowedCIDRs may reach a cloud cluster's Kubernetes API (6443) and
// Talos API (50000) when a Provider's config names none: the management plane
// must reach the Talos API from wherever it runs, and both APIs are mTLS.
var defaultAllowedCIDRs = []string{"0.0.0.0/0"}

var uuidRe = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// isUUID reports whether s is a canonical UUID (an OpenStack id, as opposed to a name).
func isUUID(s string) bool { return uuidRe.MatchString(s) }

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
