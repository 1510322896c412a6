// Package tfprovider is the `rezuscloud` OpenTofu/Terraform provider: every
// kind the RezusCloud API lets a user write, as resources, and tenants,
// machines and short-lived credentials as data sources, through the API
// with a bearer token. cmd/terraform-provider-rezuscloud serves it.
//
//	provider "rezuscloud" {} # REZUSCLOUD_ENDPOINT and REZUSCLOUD_TOKEN
//	resource "rezuscloud_tenant" "acme" { name = "acme" }
//	resource "rezuscloud_node_group" "cp" {
//	  tenant         = rezuscloud_tenant.acme.name
//	  name           = "cp"
//	  role           = "controlplane"
//	  machines       = 3
//	  infrastructure = "emulated"
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
	SourceAddress = "registry.opentofu.org/rezuscloud/rezuscloud"
	// Version is the provider's version, as laid out in the tools mirror.
	Version = "0.1.0"
)

// The environment the provider's settings fall back to.
const (
	EnvEndpoint = "REZUSCLOUD_ENDPOINT"
	EnvToken    = "REZUSCLOUD_TOKEN"
)

// New returns the provider factory providerserver.Serve wants.
func New(version string) func() provider.Provider {
	return func() provider.Provider { return &rezusProvider{version: version} }
}

type rezusProvider struct{ version string }

type providerModel struct {
	Endpoint types.String `tfsdk:"endpoint"`
	Token    types.String `tfsdk:"token"`
	Context  types.String `tfsdk:"context"`
	CAFile   types.String `tfsdk:"ca_file"`
	Insecure types.Bool   `tfsdk:"insecure_skip_tls_verify"`
}

func (p *rezusProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "rezuscloud"
	resp.Version = p.version
}

func (p *rezusProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "RezusCloud: Talos Linux Kubernetes clusters, declared.",
		Attributes: map[string]schema.Attribute{
			"endpoint": schema.StringAttribute{Optional: true,
				Description: "The server's URL, e.g. https://rezus.example:8443; default $" + EnvEndpoint + ", else the context's."},
			"token": schema.StringAttribute{Optional: true, Sensitive: true,
				Description: "A bearer token (an API token, rzt_…); default $" + EnvToken + ", else the context's."},
			"context": schema.StringAttribute{Optional: true,
				Description: "A rezusctl context by name ($REZUSCONFIG, else ~/.config/rezus/config): its server, token and TLS settings fill what is not set here."},
			"ca_file":                  schema.StringAttribute{Optional: true, Description: "A PEM file of CAs to trust for the server instead of the system's."},
			"insecure_skip_tls_verify": schema.BoolAttribute{Optional: true, Description: "Turns certificate checks off (test servers only)."},
		},
	}
}

// Configure hands the resources a client. Unknown settings (from resources
// not created yet) hand none, and a resource that needs the API says so.
func (p *rezusProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var m providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || m.Endpoint.IsUnknown() || m.Token.IsUnknown() {
		return
	}
	o := ClientOptions{Endpoint: m.Endpoint.ValueString(), Token: m.Token.ValueString(), CAFile: m.CAFile.ValueString(), Insecure: m.Insecure.ValueBool()}
	if o.Endpoint == "" {
		o.Endpoint = os.Getenv(EnvEndpoint)
	}
	if o.Token == "" {
		o.Token = os.Getenv(EnvToken)
	}
	if name := m.Context.ValueString(); name != "" {
		c, err := loadContext(os.Getenv, name)
		if err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("context"), "Reading the rezusctl context", err.Error())
			return
		}
		if o.Endpoint == "" {
			o.Endpoint = c.Server
		}
		if o.Token == "" {
			o.Token = c.Token
		}
		if o.CAFile == "" {
			o.CAFile = c.CertificateAuthority
		}
		if m.Insecure.IsNull() {
			o.Insecure = c.InsecureSkipTLSVerify
		}
	}
	if o.Endpoint == "" {
		resp.Diagnostics.AddAttributeError(path.Root("endpoint"), "No RezusCloud endpoint",
			"set the provider's endpoint or context, or the environment variable "+EnvEndpoint)
		return
	}
	c, err := NewClient(o)
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("endpoint"), "Invalid RezusCloud settings", err.Error())
		return
	}
	resp.ResourceData = c
	resp.DataSourceData = c
}

func (p *rezusProvider) Resources(context.Context) []func() resource.Resource {
	out := make([]func() resource.Resource, 0, len(kinds))
	for _, k := range kinds {
		out = append(out, newObjectResource(k))
	}
	return out
}

func (p *rezusProvider) DataSources(context.Context) []func() datasource.DataSource {
	return dataSources()
}
