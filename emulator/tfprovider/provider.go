// Package tfprovider is the `emulated` terraform provider: machines and
// reserved addresses on the Talos node emulator (emulator), through its
// HTTP API, so OpenTofu can build a RezusCloud tenant's machines with no
// cloud account. cmd/terraform-provider-emulated serves it; nothing else in
// the module should import it.
//
//	provider "emulated" {} # EMULATOR_ENDPOINT and EMULATOR_TOKEN from the environment
//	provider "emulated" { endpoint = "http://127.0.0.1:PORT", token = var.token }
//	resource "emulated_address" "cp" { name = "demo-cp" }
//	resource "emulated_machine" "cp" {
//	  name      = "demo-cp-0"
//	  cluster   = "demo"
//	  user_data = file("controlplane.yaml")
//	  address   = emulated_address.cp.address
//	}
package tfprovider

import (
	"context"
	"os"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

const (
	// SourceAddress is the provider's source address.
	SourceAddress = "registry.opentofu.org/rezuscloud/emulated"
	// Version is the provider's version, as laid out in the tools mirror.
	Version = "0.1.0"
)

// New returns the provider factory providerserver.Serve wants.
func New(version string) func() provider.Provider {
	return func() provider.Provider { return &emulatedProvider{version: version} }
}

type emulatedProvider struct{ version string }

// The environment variables the provider falls back to, as RezusCloud sets
// them from the Provider's sealed credentials (spec.credentialsRef): the
// token never reaches the generated files, and the endpoint need not be in
// the Provider's spec, which every role reads.
const (
	EnvEndpoint = "EMULATOR_ENDPOINT"
	EnvToken    = "EMULATOR_TOKEN"
)

type providerModel struct {
	Endpoint types.String `tfsdk:"endpoint"`
	Token    types.String `tfsdk:"token"`
}

func (p *emulatedProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "emulated"
	resp.Version = p.version
}

func (p *emulatedProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Machines and reserved addresses on the RezusCloud Talos node emulator.",
		Attributes: map[string]schema.Attribute{
			"endpoint": schema.StringAttribute{
				Optional:    true,
				Description: "The emulator's HTTP API, e.g. http://127.0.0.1:8081; default $" + EnvEndpoint + ".",
			},
			"token": schema.StringAttribute{
				Optional:    true,
				Sensitive:   true,
				Description: "The emulator API's bearer token (its state dir's api-token); default $" + EnvToken + ".",
			},
		},
	}
}

// Configure hands the resources a client. While the endpoint is unknown (it
// comes from a resource not yet created) it hands none, and a resource that
// needs the API then says so.
func (p *emulatedProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var m providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || m.Endpoint.IsUnknown() || m.Token.IsUnknown() {
		return
	}
	endpoint, token := m.Endpoint.ValueString(), m.Token.ValueString()
	if m.Endpoint.IsNull() {
		endpoint = os.Getenv(EnvEndpoint)
	}
	if m.Token.IsNull() {
		token = os.Getenv(EnvToken)
	}
	if endpoint == "" {
		resp.Diagnostics.AddAttributeError(path.Root("endpoint"), "No emulator endpoint",
			"set the provider's endpoint or the environment variable "+EnvEndpoint)
		return
	}
	c, err := NewClient(endpoint, token, DefaultTimeout)
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("endpoint"), "Invalid emulator endpoint", err.Error())
		return
	}
	resp.ResourceData = c
}

func (p *emulatedProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{newAddressResource, newMachineResource}
}

func (p *emulatedProvider) DataSources(context.Context) []func() datasource.DataSource { return nil }

// clientFrom takes the client Configure handed out.
func clientFrom(req resource.ConfigureRequest, resp *resource.ConfigureResponse) *Client {
	if req.ProviderData == nil { // not configured yet: validation, or an unknown endpoint
		return nil
	}
	c, ok := req.ProviderData.(*Client)
	if !ok {
		resp.Diagnostics.AddError("Unexpected provider data", "the emulated provider handed its resources something other than a client")
		return nil
	}
	return c
}
