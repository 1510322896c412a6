package providers

import (
	"encoding/json"
	"fmt"
	"net/url"

	"github.com/rezuscloud/rezuscloud/domain"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// emulatedType builds machines on the Talos node emulator through this
// project's provider (emulator/tfprovider). Provider.spec.config:
//
//	{"endpoint": "http://127.0.0.1:8089"}   the emulator's HTTP API
//
// The emulator's API needs its bearer token: the credentials the Provider's
// spec.credentialsRef names hold it as EMULATOR_TOKEN, and may hold the
// endpoint as EMULATOR_ENDPOINT instead of spec.config (which every role
// reads): `serve --with-emulator` registers its emulator that way. Node
// groups take no providerConfig of their own (only the renderer's
// installDisk/installImage).
var emulatedType = ProviderType{
	Type:          domain.ProviderEmulated,
	LocalName:     "emulated",
	Source:        "rezuscloud/emulated",
	Version:       "0.1.0",
	CredentialEnv: []string{EmulatorEndpointEnv, EmulatorTokenEnv},
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

// The environment variables the emulated provider (emulator/tfprovider)
// reads the emulator's API and its bearer token from.
const (
	EmulatorEndpointEnv = "EMULATOR_ENDPOINT"
	EmulatorTokenEnv    = "EMULATOR_TOKEN"
)

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
	c := fieldCauses{root: field.NewPath("spec", "config")}
	if cfg.Endpoint != "" {
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

// The emulated type is written as a module (providers/modules/emulated,
// embedded): the module contract proven on the provider the tests run.
var emulatedModule = embeddedModule("emulated")

func (emulatedGen) module() *domain.ModuleSource { return emulatedModule }

// moduleVars gives the module its emulator (spec.config.endpoint; the
// module's endpoint input is the tenant's control-plane endpoint). Without
// one the module's provider reads EMULATOR_ENDPOINT from the credentials.
func (emulatedGen) moduleVars(cfg any) map[string]any {
	if e := cfg.(emulatedConfig).Endpoint; e != "" {
		return map[string]any{"emulator": lit(e)}
	}
	return map[string]any{}
}

// emulatedEndpointCauses: an emulated Provider names its emulator in
// spec.config.endpoint or through the credentials of spec.credentialsRef
// (EMULATOR_ENDPOINT, which only the runner reads).
func emulatedEndpointCauses(spec *domain.ProviderSpec, cfg any) []domain.Cause {
	if c, ok := cfg.(emulatedConfig); !ok || c.Endpoint != "" || spec.CredentialsRef != nil {
		return nil
	}
	return []domain.Cause{{Field: "spec.config.endpoint", Type: domain.CauseRequired,
		Message: "required unless spec.credentialsRef names credentials that hold EMULATOR_ENDPOINT"}}
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
