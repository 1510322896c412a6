package webui

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

// rolloutRoutes serve the rollouts: their list with the create form, one
// rollout's waves as a live picture, and its pause, resume and abort.
func (u *UI) rolloutRoutes(p *pages) {
	p.GET("/rollouts", u.rolloutsPage)
	p.POST("/rollouts", u.createRollout)
	p.GET("/rollouts/:name", u.rolloutPage)
	p.POST("/rollouts/:name/:verb", u.steerRollout)
	p.GET("/live/rollouts", u.rolloutsLive)
	p.GET("/live/rollouts/:name", u.rolloutLive)
}

// rolloutForm is the create form's values as typed.
type rolloutForm struct {
	Name, Change, Version, PatchName, Patch, Selector, Waves, Soak, MaxParallel string
	Errors                                                                      formErrors
}

var rolloutFormFields = []string{"metadata.name", "spec.change", "spec.tenantSelector", "spec.waves", "spec.soak", "maxParallel"}

func (u *UI) rolloutsFragments() []fragment {
	return []fragment{{Event: "rollouts", Render: func(c echo.Context) (templ.Component, error) {
		ros, err := listOf[domain.Rollout](u, c.Request(), "/rollouts")
		newestFirst(ros, func(r *domain.Rollout) *domain.ObjectMeta { return &r.Metadata })
		return rolloutTable(ros), err
	}}}
}

func (u *UI) rolloutsPage(c echo.Context) error {
	comps, seen, err := renderFragments(c, u.rolloutsFragments())
	if err != nil {
		return u.fail(c, err)
	}
	return render(c, http.StatusOK, RolloutsPage(u, viewerOf(c), comps[0], seen, rolloutForm{Waves: "1,25%,100%", Soak: "10m", Change: "talosVersion"}))
}

func (u *UI) rolloutsLive(c echo.Context) error {
	return u.live(c, []string{domain.SubjectFilter(domain.RolloutKind, "", "")}, u.rolloutsFragments()...)
}

// createRollout creates a Rollout from the form; the API validates it and
// the form shows every bad field.
func (u *UI) createRollout(c echo.Context) error {
	v := viewerOf(c)
	f := rolloutForm{
		Name: strings.TrimSpace(c.FormValue("metadata.name")), Change: c.FormValue("change"),
		Version: strings.TrimSpace(c.FormValue("version")), PatchName: strings.TrimSpace(c.FormValue("patchName")),
		Patch: c.FormValue("patch"), Selector: strings.TrimSpace(c.FormValue("spec.tenantSelector")),
		Waves: strings.TrimSpace(c.FormValue("spec.waves")), Soak: strings.TrimSpace(c.FormValue("spec.soak")),
		MaxParallel: strings.TrimSpace(c.FormValue("maxParallel")),
	}
	again := func(err error) error {
		f.Errors = toFormErrors(err, rolloutFormFields...)
		return render(c, errorCode(err), rolloutCreateForm(v, f))
	}
	var causes []domain.Cause
	maxParallel := 0
	if f.MaxParallel != "" {
		n, err := strconv.Atoi(f.MaxParallel)
		if err != nil || n < 1 {
			causes = append(causes, domain.Cause{Field: "maxParallel", Type: domain.CauseInvalid, Message: "a number of tenants, at least 1 (or empty: the whole wave)"})
		}
		maxParallel = n
	}
	waves, err := domain.ParseWaves(f.Waves, maxParallel)
	if err != nil {
		causes = append(causes, domain.Cause{Field: "spec.waves", Type: domain.CauseInvalid, Message: err.Error()})
	}
	spec := domain.RolloutSpec{TenantSelector: f.Selector, Waves: waves, Soak: f.Soak}
	switch f.Change {
	case "talosVersion":
		spec.Change.TalosVersion = f.Version
	case "kubernetesVersion":
		spec.Change.KubernetesVersion = f.Version
	case "configPatch":
		name := f.PatchName
		if name == "" {
			name = f.Name
		}
		spec.Change.ConfigPatch = &domain.RolloutConfigPatch{Name: name, Spec: domain.ConfigPatchSpec{Patch: f.Patch}}
	default:
		causes = append(causes, domain.Cause{Field: "spec.change", Type: domain.CauseInvalid, Message: "pick what changes"})
	}
	if len(causes) > 0 {
		return again(domain.NewInvalid(domain.RolloutKind.Kind, f.Name, causes))
	}
	raw, _ := json.Marshal(spec)
	body := map[string]any{"metadata": map[string]any{"name": f.Name}, "spec": json.RawMessage(raw)}
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodPost, Path: "/rollouts", Body: body}, nil); err != nil {
		return again(err)
	}
	target := "/ui/rollouts/" + url.PathEscape(f.Name)
	if isHTMX(c) {
		c.Response().Header().Set("HX-Redirect", target)
		return c.NoContent(http.StatusCreated)
	}
	return c.Redirect(http.StatusSeeOther, target)
}

func (u *UI) rolloutFragments(name string) []fragment {
	return []fragment{{Event: "rollout", Render: func(c echo.Context) (templ.Component, error) {
		ro, err := getOf[domain.Rollout](u, c.Request(), "/rollouts/"+url.PathEscape(name))
		if domain.IsNotFound(err) {
			return rolloutGone(name), &liveEnd{Message: goneMessage("Rollout " + name)}
		}
		if err != nil {
			return nil, err
		}
		return rolloutDetail(viewerOf(c), ro, u.now()), nil
	}}}
}

func (u *UI) rolloutPage(c echo.Context) error {
	name := c.Param("name")
	comps, seen, err := renderFragments(c, u.rolloutFragments(name))
	if err != nil {
		return u.fail(c, err)
	}
	return render(c, http.StatusOK, RolloutPage(u, viewerOf(c), name, comps[0], seen))
}

func (u *UI) rolloutLive(c echo.Context) error {
	name := c.Param("name")
	return u.live(c, []string{domain.SubjectFilter(domain.RolloutKind, "", name)}, u.rolloutFragments(name)...)
}

// steerRollout pauses, resumes (from a pause or a halt) or aborts a
// rollout: a merge patch of its spec at the version read, as rezusctl
// rollout does.
func (u *UI) steerRollout(c echo.Context) error {
	name, verb := c.Param("name"), c.Param("verb")
	path := "/rollouts/" + url.PathEscape(name)
	ro, err := getOf[domain.Rollout](u, c.Request(), path)
	if err != nil {
		return u.fail(c, err)
	}
	spec := map[string]any{}
	switch verb {
	case "pause":
		spec["paused"] = true
	case "resume":
		spec["paused"] = false
		if h := ro.Status.Halt; h != nil {
			spec["resumeHalt"] = h.Number
		}
	case "abort":
		spec["abort"] = true
	default:
		return u.fail(c, domain.NewNotFound("action", verb))
	}
	body := map[string]any{"metadata": map[string]any{"resourceVersion": ro.Metadata.ResourceVersion}, "spec": spec}
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodPatch, Path: path, Body: body, ContentType: "application/merge-patch+json"}, nil); err != nil {
		return u.fail(c, err)
	}
	if !isHTMX(c) {
		return c.Redirect(http.StatusSeeOther, "/ui/rollouts/"+url.PathEscape(name))
	}
	return render(c, http.StatusOK, Flash("success", "Rollout "+name+": "+verb+" requested."))
}

// waveTenants are a wave's tenants in the rollout's order.
func waveTenants(ro *domain.Rollout, w int) []domain.RolloutTenantStatus {
	var out []domain.RolloutTenantStatus
	for _, t := range ro.Status.Tenants {
		if t.Wave == w {
			out = append(out, t)
		}
	}
	return out
}

// rolloutStateClass colours a tenant's tile by its state.
func rolloutStateClass(state string) string {
	switch state {
	case domain.RolloutTenantDone:
		return "bg-emerald-500 text-white"
	case domain.RolloutTenantRunning:
		return "bg-sky-500 text-white animate-pulse"
	case domain.RolloutTenantFailed:
		return "bg-red-600 text-white"
	case domain.RolloutTenantSkipped:
		return "bg-slate-300 text-slate-600 line-through"
	}
	return "bg-slate-200 text-slate-700"
}

// rolloutAttention are the tenants not done or waiting: running, failed and
// skipped, at most 50.
func rolloutAttention(ro *domain.Rollout) []domain.RolloutTenantStatus {
	var out []domain.RolloutTenantStatus
	for _, t := range ro.Status.Tenants {
		if t.State == domain.RolloutTenantRunning || t.State == domain.RolloutTenantFailed || t.State == domain.RolloutTenantSkipped {
			out = append(out, t)
		}
	}
	return firstN(out, 50)
}

// soakLeft is a soaking wave's time left, e.g. "4m".
func soakLeft(w domain.RolloutWaveStatus, now time.Time) string {
	if w.SoakUntil == nil || !w.SoakUntil.After(now) {
		return "ending"
	}
	return shortDuration(w.SoakUntil.Sub(now)) + " left"
}

// barWidth is a bar segment's width: n of total, in percent.
func barWidth(n, total int) templ.SafeCSS {
	if total == 0 {
		return "width:0%"
	}
	return templ.SafeCSS("width:" + strconv.FormatFloat(float64(n)*100/float64(total), 'f', 2, 64) + "%")
}

// waveBorder marks the wave under way.
func waveBorder(state string) string {
	switch state {
	case domain.RolloutWaveRunning, domain.RolloutWaveSoaking:
		return "border-sky-400 ring-1 ring-sky-200"
	case domain.RolloutWaveDone:
		return "border-emerald-300"
	}
	return "border-slate-200"
}
