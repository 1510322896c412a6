package webui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

// tenantEventLimit is how many resource events the tenant page's history shows.
const tenantEventLimit = 30

// tenantRoutes serves one tenant's page and its actions.
func (u *UI) tenantRoutes(p *pages) {
	p.GET("/tenants/:tenant", u.tenantPage)
	p.GET("/live/tenants/:tenant", u.tenantLive)
	p.GET("/tenants/:tenant/health", u.tenantHealth)
	p.GET("/tenants/:tenant/kubeconfig", u.tenantDownload("kubeconfig", "kubeconfig"))
	p.GET("/tenants/:tenant/kubeconfig-breakglass", u.tenantDownload("kubeconfig/admin", "admin.kubeconfig"))
	p.GET("/tenants/:tenant/talosconfig", u.tenantDownload("talosconfig", "talosconfig"))
	p.POST("/tenants/:tenant/nodegroups", u.addNodeGroup)
	p.GET("/tenants/:tenant/nodegroups/:name/edit", u.editNodeGroupPage)
	p.POST("/tenants/:tenant/nodegroups/:name", u.updateNodeGroup)
	p.POST("/tenants/:tenant/nodegroups/:name/scale", u.scaleNodeGroup)
}

// tenantView is everything the tenant page shows; the components are the
// first renders of the live fragments (tenantFragments' order) and of the
// config patch, apply and upgrade panels.
type tenantView struct {
	Name                       string
	Deleting                   bool
	Overview, NodeGroups       templ.Component
	Machines, Events           templ.Component
	Patches, Applies, Upgrades templ.Component
	Backups                    templ.Component
	Remediations               templ.Component
	AddForm                    nodeGroupAddForm
	// Seen is what the live parts were rendered with, for the live stream.
	Seen      string
	Providers []string
}

// tenantFragmentTargets maps the id of each live element of the page to its
// fragment's event: an htmx GET of the page that targets one of them gets
// that fragment alone.
var tenantFragmentTargets = map[string]string{
	"tenant-overview": "overview",
	"nodegroup-rows":  "nodegroups",
	"machine-rows":    "machines",
	"event-rows":      "events",
}

// tenantFragments are the live parts of the tenant page. Each reads the
// tenant first: once it is gone, every part says so instead of failing.
func (u *UI) tenantFragments(tenant string) []fragment {
	guard := func(event string, render func(c echo.Context, t *domain.Tenant) (templ.Component, error)) fragment {
		return goneOnNotFound(tenant, fragment{Event: event, Render: func(c echo.Context) (templ.Component, error) {
			// Deleted, or out of the user's view: a live stream ends.
			t, err := getOf[domain.Tenant](u, c.Request(), "/tenants/"+tenant)
			if err != nil {
				return nil, err
			}
			return render(c, t)
		}})
	}
	return []fragment{
		guard("overview", func(c echo.Context, t *domain.Tenant) (templ.Component, error) {
			return tenantOverview(*t, u.now()), nil
		}),
		guard("nodegroups", func(c echo.Context, t *domain.Tenant) (templ.Component, error) {
			ngs, err := listOf[domain.NodeGroup](u, c.Request(), "/tenants/"+tenant+"/nodegroups")
			return nodeGroupTable(viewerOf(c), *t, ngs, u.autoscalerDecisionsOf(c.Request(), tenant, ngs)), err
		}),
		guard("machines", func(c echo.Context, t *domain.Tenant) (templ.Component, error) {
			ms, err := listOf[domain.Machine](u, c.Request(), "/tenants/"+tenant+"/machines")
			return machineTable(tenant, ms), err
		}),
		guard("events", func(c echo.Context, t *domain.Tenant) (templ.Component, error) {
			evs, err := u.recentEvents(c.Request(), tenant, tenantEventLimit)
			return eventTable(evs), err
		}),
	}
}

func (u *UI) tenantPage(c echo.Context) error {
	name := c.Param("tenant")
	t, err := getOf[domain.Tenant](u, c.Request(), "/tenants/"+name)
	if err != nil {
		return u.fail(c, err)
	}
	frags := u.tenantFragments(name)
	if isHTMX(c) {
		if event, ok := tenantFragmentTargets[c.Request().Header.Get("HX-Target")]; ok {
			for _, f := range frags {
				if f.Event == event {
					comp, err := f.Render(c)
					if err != nil {
						return u.fail(c, err)
					}
					return render(c, http.StatusOK, comp)
				}
			}
		}
	}
	comps, seen, err := renderFragments(c, frags)
	if err != nil {
		return u.fail(c, err)
	}
	tv := tenantView{Name: name, Deleting: t.Metadata.DeletionTimestamp != nil,
		Overview: comps[0], NodeGroups: comps[1], Machines: comps[2], Events: comps[3]}
	if tv.Patches, tv.Applies, tv.Upgrades, tv.Backups, tv.Remediations, err = u.tenantOpsPanels(c, name); err != nil {
		return u.fail(c, err)
	}
	// The panels hold the ops fragments' first renders; their digests go to
	// the live stream too, so it sends nothing the page already shows.
	_, opsSeen, err := renderFragments(c, u.tenantOpsFragments(name))
	if err != nil {
		return u.fail(c, err)
	}
	tv.Seen = seen + "," + opsSeen
	providers, _ := listOf[domain.Object](u, c.Request(), "/providers")
	tv.Providers = providerNames(providers)
	tv.AddForm = nodeGroupAddForm{Tenant: name, Role: domain.RoleWorker, Count: "1"}
	if len(tv.Providers) > 0 {
		tv.AddForm.Provider = tv.Providers[0]
	}
	tv.AddForm.ProviderConfig, _ = u.newProviderConfigForm(c.Request(), tv.AddForm.Provider, nil)
	return render(c, http.StatusOK, TenantPage(u, viewerOf(c), tv))
}

func (u *UI) tenantLive(c echo.Context) error {
	t := c.Param("tenant")
	frags := append(u.tenantFragments(t), u.tenantOpsFragments(t)...)
	ctx, cancel := context.WithCancel(c.Request().Context())
	probing := make(chan struct{})
	go func() {
		defer close(probing)
		u.probeWhileWatched(ctx, c.Request(), t)
	}()
	defer func() {
		cancel()
		<-probing
	}()
	return u.liveIn(c, t, tenantSubjects(t), frags...)
}

// probeWhileWatched asks the API for the tenant's health now and every
// LiveRefresh while someone has the tenant page open. Machine readiness is
// observed on demand (no background scraper, DESIGN's status plane); an open
// page is that demand. The API answers from its cache within the probe TTL, so
// many viewers cost the nodes one probe; the probe writes what changed back to
// the machines, and those events re-render the page.
func (u *UI) probeWhileWatched(ctx context.Context, r *http.Request, tenant string) {
	r = r.WithContext(ctx)
	tick := time.NewTicker(u.cfg.LiveRefresh)
	defer tick.Stop()
	for {
		// A failure (no health service, unreachable nodes) is shown by the
		// health section when asked; here it only means nothing to write back.
		_ = u.api.call(r, apiRequest{Path: "/tenants/" + tenant + "/health"}, nil)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// tenantEvent is one resource event as GET /api/v1/events answers it.
type tenantEvent struct {
	Seq     uint64         `json:"seq"`
	Subject string         `json:"subject"`
	Type    string         `json:"type"`
	Action  domain.Action  `json:"action"`
	Actor   string         `json:"actor,omitempty"`
	Time    time.Time      `json:"time"`
	Object  *domain.Object `json:"object"`
}

// KindName is "Kind/name" of the event's object.
func (e tenantEvent) KindName() string {
	if e.Object != nil {
		return e.Object.Kind + "/" + e.Object.Metadata.Name
	}
	return e.Subject
}

type eventPage struct {
	Metadata struct {
		Continue string `json:"continue"`
	} `json:"metadata"`
	Items []tenantEvent `json:"items"`
}

// recentEvents reads the newest n events of a tenant (the API's newest=N),
// newest first.
func (u *UI) recentEvents(r *http.Request, tenant string, n int) ([]tenantEvent, error) {
	var p eventPage
	q := url.Values{"tenant": {tenant}, "newest": {strconv.Itoa(n)}}
	if err := u.api.call(r, apiRequest{Path: "/events?" + q.Encode()}, &p); err != nil {
		return nil, err
	}
	out := make([]tenantEvent, len(p.Items))
	for i := range p.Items {
		out[len(p.Items)-1-i] = p.Items[i]
	}
	return out, nil
}

// tenantHealth probes the tenant through the API and shows the answer; a
// server without health probes (no Talos access) says so in the fragment.
func (u *UI) tenantHealth(c echo.Context) error {
	t := c.Param("tenant")
	var h domain.TenantHealth
	err := u.api.call(c.Request(), apiRequest{Path: "/tenants/" + t + "/health?refresh=true"}, &h)
	var hv healthView
	switch {
	case err == nil:
		hv.Health = &h
	case domain.ReasonOf(err) == domain.ReasonServiceUnavailable:
		hv.Message = "Health probes are unavailable: " + errorMessage(err)
	default:
		return u.fail(c, err)
	}
	if isHTMX(c) {
		return render(c, http.StatusOK, healthResult(hv))
	}
	return render(c, http.StatusOK, TenantHealthPage(u, viewerOf(c), t, hv))
}

// healthView is a probe's answer, or why there is none.
type healthView struct {
	Health  *domain.TenantHealth
	Message string
}

// tenantDownload answers the tenant's kubeconfig or talosconfig (the API
// path under the tenant) as the file <tenant>.<file>; the API checks the
// role and audits the download.
func (u *UI) tenantDownload(path, file string) echo.HandlerFunc {
	return func(c echo.Context) error {
		t := c.Param("tenant")
		var raw []byte
		if err := u.api.call(c.Request(), apiRequest{Path: "/tenants/" + t + "/" + path}, &raw); err != nil {
			return u.fail(c, err)
		}
		c.Response().Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", t+"."+file))
		c.Response().Header().Set("Cache-Control", "no-store")
		return c.Blob(http.StatusOK, "application/yaml", raw)
	}
}

// scaleNodeGroup changes a node group's count by delta: the count read now,
// written back with its resourceVersion, so a concurrent change is a conflict
// rather than a lost update.
func (u *UI) scaleNodeGroup(c echo.Context) error {
	t, name := c.Param("tenant"), c.Param("name")
	delta, err := strconv.Atoi(strings.TrimSpace(c.FormValue("delta")))
	if err != nil || delta == 0 || delta < -domain.MaxNodeGroupCount || delta > domain.MaxNodeGroupCount {
		return u.fail(c, domain.NewBadRequest("delta must be a non-zero whole number, e.g. 1 or -1",
			domain.Cause{Field: "delta", Type: domain.CauseInvalid, Message: fmt.Sprintf("%q is not a non-zero whole number", c.FormValue("delta"))}))
	}
	path := "/tenants/" + t + "/nodegroups/" + name
	ng, err := getOf[domain.NodeGroup](u, c.Request(), path)
	if err != nil {
		return u.fail(c, err)
	}
	patch := map[string]any{
		"metadata": map[string]any{"resourceVersion": ng.Metadata.ResourceVersion},
		"spec":     map[string]any{"count": ng.Spec.Count + delta},
	}
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodPatch, Path: path, Body: patch,
		ContentType: "application/merge-patch+json"}, nil); err != nil {
		return u.fail(c, err)
	}
	if !isHTMX(c) {
		return c.Redirect(http.StatusSeeOther, "/ui/tenants/"+t+"#nodegroups")
	}
	frag := u.tenantFragments(t)[1]
	comp, err := frag.Render(c)
	if err != nil {
		return u.fail(c, err)
	}
	return render(c, http.StatusOK, comp)
}

// nodeGroupAddForm is the add form's values and the API's refusal.
type nodeGroupAddForm struct {
	Tenant                      string
	Name, Role, Count, Provider string
	// Extensions (one a line) and KernelArgs make the group's schematic.
	Extensions, KernelArgs string
	ProviderConfig         providerConfigForm
	Errors                 formErrors
	// Added names the group just created, for the confirmation.
	Added string
}

var nodeGroupAddFields = []string{"metadata.name", "spec.role", "spec.count", "spec.provider", "spec.schematic.extensions", "spec.schematic.extraKernelArgs", "spec.schematic"}

// addNodeGroup creates a node group; the table shows it through the live stream.
func (u *UI) addNodeGroup(c echo.Context) error {
	t := c.Param("tenant")
	f := nodeGroupAddForm{Tenant: t, Name: strings.TrimSpace(c.FormValue("metadata.name")),
		Role: strings.TrimSpace(c.FormValue("spec.role")), Count: strings.TrimSpace(c.FormValue("spec.count")),
		Provider:   strings.TrimSpace(c.FormValue("spec.provider")),
		Extensions: strings.TrimSpace(c.FormValue("spec.schematic.extensions")), KernelArgs: strings.TrimSpace(c.FormValue("spec.schematic.extraKernelArgs"))}
	providers, _ := listOf[domain.Object](u, c.Request(), "/providers")
	params, _ := c.FormParams()
	pcForm, provider := u.newProviderConfigForm(c.Request(), f.Provider, params)
	again := func(err error) error {
		f.Errors = toFormErrors(err, append(pcForm.FieldNames(), nodeGroupAddFields...)...)
		f.ProviderConfig, f.ProviderConfig.Errors = pcForm, f.Errors
		if isHTMX(c) {
			return render(c, errorCode(err), nodeGroupAddFormView(f, providerNames(providers)))
		}
		return u.fail(c, err)
	}
	count, err := strconv.Atoi(f.Count)
	if err != nil {
		return again(domain.NewInvalid(domain.NodeGroupKind.Kind, f.Name, []domain.Cause{{Field: "spec.count", Type: domain.CauseInvalid,
			Message: fmt.Sprintf("%q is not a whole number", f.Count)}}))
	}
	pc, causes := pcForm.check(provider, f.Role)
	if len(causes) > 0 {
		return again(domain.NewInvalid(domain.NodeGroupKind.Kind, f.Name, causes))
	}
	ng := map[string]any{"apiVersion": domain.APIVersion, "kind": domain.NodeGroupKind.Kind,
		"metadata": map[string]any{"name": f.Name, "tenant": t},
		"spec":     map[string]any{"role": f.Role, "count": count, "provider": f.Provider, "providerConfig": pc}}
	if s := schematicOf(nil, f.Extensions, f.KernelArgs); s != nil {
		ng["spec"].(map[string]any)["schematic"] = s
	}
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodPost, Path: "/tenants/" + t + "/nodegroups", Body: ng}, nil); err != nil {
		return again(err)
	}
	if !isHTMX(c) {
		return c.Redirect(http.StatusSeeOther, "/ui/tenants/"+t+"#nodegroups")
	}
	next := nodeGroupAddForm{Tenant: t, Role: f.Role, Count: "1", Provider: f.Provider, Added: f.Name, ProviderConfig: pcForm}
	return render(c, http.StatusCreated, nodeGroupAddFormView(next, providerNames(providers)))
}

// nodeGroupEditForm is the edit form's values and the API's refusal.
type nodeGroupEditForm struct {
	Tenant, Name, Role, Provider string
	// ResourceVersion is the version the form was filled from: the update is
	// refused with a conflict when the group changed since.
	ResourceVersion                                             string
	Count, TalosVersion, Labels, MaxParallelism, ProviderConfig string
	// Autoscaling is the group's bounds (nil: it does not autoscale): the
	// count field says the autoscaler owns the count.
	Autoscaling *domain.Autoscaling
	// Taints are one a line, key=value:Effect.
	Taints string
	// Extensions (one a line) and KernelArgs make the group's schematic.
	Extensions, KernelArgs string
	Errors                 formErrors
	// Impact is what the edit would do, shown when asked before the Save.
	Impact *impactShown
}

var nodeGroupEditFields = []string{"spec.count", "spec.talosVersion", "spec.labels",
	"spec.updateStrategy.maxParallelism", "spec.providerConfig", "metadata.resourceVersion", "spec.taints",
	"spec.schematic.extensions", "spec.schematic.extraKernelArgs", "spec.schematic"}

func editFormOf(tenant string, ng *domain.NodeGroup) nodeGroupEditForm {
	pc := ""
	if len(ng.Spec.ProviderConfig) > 0 {
		var v any
		if json.Unmarshal(ng.Spec.ProviderConfig, &v) == nil {
			if b, err := json.MarshalIndent(v, "", "  "); err == nil {
				pc = string(b)
			}
		}
	}
	exts, args := schematicStrings(ng.Spec.Schematic)
	return nodeGroupEditForm{Tenant: tenant, Name: ng.Metadata.Name, Role: ng.Spec.Role, Provider: ng.Spec.Provider,
		Extensions: exts, KernelArgs: args,
		ResourceVersion: ng.Metadata.ResourceVersion, Count: strconv.Itoa(ng.Spec.Count), TalosVersion: ng.Spec.TalosVersion,
		Labels: labelString(ng.Spec.Labels), MaxParallelism: strconv.Itoa(ng.Spec.UpdateStrategy.MaxParallelism), ProviderConfig: pc,
		Taints: taintString(ng.Spec.Taints), Autoscaling: ng.Spec.Autoscaling}
}

func (u *UI) editNodeGroupPage(c echo.Context) error {
	t, name := c.Param("tenant"), c.Param("name")
	if err := writerOf(c, t, domain.NodeGroupKind.Kind, name, "node groups"); err != nil {
		return u.fail(c, err)
	}
	ng, err := getOf[domain.NodeGroup](u, c.Request(), "/tenants/"+t+"/nodegroups/"+name)
	if err != nil {
		return u.fail(c, err)
	}
	f := editFormOf(t, ng)
	if isHTMX(c) {
		return render(c, http.StatusOK, nodeGroupEditFormView(viewerOf(c), f))
	}
	return render(c, http.StatusOK, NodeGroupEditPage(u, viewerOf(c), f))
}

// updateNodeGroup writes the edit form back with PUT and the resourceVersion
// the form was read at.
func (u *UI) updateNodeGroup(c echo.Context) error {
	t, name := c.Param("tenant"), c.Param("name")
	f := nodeGroupEditForm{Tenant: t, Name: name, ResourceVersion: strings.TrimSpace(c.FormValue("metadata.resourceVersion")),
		Count: strings.TrimSpace(c.FormValue("spec.count")), TalosVersion: strings.TrimSpace(c.FormValue("spec.talosVersion")),
		Labels: strings.TrimSpace(c.FormValue("spec.labels")), MaxParallelism: strings.TrimSpace(c.FormValue("spec.updateStrategy.maxParallelism")),
		ProviderConfig: strings.TrimSpace(c.FormValue("spec.providerConfig")), Taints: strings.TrimSpace(c.FormValue("spec.taints")),
		Extensions: strings.TrimSpace(c.FormValue("spec.schematic.extensions")), KernelArgs: strings.TrimSpace(c.FormValue("spec.schematic.extraKernelArgs"))}
	path := "/tenants/" + t + "/nodegroups/" + name
	ng, err := getOf[domain.NodeGroup](u, c.Request(), path)
	if err != nil {
		return u.fail(c, err)
	}
	f.Role, f.Provider, f.Autoscaling = ng.Spec.Role, ng.Spec.Provider, ng.Spec.Autoscaling
	again := func(err error) error {
		f.Errors = toFormErrors(err, nodeGroupEditFields...)
		if domain.ReasonOf(err) == domain.ReasonConflict {
			f.Errors.Message += " (the node group changed since this form was loaded; reload it to see the current values)"
		}
		if isHTMX(c) {
			return render(c, errorCode(err), nodeGroupEditFormView(viewerOf(c), f))
		}
		return render(c, errorCode(err), NodeGroupEditPage(u, viewerOf(c), f))
	}
	var causes []domain.Cause
	count, err := strconv.Atoi(f.Count)
	if err != nil {
		causes = append(causes, domain.Cause{Field: "spec.count", Type: domain.CauseInvalid, Message: fmt.Sprintf("%q is not a whole number", f.Count)})
	}
	mp, err := strconv.Atoi(f.MaxParallelism)
	if err != nil {
		causes = append(causes, domain.Cause{Field: "spec.updateStrategy.maxParallelism", Type: domain.CauseInvalid, Message: fmt.Sprintf("%q is not a whole number", f.MaxParallelism)})
	}
	labels, err := parseLabels(f.Labels)
	if err != nil {
		causes = append(causes, domain.Cause{Field: "spec.labels", Type: domain.CauseInvalid, Message: err.Error()})
	}
	taints, err := parseTaints(f.Taints)
	if err != nil {
		causes = append(causes, domain.Cause{Field: "spec.taints", Type: domain.CauseInvalid, Message: err.Error()})
	}
	var pc json.RawMessage
	if f.ProviderConfig != "" {
		if !json.Valid([]byte(f.ProviderConfig)) {
			causes = append(causes, domain.Cause{Field: "spec.providerConfig", Type: domain.CauseInvalid, Message: "is not valid JSON"})
		}
		pc = json.RawMessage(f.ProviderConfig)
	}
	if len(causes) > 0 {
		return again(domain.NewInvalid(domain.NodeGroupKind.Kind, name, causes))
	}
	spec := ng.Spec
	spec.Count, spec.TalosVersion, spec.Labels, spec.ProviderConfig = count, f.TalosVersion, labels, pc
	spec.UpdateStrategy.MaxParallelism = mp
	spec.Taints = taints
	spec.Schematic = schematicOf(ng.Spec.Schematic, f.Extensions, f.KernelArgs)
	meta := ng.Metadata
	meta.ResourceVersion = f.ResourceVersion
	obj := map[string]any{"apiVersion": domain.APIVersion, "kind": domain.NodeGroupKind.Kind, "metadata": meta, "spec": spec}
	if wantsImpact(c) {
		imp, err := u.dryRunImpact(c, http.MethodPut, path, obj)
		if err != nil {
			return again(err)
		}
		f.Impact = &imp
		if isHTMX(c) {
			return render(c, http.StatusOK, nodeGroupEditFormView(viewerOf(c), f))
		}
		return render(c, http.StatusOK, NodeGroupEditPage(u, viewerOf(c), f))
	}
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodPut, Path: path, Body: obj}, nil); err != nil {
		return again(err)
	}
	target := "/ui/tenants/" + t + "#nodegroups"
	if isHTMX(c) {
		c.Response().Header().Set("HX-Redirect", target)
		return c.NoContent(http.StatusOK)
	}
	return c.Redirect(http.StatusSeeOther, target)
}

// endpointOf is the control-plane endpoint: the configured one, else the one observed.
func endpointOf(t domain.Tenant) string {
	if t.Spec.ControlPlane.Endpoint != "" {
		return t.Spec.ControlPlane.Endpoint
	}
	return t.Status.EndpointAddress
}

func condAge(c domain.Condition) string {
	if c.LastTransitionTime.IsZero() {
		return ""
	}
	return ago(&c.LastTransitionTime)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// healthClass colours a health state.
func healthClass(state string) string {
	if state == domain.HealthUnreachable {
		return phaseClass("Failed")
	}
	return phaseClass(state)
}

// labelPairs are labels as sorted k=v strings.
func labelPairs(m map[string]string) []string {
	if len(m) == 0 {
		return nil
	}
	return strings.Split(labelString(m), ",")
}
