package tfprovider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// addressResource is emulated_address: a reserved loopback IP, like a cloud's
// reserved IP, known before the machine that boots on it (a control plane's
// endpoint).
type addressResource struct{ client *Client }

func newAddressResource() resource.Resource { return &addressResource{} }

type addressModel struct {
	ID      types.String `tfsdk:"id"`
	Name    types.String `tfsdk:"name"`
	Address types.String `tfsdk:"address"`
}

var (
	_ resource.ResourceWithConfigure   = (*addressResource)(nil)
	_ resource.ResourceWithImportState = (*addressResource)(nil)
)

func (r *addressResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_address"
}

func (r *addressResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	keep := []planmodifier.String{stringplanmodifier.UseStateForUnknown()}
	resp.Schema = schema.Schema{
		Description: "A reserved address on the emulator: an IP a machine can boot on (emulated_machine.address).",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{Computed: true, Description: "The reservation's name.", PlanModifiers: keep},
			"name": schema.StringAttribute{
				Required:      true,
				Description:   "The reservation's name, unique in the emulator (a DNS-1123 label).",
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"address": schema.StringAttribute{Computed: true, Description: "The reserved IP.", PlanModifiers: keep},
		},
	}
}

func (r *addressResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.client = clientFrom(req, resp)
}

func (r *addressResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m addressModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || !configured(r.client, &resp.Diagnostics) {
		return
	}
	a, err := r.client.ReserveAddress(ctx, m.Name.ValueString())
	if IsAlreadyExists(err) {
		// Left by a run interrupted before its state recorded it: reservation
		// names are unique per emulator (RezusCloud prefixes them with the
		// tenant), so the reservation is this resource's.
		if old, gerr := r.client.GetAddress(ctx, m.Name.ValueString()); gerr == nil {
			resp.Diagnostics.AddWarning("Adopted existing emulated address "+m.Name.String(),
				"the reservation existed (left by an interrupted apply); it is now managed by this resource")
			a, err = old, nil
		}
	}
	if err != nil {
		resp.Diagnostics.AddError("Could not reserve emulated address "+m.Name.String(), err.Error())
		return
	}
	m.fill(a)
	resp.Diagnostics.Append(resp.State.Set(ctx, m)...)
}

func (r *addressResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m addressModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || !configured(r.client, &resp.Diagnostics) {
		return
	}
	a, err := r.client.GetAddress(ctx, m.ID.ValueString())
	if IsNotFound(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		resp.Diagnostics.AddError("Could not read emulated address "+m.ID.String(), err.Error())
		return
	}
	m.fill(a)
	resp.Diagnostics.Append(resp.State.Set(ctx, m)...)
}

// Update is never planned (every configurable attribute replaces), but the
// framework requires it.
func (r *addressResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m addressModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, m)...)
}

func (r *addressResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m addressModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || !configured(r.client, &resp.Diagnostics) {
		return
	}
	if err := r.client.ReleaseAddress(ctx, m.ID.ValueString()); err != nil && !IsNotFound(err) {
		resp.Diagnostics.AddError("Could not release emulated address "+m.ID.String(), err.Error())
	}
}

// ImportState adopts a reservation by name: `tofu import emulated_address.cp demo-cp`.
func (r *addressResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resource.ImportStatePassthroughID(ctx, path.Root("id"), req, resp)
}

func (m *addressModel) fill(a Address) {
	m.ID = types.StringValue(a.Name)
	m.Name = types.StringValue(a.Name)
	m.Address = types.StringValue(a.Address)
}

// configured reports whether the provider had an endpoint to hand out a client for.
func configured(c *Client, diags *diag.Diagnostics) bool {
	if c == nil {
		diags.AddError("The emulated provider is not configured",
			"its endpoint was unknown when the provider was configured; set endpoint to the emulator's HTTP API")
		return false
	}
	return true
}
