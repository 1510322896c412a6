package providers

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
	// Its machines are its module's output; the mapping reads states
	// written before the type was a module.
	Machines: MachineMapping{
		ResourceType:   "emulated_machine",
		AddressAttrs:   []string{"address"},
		ProviderIDAttr: "provider_id",
		Shape:          "emulated",
		HostnameAttr:   "hostname",
	},
	GroupConfig: emulatedGroupConfig{},
	config:      emulatedGen{},
	gen:         emulatedGen{},
}

type emulatedGen struct{}

type emulatedConfig struct {
	// Endpoint is the emulator's HTTP API, an http(s) URL.
	Endpoint string `json:"endpoint"`
}

type emulatedGroupConfig struct {
	domain.TalosInstall
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

// The emulated type is written as a module (tfrunner/providers/modules/emulated,
// embedded): the module contract proven on the provider the tests run.
var emulatedModule = embeddedModule("emulated")

func (emulatedGen) module() *domain.ModuleSource { return emulatedModule }

// moduleVars gives the module its emulator (spec.config.endpoint; the
// module's endpoint input is the tenant's control-plane endpoint).
func (emulatedGen) moduleVars(cfg any) map[string]any {
	return map[string]any{"emulator": lit(cfg.(emulatedConfig).Endpoint)}
}

// moved moves the resources runs made before the type was a module
// (emulated_machine.ng_<group>, emulated_address.endpoint) into the module
// calls, so an upgrade of RezusCloud rebuilds no machine.
func (emulatedGen) moved(b *tfBuilder, u *tfProviderUse) {
	for _, g := range u.groups {
		b.moved("emulated_machine."+g.res, "module."+ModuleName(g.name, u.name)+".emulated_machine.machine")
	}
	if cp := b.endpointGroup; cp != nil && cp.use == u {
		b.moved("emulated_address.endpoint", "module."+ModuleName(cp.name, u.name)+".emulated_address.endpoint[0]")
	}
}

// endpoint checks what the module's endpoint will be named (a reserved
// emulator address, "<tenant>-endpoint") and returns the module's output.
func (emulatedGen) endpoint(b *tfBuilder, cp *tfGroup) (string, error) {
	name := b.tenant.Metadata.Name + "-endpoint"
	if len(name) > domain.MaxNameLength {
		return "", domain.NewInvalid(domain.TenantKind.Kind, b.tenant.Metadata.Name, []domain.Cause{{Field: "metadata.name", Type: domain.CauseTooLong,
			Message: fmt.Sprintf("the emulator address %q is longer than %d characters; shorten the tenant name or set spec.controlPlane.endpoint", name, domain.MaxNameLength)}})
	}
	return b.moduleEndpoint(cp)
}

func (emulatedGen) resources(*tfBuilder, *tfProviderUse) error {
	return fmt.Errorf("generator bug: the emulated type's resources are its module's")
}
