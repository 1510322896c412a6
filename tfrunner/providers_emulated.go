package tfrunner

import (
	"encoding/json"
	"fmt"
	"net/url"

	"github.com/rezuscloud/rezuscloud/domain"
)

// emulatedType builds machines on the Talos node emulator through this
// project's provider (tfprovider/emulated). Provider.spec.config:
//
//	{"endpoint": "http://127.0.0.1:8089"}   the emulator's HTTP API (required)
//
// Node groups take no providerConfig of their own (only the renderer's
// installDisk/installImage). The emulator needs no credentials.
var emulatedType = ProviderType{
	Type:          domain.ProviderEmulated,
	LocalName:     "emulated",
	Source:        "rezuscloud/emulated",
	Version:       "0.1.0",
	CredentialEnv: nil,
	Machines: MachineMapping{
		ResourceType:   "emulated_machine",
		AddressAttrs:   []string{"address"},
		ProviderIDAttr: "provider_id",
		Shape:          "emulated",
		HostnameAttr:   "hostname",
	},
	gen: emulatedGen{},
}

type emulatedGen struct{}

type emulatedConfig struct {
	// Endpoint is the emulator's HTTP API, an http(s) URL.
	Endpoint string `json:"endpoint"`
}

type emulatedGroupConfig struct {
	talosInstall
}

func (emulatedGen) decodeConfig(raw json.RawMessage) (any, []domain.Cause) {
	var cfg emulatedConfig
	if causes := decodeStrictObject(raw, &cfg, "spec.config"); causes != nil {
		return nil, causes
	}
	c := fieldCauses{root: "spec.config"}
	if c.required("endpoint", cfg.Endpoint) {
		u, err := url.Parse(cfg.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			c.add("endpoint", domain.CauseInvalid, "%q must be an http URL of the emulator's API, e.g. http://127.0.0.1:8089", cfg.Endpoint)
		}
	}
	return cfg, c.causes
}

func (emulatedGen) decodeGroupConfig(raw json.RawMessage) (any, []domain.Cause) {
	var cfg emulatedGroupConfig
	if causes := decodeStrictObject(raw, &cfg, "spec.providerConfig"); causes != nil {
		return nil, causes
	}
	return cfg, nil
}

func (emulatedGen) providerArgs(cfg any) map[string]any {
	return map[string]any{"endpoint": lit(cfg.(emulatedConfig).Endpoint)}
}

// endpoint reserves an emulator address (like a cloud's reserved IP) that the
// first control-plane machine boots on.
func (emulatedGen) endpoint(b *tfBuilder, cp *tfGroup) (string, error) {
	name := b.tenant.Metadata.Name + "-endpoint"
	if len(name) > domain.MaxNameLength {
		return "", domain.NewInvalid(domain.TenantKind.Kind, b.tenant.Metadata.Name, []domain.Cause{{Field: "metadata.name", Type: domain.CauseTooLong,
			Message: fmt.Sprintf("the emulator address %q is longer than %d characters; shorten the tenant name or set spec.controlPlane.endpoint", name, domain.MaxNameLength)}})
	}
	b.resource("emulated_address", "endpoint", map[string]any{
		"//":       "The control-plane endpoint: a reserved address the first control-plane machine boots on.",
		"provider": cp.use.ref,
		"name":     lit(name),
	})
	return "emulated_address.endpoint.address", nil
}

func (emulatedGen) resources(b *tfBuilder, u *tfProviderUse) error {
	for _, g := range u.groups {
		if len(g.machines) == 0 {
			continue
		}
		body := map[string]any{
			"provider":  u.ref,
			"for_each":  b.forEach(g, nil),
			"name":      "${each.value.name}",
			"cluster":   lit(b.tenant.Metadata.Name),
			"user_data": "${" + b.userData(g) + "}",
			"lifecycle": map[string]any{"ignore_changes": []any{"user_data"}},
		}
		if b.endpointGroup == g {
			body["address"] = "${each.key == \"" + g.firstMachine() + "\" ? " + b.endpointExpr + " : null}"
		}
		b.resource(u.typ.Machines.ResourceType, g.res, body)
	}
	return nil
}
