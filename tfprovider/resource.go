package tfprovider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// kindSpec is one API kind as a resource.
type kindSpec struct {
	// typeName follows rezuscloud_: "tenant", "node_group".
	typeName string
	// plural is the API's collection: "tenants", "nodegroups".
	plural       string
	tenantScoped bool
	desc         string
	fields       []field
	// noUpdate: the API takes no PUT (a Rollout); every field replaces.
	noUpdate bool
	// readyWords says what ready means, for the docs.
	readyWords string
	// ready says whether an object is ready (wait_for = "Ready") and, if
	// not, what it waits for; nil: the kind has no wait_for.
	ready func(ctx context.Context, c *Client, o object) (bool, string)
	// created copies what only a create's answer holds (an API token's
	// secret) into the state.
	created func(answer object, state map[string]attr.Value)
}

// allFields are the kind's fields after name, tenant and labels.
func (k *kindSpec) allFields() []field {
	fs := []field{{attr: "name", path: []string{"metadata", "name"}, required: true, forceNew: true,
		desc: "The object's name: a DNS-1123 label (lower-case letters, digits and '-', at most 63)."}}
	if k.tenantScoped {
		fs = append(fs, field{attr: "tenant", path: []string{"metadata", "tenant"}, required: true, forceNew: true, desc: "The tenant the object belongs to."})
	}
	fs = append(fs, field{attr: "labels", path: []string{"metadata", "labels"}, kind: fStringMap, forceNew: k.noUpdate,
		desc: "The object's labels (rollouts and bindings select tenants by them)."})
	for _, f := range k.fields {
		if k.noUpdate && !f.computed {
			f.forceNew = true
		}
		fs = append(fs, f)
	}
	if k.ready != nil {
		fs = append(fs,
			field{attr: "wait_for", local: true, desc: `"Ready": a create or change waits until the object is ready (` + k.readyWords + `); none: it does not wait.`},
			field{attr: "wait_timeout", local: true, desc: "How long wait_for waits (a Go duration; default 20m)."})
	}
	return fs
}

func (k *kindSpec) collection(tenant string) string {
	if k.tenantScoped {
		return "/api/v1/tenants/" + url.PathEscape(tenant) + "/" + k.plural
	}
	return "/api/v1/" + k.plural
}

func (k *kindSpec) item(tenant, name string) string {
	return k.collection(tenant) + "/" + url.PathEscape(name)
}

// id is "tenant/name" for a tenant-scoped object, else its name.
func (k *kindSpec) id(tenant, name string) string {
	if k.tenantScoped {
		return tenant + "/" + name
	}
	return name
}

// objectResource is the resource of a kindSpec.
type objectResource struct {
	kind   *kindSpec
	client *Client
}

func newObjectResource(k *kindSpec) func() resource.Resource {
	return func() resource.Resource { return &objectResource{kind: k} }
}

var (
	_ resource.ResourceWithConfigure   = (*objectResource)(nil)
	_ resource.ResourceWithImportState = (*objectResource)(nil)
)

func (r *objectResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_" + r.kind.typeName
}

func (r *objectResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	attrs := map[string]schema.Attribute{
		"id": schema.StringAttribute{Computed: true, Description: "tenant/name for a tenant's object, else the name (what `tofu import` takes).",
			PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()}},
	}
	for _, f := range r.kind.allFields() {
		attrs[f.attr] = f.schemaAttribute()
	}
	resp.Schema = schema.Schema{Description: r.kind.desc, Attributes: attrs}
}

func (r *objectResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	if req.ProviderData == nil {
		return
	}
	c, ok := req.ProviderData.(*Client)
	if !ok {
		resp.Diagnostics.AddError("Unexpected provider data", fmt.Sprintf("want *tfprovider.Client, got %T", req.ProviderData))
		return
	}
	r.client = c
}

// values reads every field of src.
func (r *objectResource) values(ctx context.Context, src getter, diags *diag.Diagnostics) map[string]attr.Value {
	vs := map[string]attr.Value{}
	for _, f := range r.kind.allFields() {
		vs[f.attr] = f.value(ctx, src, diags)
	}
	return vs
}

// setter is a state.
type setter interface {
	SetAttribute(ctx context.Context, p path.Path, v any) diag.Diagnostics
}

// store writes the object into the state: every field read back, equal
// values of prior kept (field.fromAPI).
func (r *objectResource) store(ctx context.Context, o object, prior map[string]attr.Value, dst setter, diags *diag.Diagnostics) {
	tenant, _ := lookup(o, []string{"metadata", "tenant"})
	name, _ := lookup(o, []string{"metadata", "name"})
	diags.Append(dst.SetAttribute(ctx, path.Root("id"), types.StringValue(r.kind.id(fmt.Sprint(tenant), fmt.Sprint(name))))...)
	for _, f := range r.kind.allFields() {
		raw, found := lookup(o, f.path)
		diags.Append(dst.SetAttribute(ctx, path.Root(f.attr), f.fromAPI(raw, found, prior[f.attr]))...)
	}
}

func (r *objectResource) ready(diags *diag.Diagnostics) bool {
	if r.client == nil {
		diags.AddError("The provider is not configured", "set the rezuscloud provider's endpoint and token (or REZUSCLOUD_ENDPOINT and REZUSCLOUD_TOKEN)")
		return false
	}
	return true
}

func (r *objectResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	if !r.ready(&resp.Diagnostics) {
		return
	}
	plan := r.values(ctx, req.Plan, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	o := object{}
	for _, f := range r.kind.allFields() {
		if f.computed || f.local || f.attr == "tenant" {
			continue
		}
		v, ok, err := f.toAPI(plan[f.attr])
		if err != nil {
			resp.Diagnostics.AddAttributeError(path.Root(f.attr), "Invalid value", err.Error())
			continue
		}
		if ok {
			put(o, f.path, v)
		}
	}
	if resp.Diagnostics.HasError() {
		return
	}
	tenant := stringOf(plan["tenant"])
	var answer object
	if _, err := r.client.do(ctx, http.MethodPost, r.kind.collection(tenant), o, &answer); err != nil {
		r.apiError(err, "Creating the "+r.kind.typeName, &resp.Diagnostics)
		return
	}
	r.store(ctx, answer, plan, &resp.State, &resp.Diagnostics)
	r.wait(ctx, plan, &resp.Diagnostics)
	if r.kind.created != nil {
		extra := map[string]attr.Value{}
		r.kind.created(answer, extra)
		for k, v := range extra {
			resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root(k), v)...)
		}
	}
}

func (r *objectResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	if !r.ready(&resp.Diagnostics) {
		return
	}
	prior := r.values(ctx, req.State, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	o, err := r.client.get(ctx, r.kind.item(stringOf(prior["tenant"]), stringOf(prior["name"])))
	if IsNotFound(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		r.apiError(err, "Reading the "+r.kind.typeName, &resp.Diagnostics)
		return
	}
	r.store(ctx, o, prior, &resp.State, &resp.Diagnostics)
}

// Update changes the fields the configuration manages on the object as
// the server holds it now, and keeps everything else the server has
// (fields written by controllers, fields left to their defaults). A
// managed field changed outside tofu since the last refresh fails the
// apply instead of being overwritten: the next plan shows it.
func (r *objectResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	if !r.ready(&resp.Diagnostics) {
		return
	}
	plan := r.values(ctx, req.Plan, &resp.Diagnostics)
	prior := r.values(ctx, req.State, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	item := r.kind.item(stringOf(prior["tenant"]), stringOf(prior["name"]))
	fresh, err := r.client.get(ctx, item)
	if err != nil {
		r.apiError(err, "Reading the "+r.kind.typeName+" before changing it", &resp.Diagnostics)
		return
	}
	for _, f := range r.kind.allFields() {
		if f.computed || f.writeOnly || f.local {
			continue
		}
		raw, found := lookup(fresh, f.path)
		if now := f.fromAPI(raw, found, prior[f.attr]); !now.Equal(prior[f.attr]) && !prior[f.attr].IsUnknown() {
			resp.Diagnostics.AddAttributeError(path.Root(f.attr), "Changed outside OpenTofu",
				fmt.Sprintf("%s is %s on the server, not %s as last read: it was changed since the plan. Run the plan again to see the change.", f.attr, now, prior[f.attr]))
		}
	}
	if resp.Diagnostics.HasError() {
		return
	}
	for _, f := range r.kind.allFields() {
		// A write-only field goes only when it changes: a user's
		// password sent again would end their sessions and tokens.
		if f.computed || f.local || f.writeOnly && plan[f.attr].Equal(prior[f.attr]) {
			continue
		}
		v, ok, err := f.toAPI(plan[f.attr])
		switch {
		case err != nil:
			resp.Diagnostics.AddAttributeError(path.Root(f.attr), "Invalid value", err.Error())
		case ok:
			put(fresh, f.path, v)
		case !f.defaulted && !plan[f.attr].IsUnknown():
			remove(fresh, f.path)
		}
	}
	if resp.Diagnostics.HasError() {
		return
	}
	delete(fresh, "status")
	var answer object
	if _, err := r.client.do(ctx, http.MethodPut, item, fresh, &answer); err != nil {
		r.apiError(err, "Changing the "+r.kind.typeName, &resp.Diagnostics)
		return
	}
	r.store(ctx, answer, plan, &resp.State, &resp.Diagnostics)
	r.wait(ctx, plan, &resp.Diagnostics)
}

// readyPoll is how often wait_for asks.
const readyPoll = 2 * time.Second

// wait waits, when wait_for says "Ready", until the kind's ready says so
// or wait_timeout passes.
func (r *objectResource) wait(ctx context.Context, plan map[string]attr.Value, diags *diag.Diagnostics) {
	if r.kind.ready == nil || diags.HasError() {
		return
	}
	switch w := stringOf(plan["wait_for"]); w {
	case "":
		return
	case "Ready":
	default:
		diags.AddAttributeError(path.Root("wait_for"), "Invalid wait_for", fmt.Sprintf("%q: want \"Ready\" or nothing", w))
		return
	}
	timeout := 20 * time.Minute
	if s := stringOf(plan["wait_timeout"]); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			diags.AddAttributeError(path.Root("wait_timeout"), "Invalid wait_timeout", fmt.Sprintf("%q: want a Go duration such as 20m", s))
			return
		}
		timeout = d
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	item := r.kind.item(stringOf(plan["tenant"]), stringOf(plan["name"]))
	why := "its first answer"
	t := time.NewTicker(readyPoll)
	defer t.Stop()
	for {
		o, err := r.client.get(ctx, item)
		if err == nil {
			var done bool
			if done, why = r.kind.ready(ctx, r.client, o); done {
				return
			}
		}
		select {
		case <-ctx.Done():
			diags.AddAttributeError(path.Root("wait_for"), "Not ready within wait_timeout",
				fmt.Sprintf("%s %s is not ready after %s: waiting for %s", r.kind.typeName, item, timeout, why))
			return
		case <-t.C:
		}
	}
}

// Delete deletes the object and waits until it is gone: a tenant with
// machines, or an object with finalizers, is removed by controllers after
// the DELETE answers.
func (r *objectResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	if !r.ready(&resp.Diagnostics) {
		return
	}
	prior := r.values(ctx, req.State, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	item := r.kind.item(stringOf(prior["tenant"]), stringOf(prior["name"]))
	code, err := r.client.do(ctx, http.MethodDelete, item, nil, nil)
	if IsNotFound(err) {
		return
	}
	if err != nil {
		r.apiError(err, "Deleting the "+r.kind.typeName, &resp.Diagnostics)
		return
	}
	if code == http.StatusOK {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, deleteWait)
	defer cancel()
	if err := waitGone(wctx, r.client, item); err != nil {
		resp.Diagnostics.AddError("Waiting for the "+r.kind.typeName+" to be deleted", err.Error())
	}
}

// deleteWait bounds the wait for a deleted object's finalizers (a
// tenant's machines are destroyed by tofu first).
const deleteWait = 30 * time.Minute

// deletePoll is how often a delete asks whether the object is gone.
const deletePoll = time.Second

// waitGone waits until item answers 404, or ctx ends (tofu's own timeout,
// or an interrupt).
func waitGone(ctx context.Context, c *Client, item string) error {
	t := time.NewTicker(deletePoll)
	defer t.Stop()
	for {
		_, err := c.get(ctx, item)
		switch {
		case IsNotFound(err):
			return nil
		case err != nil && ctx.Err() != nil:
			return fmt.Errorf("%s is still there: %w", item, ctx.Err())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s is still there (its finalizers have not gone): %w", item, ctx.Err())
		case <-t.C:
		}
	}
}

func (r *objectResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	tenant, name := "", req.ID
	if r.kind.tenantScoped {
		var ok bool
		if tenant, name, ok = strings.Cut(req.ID, "/"); !ok || tenant == "" || name == "" {
			resp.Diagnostics.AddError("Invalid import ID", fmt.Sprintf("%q: want TENANT/NAME", req.ID))
			return
		}
		resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("tenant"), tenant)...)
	} else if name == "" || strings.Contains(name, "/") {
		resp.Diagnostics.AddError("Invalid import ID", fmt.Sprintf("%q: want the object's name", req.ID))
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("name"), name)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), r.kind.id(tenant, name))...)
}

// apiError turns an API error into diagnostics: each cause on the
// attribute of its field (the longest field path it starts with), the
// rest as an error of the resource.
func (r *objectResource) apiError(err error, summary string, diags *diag.Diagnostics) {
	var e *APIError
	if !errors.As(err, &e) {
		diags.AddError(summary, err.Error())
		return
	}
	placed := false
	if e.Status.Details != nil {
		for _, c := range e.Status.Details.Causes {
			if f, ok := r.fieldOf(c.Field); ok {
				diags.AddAttributeError(path.Root(f.attr), summary, c.Field+": "+c.Message)
				placed = true
			}
		}
	}
	if !placed {
		diags.AddError(summary, e.Error())
	}
}

// fieldOf is the field an API field path ("spec.network.podSubnets[1]")
// falls in.
func (r *objectResource) fieldOf(apiPath string) (field, bool) {
	var best field
	n := -1
	for _, f := range r.kind.allFields() {
		p := strings.Join(f.path, ".")
		if (apiPath == p || strings.HasPrefix(apiPath, p+".") || strings.HasPrefix(apiPath, p+"[")) && len(p) > n {
			best, n = f, len(p)
		}
	}
	return best, n >= 0
}

func stringOf(v attr.Value) string {
	if s, ok := v.(types.String); ok {
		return s.ValueString()
	}
	return ""
}
