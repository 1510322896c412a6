package webui

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

// patchRoutes serve a tenant's config patches: the editor, the enable toggle,
// deletion and the preview of what a patch changes in each node group's config.
func (u *UI) patchRoutes(p *pages) {
	p.GET("/tenants/:tenant/patches/new", u.newPatch)
	p.POST("/tenants/:tenant/patches", u.createPatch)
	p.GET("/tenants/:tenant/patches/:name/edit", u.editPatch)
	p.POST("/tenants/:tenant/patches/:name", u.updatePatch)
	p.POST("/tenants/:tenant/patches/:name/toggle", u.togglePatch)
	p.DELETE("/tenants/:tenant/patches/:name", u.deletePatch)
	p.GET("/tenants/:tenant/patches/:name/preview", u.previewPatch)
}

// patchForm is the editor's values and the API's refusal.
type patchForm struct {
	Tenant string
	Name   string
	// Edit is set when changing a stored patch: the name is fixed and the
	// update is conditional on ResourceVersion, so a stale edit is refused.
	Edit            bool
	ResourceVersion string
	TargetKind      string
	TargetName      string
	Format          string
	Patch           string
	Enabled         bool
	Weight          string
	// Targets are names to suggest for target.name: roles, node groups, machines.
	Targets []string
	Errors  formErrors
	// Impact is what the patch would do, shown when asked before the Save.
	Impact *impactShown
}

// patchFormFields are the editor's fields as the API names them in causes.
var patchFormFields = []string{"metadata.name", "metadata.resourceVersion", "spec.target.kind", "spec.target.name",
	"spec.target", "spec.format", "spec.patch", "spec.enabled", "spec.weight"}

// action is where the editor posts.
func (f patchForm) action() string {
	if f.Edit {
		return "/ui/tenants/" + f.Tenant + "/patches/" + f.Name
	}
	return "/ui/tenants/" + f.Tenant + "/patches"
}

// readPatchForm reads the editor's fields. Browsers send a textarea's line
// breaks as CRLF; the patch is stored with LF like any YAML file.
func readPatchForm(c echo.Context) patchForm {
	return patchForm{
		Tenant:          c.Param("tenant"),
		Name:            strings.TrimSpace(c.FormValue("metadata.name")),
		ResourceVersion: c.FormValue("metadata.resourceVersion"),
		TargetKind:      strings.TrimSpace(c.FormValue("spec.target.kind")),
		TargetName:      strings.TrimSpace(c.FormValue("spec.target.name")),
		Format:          strings.TrimSpace(c.FormValue("spec.format")),
		Patch:           strings.ReplaceAll(c.FormValue("spec.patch"), "\r\n", "\n"),
		Enabled:         c.FormValue("spec.enabled") == "true",
		Weight:          strings.TrimSpace(c.FormValue("spec.weight")),
	}
}

// spec is the form as a ConfigPatch spec; the API validates everything but
// the weight's syntax, which a JSON number cannot carry.
func (f patchForm) spec() (map[string]any, []domain.Cause) {
	weight := 0
	if f.Weight != "" {
		w, err := strconv.Atoi(f.Weight)
		if err != nil {
			return nil, []domain.Cause{{Field: "spec.weight", Type: domain.CauseInvalid, Message: "must be a whole number from 0 to 1000"}}
		}
		weight = w
	}
	target := map[string]any{"kind": f.TargetKind}
	if f.TargetName != "" {
		target["name"] = f.TargetName
	}
	return map[string]any{"target": target, "patch": f.Patch, "format": f.Format, "enabled": f.Enabled, "weight": weight}, nil
}

// patchFormOf fills the editor from a stored patch.
func patchFormOf(p domain.ConfigPatch) patchForm {
	p.Spec.Default()
	return patchForm{Tenant: p.Metadata.Tenant, Name: p.Metadata.Name, Edit: true, ResourceVersion: p.Metadata.ResourceVersion,
		TargetKind: p.Spec.Target.Kind, TargetName: p.Spec.Target.Name, Format: p.Spec.Format, Patch: p.Spec.Patch,
		Enabled: *p.Spec.Enabled, Weight: strconv.Itoa(p.Spec.Weight)}
}

// patchRows is the live table of the tenant's patches, in the order they apply.
func (u *UI) patchRows(c echo.Context, tenant string) (templ.Component, error) {
	ps, err := listOf[domain.ConfigPatch](u, c.Request(), "/tenants/"+tenant+"/configpatches")
	if err != nil {
		return nil, err
	}
	for i := range ps {
		ps[i].Spec.Default()
	}
	sort.SliceStable(ps, func(i, j int) bool {
		if ps[i].Spec.Weight != ps[j].Spec.Weight {
			return ps[i].Spec.Weight < ps[j].Spec.Weight
		}
		return ps[i].Metadata.Name < ps[j].Metadata.Name
	})
	return patchTable(viewerOf(c), tenant, ps), nil
}

// patchTargets suggests target names: the roles, then the tenant's node
// groups and machines. Missing suggestions are no reason to fail the form.
func (u *UI) patchTargets(r *http.Request, tenant string) []string {
	out := []string{domain.RoleControlPlane, domain.RoleWorker}
	if ngs, err := listOf[domain.NodeGroup](u, r, "/tenants/"+tenant+"/nodegroups"); err == nil {
		for _, ng := range ngs {
			out = append(out, ng.Metadata.Name)
		}
	}
	if ms, err := listOf[domain.Machine](u, r, "/tenants/"+tenant+"/machines"); err == nil {
		for _, m := range ms {
			out = append(out, m.Metadata.Name)
		}
	}
	return out
}

// renderPatchForm answers the editor: alone for htmx, else as a page.
func (u *UI) renderPatchForm(c echo.Context, code int, f patchForm) error {
	v := viewerOf(c)
	f.Targets = u.patchTargets(c.Request(), f.Tenant)
	if isHTMX(c) {
		return render(c, code, patchEditor(v, f))
	}
	return render(c, code, PatchFormPage(u, v, f))
}

// patchRefused answers an API refusal of the editor: causes and conflicts
// are shown on the form, anything else (403, a missing tenant) as an error.
func (u *UI) patchRefused(c echo.Context, f patchForm, err error) error {
	switch domain.ReasonOf(err) {
	case domain.ReasonInvalid, domain.ReasonBadRequest, domain.ReasonConflict, domain.ReasonAlreadyExists:
		f.Errors = toFormErrors(err, patchFormFields...)
		return u.renderPatchForm(c, errorCode(err), f)
	}
	return u.fail(c, err)
}

// patchSaved answers a successful save: htmx gets a note in place of the
// editor (the table follows over SSE), a plain form goes back to the tenant.
func (u *UI) patchSaved(c echo.Context, code int, tenant, msg string) error {
	if isHTMX(c) {
		return render(c, code, patchEditorDone(msg))
	}
	return c.Redirect(http.StatusSeeOther, "/ui/tenants/"+tenant+"#patches")
}

func (u *UI) newPatch(c echo.Context) error {
	if err := writerOf(c, c.Param("tenant"), domain.ConfigPatchKind.Kind, "", "config patches"); err != nil {
		return u.fail(c, err)
	}
	return u.renderPatchForm(c, http.StatusOK, patchForm{Tenant: c.Param("tenant"), TargetKind: domain.TargetAll,
		Format: domain.PatchStrategic, Enabled: true, Weight: "0"})
}

func (u *UI) createPatch(c echo.Context) error {
	f := readPatchForm(c)
	spec, causes := f.spec()
	if causes != nil {
		return u.patchRefused(c, f, domain.NewInvalid(domain.ConfigPatchKind.Kind, f.Name, causes))
	}
	obj := map[string]any{"apiVersion": domain.APIVersion, "kind": domain.ConfigPatchKind.Kind,
		"metadata": map[string]any{"name": f.Name}, "spec": spec}
	if wantsImpact(c) {
		imp, err := u.dryRunImpact(c, http.MethodPost, "/tenants/"+f.Tenant+"/configpatches", obj)
		if err != nil {
			return u.patchRefused(c, f, err)
		}
		f.Impact = &imp
		return u.renderPatchForm(c, http.StatusOK, f)
	}
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodPost, Path: "/tenants/" + f.Tenant + "/configpatches", Body: obj}, nil); err != nil {
		return u.patchRefused(c, f, err)
	}
	return u.patchSaved(c, http.StatusCreated, f.Tenant, fmt.Sprintf("Config patch %s created.", f.Name))
}

func (u *UI) editPatch(c echo.Context) error {
	if err := writerOf(c, c.Param("tenant"), domain.ConfigPatchKind.Kind, c.Param("name"), "config patches"); err != nil {
		return u.fail(c, err)
	}
	p, err := getOf[domain.ConfigPatch](u, c.Request(), patchPath(c.Param("tenant"), c.Param("name")))
	if err != nil {
		return u.fail(c, err)
	}
	return u.renderPatchForm(c, http.StatusOK, patchFormOf(*p))
}

// updatePatch replaces the patch's spec, keeping the rest of the object,
// on condition that it is still the version the editor was opened on.
func (u *UI) updatePatch(c echo.Context) error {
	f := readPatchForm(c)
	f.Name, f.Edit = c.Param("name"), true
	spec, causes := f.spec()
	if causes != nil {
		return u.patchRefused(c, f, domain.NewInvalid(domain.ConfigPatchKind.Kind, f.Name, causes))
	}
	var cur map[string]any
	if err := u.api.call(c.Request(), apiRequest{Path: patchPath(f.Tenant, f.Name)}, &cur); err != nil {
		return u.fail(c, err)
	}
	meta, _ := cur["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{"name": f.Name}
	}
	meta["resourceVersion"] = f.ResourceVersion
	cur["metadata"], cur["spec"] = meta, spec
	delete(cur, "status")
	if wantsImpact(c) {
		imp, err := u.dryRunImpact(c, http.MethodPut, patchPath(f.Tenant, f.Name), cur)
		if err != nil {
			return u.patchRefused(c, f, err)
		}
		f.Impact = &imp
		return u.renderPatchForm(c, http.StatusOK, f)
	}
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodPut, Path: patchPath(f.Tenant, f.Name), Body: cur}, nil); err != nil {
		if domain.IsConflict(err) {
			// Offer the stored version again; the user's text stays in the form.
			if fresh, gerr := getOf[domain.ConfigPatch](u, c.Request(), patchPath(f.Tenant, f.Name)); gerr == nil {
				f.ResourceVersion = fresh.Metadata.ResourceVersion
			}
		}
		return u.patchRefused(c, f, err)
	}
	return u.patchSaved(c, http.StatusOK, f.Tenant, fmt.Sprintf("Config patch %s saved.", f.Name))
}

// togglePatch enables or disables a patch (merge patch of spec.enabled to
// the state the button asks for, so a double click does no harm) and answers
// the fresh table.
func (u *UI) togglePatch(c echo.Context) error {
	t, name := c.Param("tenant"), c.Param("name")
	enabled := c.FormValue("enabled") == "true"
	body := fmt.Appendf(nil, `{"spec":{"enabled":%t}}`, enabled)
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodPatch, Path: patchPath(t, name), Body: body,
		ContentType: "application/merge-patch+json"}, nil); err != nil {
		return u.fail(c, err)
	}
	return u.patchTableAnswer(c, t)
}

func (u *UI) deletePatch(c echo.Context) error {
	t, name := c.Param("tenant"), c.Param("name")
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodDelete, Path: patchPath(t, name)}, nil); err != nil {
		return u.fail(c, err)
	}
	return u.patchTableAnswer(c, t)
}

// patchTableAnswer answers an action on the table: htmx gets the table, a
// plain request goes back to the tenant.
func (u *UI) patchTableAnswer(c echo.Context, tenant string) error {
	if !isHTMX(c) {
		return c.Redirect(http.StatusSeeOther, "/ui/tenants/"+tenant+"#patches")
	}
	rows, err := u.patchRows(c, tenant)
	if err != nil {
		return u.fail(c, err)
	}
	return render(c, http.StatusOK, rows)
}

// groupConfigDiff is what a patch changes in one node group's config.
type groupConfigDiff struct {
	Group, Role string
	Lines       []udiffLine
	Err         string
}

// previewPatch shows, for every node group of the tenant (hence each role),
// the unified diff of its config without and with the patch, as the API
// renders it (?diff=name; the patch is taken as enabled, its target kept).
func (u *UI) previewPatch(c echo.Context) error {
	t, name := c.Param("tenant"), c.Param("name")
	if _, err := getOf[domain.ConfigPatch](u, c.Request(), patchPath(t, name)); err != nil {
		return u.fail(c, err)
	}
	ngs, err := listOf[domain.NodeGroup](u, c.Request(), "/tenants/"+t+"/nodegroups")
	if err != nil {
		return u.fail(c, err)
	}
	sort.Slice(ngs, func(i, j int) bool {
		if ngs[i].Spec.Role != ngs[j].Spec.Role {
			return ngs[i].Spec.Role < ngs[j].Spec.Role
		}
		return ngs[i].Metadata.Name < ngs[j].Metadata.Name
	})
	diffs := make([]groupConfigDiff, 0, len(ngs))
	for _, ng := range ngs {
		var raw []byte
		err := u.api.call(c.Request(), apiRequest{Path: "/tenants/" + t + "/nodegroups/" + url.PathEscape(ng.Metadata.Name) + "/config" +
			query("diff", name)}, &raw)
		d := groupConfigDiff{Group: ng.Metadata.Name, Role: ng.Spec.Role}
		switch {
		case domain.ReasonOf(err) == domain.ReasonForbidden || domain.ReasonOf(err) == domain.ReasonUnauthorized:
			return u.fail(c, err)
		case err != nil:
			d.Err = errorMessage(err)
		default:
			d.Lines = udiffLines(string(raw))
		}
		diffs = append(diffs, d)
	}
	if isHTMX(c) {
		return render(c, http.StatusOK, patchPreview(t, name, diffs))
	}
	return render(c, http.StatusOK, PatchPreviewPage(u, viewerOf(c), t, name, diffs))
}

func patchPath(tenant, name string) string {
	return "/tenants/" + tenant + "/configpatches/" + url.PathEscape(name)
}

// udiffLine is one line of a unified diff with its kind: "add", "del",
// "hunk", "file" or "" for context.
type udiffLine struct {
	Kind, Text string
}

func udiffLines(diff string) []udiffLine {
	diff = strings.TrimSuffix(diff, "\n")
	if diff == "" {
		return nil
	}
	lines := strings.Split(diff, "\n")
	out := make([]udiffLine, len(lines))
	for i, l := range lines {
		kind := ""
		switch {
		case strings.HasPrefix(l, "+++ "), strings.HasPrefix(l, "--- "):
			kind = "file"
		case strings.HasPrefix(l, "@@"):
			kind = "hunk"
		case strings.HasPrefix(l, "+"):
			kind = "add"
		case strings.HasPrefix(l, "-"):
			kind = "del"
		}
		out[i] = udiffLine{Kind: kind, Text: l}
	}
	return out
}

func udiffClass(kind string) string {
	switch kind {
	case "add":
		return "block bg-emerald-950 text-emerald-300"
	case "del":
		return "block bg-red-950 text-red-300"
	case "hunk":
		return "block text-sky-300"
	case "file":
		return "block font-semibold text-slate-400"
	}
	return "block"
}

// patchTargetText describes a patch's target for the table.
func patchTargetText(t domain.PatchTarget) string {
	if t.Kind == domain.TargetAll || t.Kind == "" {
		return "all machines"
	}
	return t.Kind + " " + t.Name
}

// patchToggleVals are the toggle button's values: the state it switches to.
func patchToggleVals(enable bool) string {
	return fmt.Sprintf(`{"enabled":"%t"}`, enable)
}
