package tfprovider

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"go.yaml.in/yaml/v3"
)

// dataSource is a data source reading with the provider's client: typeName
// follows rezuscloud_, read fills the state from the configuration.
type dataSource struct {
	typeName string
	schema   schema.Schema
	read     func(ctx context.Context, c *Client, cfg datasource.ReadRequest, resp *datasource.ReadResponse)
	client   *Client
}

func (d *dataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_" + d.typeName
}

func (d *dataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = d.schema
}

func (d *dataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	if c, ok := req.ProviderData.(*Client); ok {
		d.client = c
	}
}

func (d *dataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	if d.client == nil {
		resp.Diagnostics.AddError("The provider is not configured", "set the rezuscloud provider's endpoint and token")
		return
	}
	d.read(ctx, d.client, req, resp)
}

func dataSources() []func() datasource.DataSource {
	return []func() datasource.DataSource{
		func() datasource.DataSource { return tenantData() },
		func() datasource.DataSource { return machinesData() },
		func() datasource.DataSource { return talosconfigData() },
		func() datasource.DataSource { return kubeconfigData() },
	}
}

func tenantArg(ctx context.Context, req datasource.ReadRequest, diags *diag.Diagnostics) string {
	var t types.String
	diags.Append(req.Config.GetAttribute(ctx, path.Root("tenant"), &t)...)
	return t.ValueString()
}

func apiDiag(diags *diag.Diagnostics, summary string, err error) {
	diags.AddAttributeError(path.Root("tenant"), summary, err.Error())
}

// tenantData is a tenant as the server holds it, with its status.
func tenantData() *dataSource {
	return &dataSource{typeName: "tenant",
		schema: schema.Schema{Description: "A tenant, its spec and its status.", Attributes: map[string]schema.Attribute{
			"tenant":             schema.StringAttribute{Required: true, Description: "The tenant's name."},
			"labels":             schema.MapAttribute{ElementType: types.StringType, Computed: true},
			"talos_version":      schema.StringAttribute{Computed: true},
			"kubernetes_version": schema.StringAttribute{Computed: true},
			"endpoint":           schema.StringAttribute{Computed: true, Description: "The control-plane endpoint host the infrastructure made (status.endpointAddress), when the spec names none."},
			"reconciled":         schema.BoolAttribute{Computed: true, Description: "Whether the last apply built the current spec (condition Reconciled)."},
			"spec":               schema.StringAttribute{Computed: true, Description: "The spec as JSON."},
			"status":             schema.StringAttribute{Computed: true, Description: "The status as JSON (conditions, machines, drift, ...)."},
		}},
		read: func(ctx context.Context, c *Client, req datasource.ReadRequest, resp *datasource.ReadResponse) {
			name := tenantArg(ctx, req, &resp.Diagnostics)
			o, err := c.get(ctx, "/api/v1/tenants/"+url.PathEscape(name))
			if err != nil {
				apiDiag(&resp.Diagnostics, "Reading the tenant", err)
				return
			}
			labels := map[string]attr.Value{}
			if m, ok := lookupMap(o, "metadata", "labels"); ok {
				for k, v := range m {
					labels[k] = types.StringValue(fmt.Sprint(v))
				}
			}
			spec, _ := json.Marshal(o["spec"])
			status, _ := json.Marshal(o["status"])
			reconciled := false
			if conds, ok := lookup(o, []string{"status", "conditions"}); ok {
				for _, c := range asList(conds) {
					if m, ok := c.(map[string]any); ok && m["type"] == "Reconciled" && m["status"] == "True" {
						reconciled = true
					}
				}
			}
			set := func(k string, v any) { resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root(k), v)...) }
			set("tenant", name)
			set("labels", types.MapValueMust(types.StringType, labels))
			set("talos_version", str(o, "spec", "talosVersion"))
			set("kubernetes_version", str(o, "spec", "kubernetesVersion"))
			set("endpoint", str(o, "status", "endpointAddress"))
			set("reconciled", reconciled)
			set("spec", string(spec))
			set("status", string(status))
		}}
}

var machineType = types.ObjectType{AttrTypes: map[string]attr.Type{
	"name": types.StringType, "node_group": types.StringType, "role": types.StringType, "address": types.StringType,
	"stage": types.StringType, "ready": types.BoolType, "talos_version": types.StringType,
}}

// machinesData lists a tenant's machines.
func machinesData() *dataSource {
	return &dataSource{typeName: "machines",
		schema: schema.Schema{Description: "A tenant's machines, in name order.", Attributes: map[string]schema.Attribute{
			"tenant":     schema.StringAttribute{Required: true},
			"node_group": schema.StringAttribute{Optional: true, Description: "Only this node group's."},
			"machines":   schema.ListAttribute{ElementType: machineType, Computed: true},
		}},
		read: func(ctx context.Context, c *Client, req datasource.ReadRequest, resp *datasource.ReadResponse) {
			tenant := tenantArg(ctx, req, &resp.Diagnostics)
			var group types.String
			resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("node_group"), &group)...)
			var list struct{ Items []object }
			if _, err := c.do(ctx, http.MethodGet, "/api/v1/tenants/"+url.PathEscape(tenant)+"/machines", nil, &list); err != nil {
				apiDiag(&resp.Diagnostics, "Listing the machines", err)
				return
			}
			var ms []attr.Value
			for _, m := range list.Items {
				if g := str(m, "spec", "nodeGroup"); !group.IsNull() && g != group.ValueString() {
					continue
				}
				ready, _ := lookup(m, []string{"status", "ready"})
				r, _ := ready.(bool)
				ms = append(ms, types.ObjectValueMust(machineType.AttrTypes, map[string]attr.Value{
					"name": types.StringValue(str(m, "metadata", "name")), "node_group": types.StringValue(str(m, "spec", "nodeGroup")),
					"role": types.StringValue(str(m, "spec", "role")), "address": types.StringValue(str(m, "spec", "address")),
					"stage": types.StringValue(str(m, "status", "stage")), "ready": types.BoolValue(r),
					"talos_version": types.StringValue(str(m, "status", "talosVersion")),
				}))
			}
			resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("tenant"), tenant)...)
			resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("node_group"), group)...)
			resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("machines"), types.ListValueMust(machineType, ms))...)
		}}
}

// talosconfigData is a talosconfig for the caller, valid for the server's
// --credential-ttl: read anew on every plan and apply.
func talosconfigData() *dataSource {
	return &dataSource{typeName: "talosconfig",
		schema: schema.Schema{Description: "A short-lived talosconfig for the tenant, with the Talos role of the caller's role.", Attributes: map[string]schema.Attribute{
			"tenant":     schema.StringAttribute{Required: true},
			"content":    schema.StringAttribute{Computed: true, Sensitive: true, Description: "The talosconfig (YAML)."},
			"role":       schema.StringAttribute{Computed: true, Description: "os:admin or os:reader."},
			"expires_at": schema.StringAttribute{Computed: true},
		}},
		read: func(ctx context.Context, c *Client, req datasource.ReadRequest, resp *datasource.ReadResponse) {
			tenant := tenantArg(ctx, req, &resp.Diagnostics)
			_, b, h, err := c.send(ctx, http.MethodGet, "/api/v1/tenants/"+url.PathEscape(tenant)+"/talosconfig", nil)
			if err != nil {
				apiDiag(&resp.Diagnostics, "Getting a talosconfig", err)
				return
			}
			set := func(k string, v any) { resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root(k), v)...) }
			set("tenant", tenant)
			set("content", string(b))
			set("role", h.Get("X-Rezus-Talos-Role"))
			set("expires_at", h.Get("X-Rezus-Credential-Expires"))
		}}
}

// kubeconfigData is a kubeconfig holding a short-lived client certificate
// of the caller (POST …/kubernetes/credential) instead of rezusctl's exec
// plugin, for tools that have no rezusctl.
func kubeconfigData() *dataSource {
	return &dataSource{typeName: "kubeconfig",
		schema: schema.Schema{Description: "A kubeconfig for the tenant's cluster with a client certificate of the caller, valid for the server's --credential-ttl.", Attributes: map[string]schema.Attribute{
			"tenant":     schema.StringAttribute{Required: true},
			"content":    schema.StringAttribute{Computed: true, Sensitive: true, Description: "The kubeconfig (YAML)."},
			"expires_at": schema.StringAttribute{Computed: true},
		}},
		read: func(ctx context.Context, c *Client, req datasource.ReadRequest, resp *datasource.ReadResponse) {
			tenant := tenantArg(ctx, req, &resp.Diagnostics)
			base := "/api/v1/tenants/" + url.PathEscape(tenant)
			_, kc, _, err := c.send(ctx, http.MethodGet, base+"/kubeconfig", nil)
			if err != nil {
				apiDiag(&resp.Diagnostics, "Getting the kubeconfig", err)
				return
			}
			var cred struct {
				Status struct {
					ExpirationTimestamp   string `json:"expirationTimestamp"`
					ClientCertificateData string `json:"clientCertificateData"`
					ClientKeyData         string `json:"clientKeyData"`
				} `json:"status"`
			}
			if _, err := c.do(ctx, http.MethodPost, base+"/kubernetes/credential", map[string]any{}, &cred); err != nil {
				apiDiag(&resp.Diagnostics, "Getting a Kubernetes credential", err)
				return
			}
			content, err := withClientCertificate(kc, []byte(cred.Status.ClientCertificateData), []byte(cred.Status.ClientKeyData))
			if err != nil {
				resp.Diagnostics.AddError("Writing the kubeconfig", err.Error())
				return
			}
			set := func(k string, v any) { resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root(k), v)...) }
			set("tenant", tenant)
			set("content", content)
			set("expires_at", cred.Status.ExpirationTimestamp)
		}}
}

// withClientCertificate replaces every user of a kubeconfig with the
// client certificate and key (PEM).
func withClientCertificate(kubeconfig, cert, key []byte) (string, error) {
	var doc map[string]any
	if err := yaml.Unmarshal(kubeconfig, &doc); err != nil {
		return "", fmt.Errorf("reading the server's kubeconfig: %w", err)
	}
	users := asList(doc["users"])
	if len(users) == 0 {
		return "", fmt.Errorf("the server's kubeconfig has no user")
	}
	for _, u := range users {
		m, ok := u.(map[string]any)
		if !ok {
			return "", fmt.Errorf("the server's kubeconfig has a user that is not a map")
		}
		m["user"] = map[string]any{
			"client-certificate-data": b64(cert),
			"client-key-data":         b64(key),
		}
	}
	out, err := yaml.Marshal(doc)
	return string(out), err
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func lookupMap(o object, p ...string) (map[string]any, bool) {
	v, ok := lookup(o, p)
	m, isMap := v.(map[string]any)
	return m, ok && isMap
}

func str(o object, p ...string) string {
	v, ok := lookup(o, p)
	if !ok || v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
