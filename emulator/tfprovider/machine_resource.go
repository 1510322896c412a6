package tfprovider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// ProviderIDPrefix starts every emulated machine's provider_id.
const ProviderIDPrefix = "emulated://"

// machineResource is emulated_machine: an emulated Talos node booted with its
// machine config as user data.
type machineResource struct{ client *Client }

func newMachineResource() resource.Resource { return &machineResource{} }

type machineModel struct {
	ID           types.String `tfsdk:"id"`
	Name         types.String `tfsdk:"name"`
	Cluster      types.String `tfsdk:"cluster"`
	UserData     types.String `tfsdk:"user_data"`
	Address      types.String `tfsdk:"address"`
	TalosPort    types.Int64  `tfsdk:"talos_port"`
	Hostname     types.String `tfsdk:"hostname"`
	TalosVersion types.String `tfsdk:"talos_version"`
	ProviderID   types.String `tfsdk:"provider_id"`
}

var (
	_ resource.ResourceWithConfigure   = (*machineResource)(nil)
	_ resource.ResourceWithImportState = (*machineResource)(nil)
)

func (r *machineResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_machine"
}

func (r *machineResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	keep := []planmodifier.String{stringplanmodifier.UseStateForUnknown()}
	replace := []planmodifier.String{stringplanmodifier.RequiresReplace()}
	resp.Schema = schema.Schema{
		Description: "An emulated Talos machine, booted with its machine config as user data.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{Computed: true, Description: "The machine's name.", PlanModifiers: keep},
			"name": schema.StringAttribute{
				Required:      true,
				Description:   "The machine's name and hostname, unique in the emulator (a DNS-1123 label).",
				PlanModifiers: replace,
			},
			"cluster": schema.StringAttribute{
				Optional:      true,
				Description:   "A free-form label grouping machines in the emulator.",
				PlanModifiers: replace,
			},
			"user_data": schema.StringAttribute{
				Required:  true,
				Sensitive: true,
				Description: "The machine config (plain text) the machine boots with. A change updates the state " +
					"only: like a cloud's user data it is read at first boot, and later config changes go through the Talos API.",
			},
			"address": schema.StringAttribute{
				Optional: true,
				Computed: true,
				Description: "The IP the machine's Talos API listens on. Set it to a reserved emulated_address's address " +
					"to boot there; otherwise the emulator picks one.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown(), stringplanmodifier.RequiresReplace()},
			},
			"talos_port": schema.Int64Attribute{
				Computed:      true,
				Description:   "The port of the machine's Talos API (50000 unless the emulator gives each machine a port).",
				PlanModifiers: []planmodifier.Int64{int64planmodifier.UseStateForUnknown()},
			},
			"hostname":      schema.StringAttribute{Computed: true, Description: "The machine's hostname.", PlanModifiers: keep},
			"talos_version": schema.StringAttribute{Computed: true, Description: "The Talos version the machine runs.", PlanModifiers: keep},
			"provider_id": schema.StringAttribute{
				Computed: true, Description: "The machine's provider id, " + ProviderIDPrefix + "<name>.", PlanModifiers: keep,
			},
		},
	}
}

func (r *machineResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.client = clientFrom(req, resp)
}

func (r *machineResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m machineModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || !configured(r.client, &resp.Diagnostics) {
		return
	}
	spec := NodeSpec{Name: m.Name.ValueString(), Cluster: m.Cluster.ValueString(), UserData: []byte(m.UserData.ValueString())}
	if !m.Address.IsUnknown() {
		spec.Address = m.Address.ValueString()
	}
	n, err := r.client.CreateNode(ctx, spec)
	if IsAlreadyExists(err) && spec.Cluster != "" {
		// A run interrupted after the emulator made the node but before the
		// state recorded it (a crash, a kill -9) leaves the node behind:
		// take it over when it is the same cluster's and on the requested
		// address, as a cloud instance found by its unique name would be.
		if old, gerr := r.client.GetNode(ctx, spec.Name); gerr == nil && old.Cluster == spec.Cluster && sameHost(old, spec.Address) {
			resp.Diagnostics.AddWarning("Adopted existing emulated machine "+m.Name.String(),
				"a node of cluster "+spec.Cluster+" with this name existed (left by an interrupted apply); it is now managed by this resource")
			n, err = old, nil
		}
	}
	if err != nil {
		resp.Diagnostics.AddError("Could not create emulated machine "+m.Name.String(), err.Error())
		return
	}
	if err := m.fill(n); err != nil {
		resp.Diagnostics.AddError("Unexpected answer creating emulated machine "+m.Name.String(), err.Error())
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, m)...)
}

// Read refreshes what the emulator knows; a machine that is gone leaves the
// state, so the next plan creates it again.
func (r *machineResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m machineModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || !configured(r.client, &resp.Diagnostics) {
		return
	}
	n, err := r.client.GetNode(ctx, m.ID.ValueString())
	if IsNotFound(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		resp.Diagnostics.AddError("Could not read emulated machine "+m.ID.String(), err.Error())
		return
	}
	if err := m.fill(n); err != nil {
		resp.Diagnostics.AddError("Unexpected answer reading emulated machine "+m.ID.String(), err.Error())
		return
	}
	if n.Cluster != "" || !m.Cluster.IsNull() {
		m.Cluster = types.StringValue(n.Cluster)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, m)...)
}

// Update only ever changes user_data (everything else replaces): it is kept
// in the state and nothing is sent, since user data is read at first boot.
func (r *machineResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m machineModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, m)...)
}

// Delete stops the machine; one that is gone already counts as deleted.
func (r *machineResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m machineModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || !configured(r.client, &resp.Diagnostics) {
		return
	}
	if err := r.client.DeleteNode(ctx, m.ID.ValueString()); err != nil && !IsNotFound(err) {
		resp.Diagnostics.AddError("Could not delete emulated machine "+m.ID.String(), err.Error())
	}
}

// ImportState adopts a machine by name: `tofu import emulated_machine.cp demo-cp-0`.
// Its user_data is unknown to the emulator's API, so it stays empty until the
// configuration sets it (an in-place, state-only update).
func (r *machineResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resource.ImportStatePassthroughID(ctx, path.Root("id"), req, resp)
}

// fill sets what the emulator decides from its answer.
func (m *machineModel) fill(n Node) error {
	host, port, err := n.HostPort()
	if err != nil {
		return err
	}
	m.ID = types.StringValue(n.Name)
	m.Name = types.StringValue(n.Name)
	m.Address = types.StringValue(host)
	m.TalosPort = types.Int64Value(int64(port))
	m.Hostname = types.StringValue(n.Name)
	m.TalosVersion = types.StringValue(n.Version)
	m.ProviderID = types.StringValue(ProviderIDPrefix + n.Name)
	return nil
}

// sameHost reports whether node n listens on address (any address when empty).
func sameHost(n Node, address string) bool {
	if address == "" {
		return true
	}
	host, _, err := n.HostPort()
	return err == nil && host == address
}
