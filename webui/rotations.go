package webui

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

// rotationRoutes serve starting a rotation of a tenant's secrets; its
// progress is the upgrades table's, since a rotation is an Upgrade.
func (u *UI) rotationRoutes(p *pages) {
	p.POST("/tenants/:tenant/rotations", u.rotateSecrets)
}

// rotateForm is the secrets picked and the API's refusal.
type rotateForm struct {
	Tenant string
	// Secrets are the ones ticked (spec.rotate's values); Now overrides the
	// tenant's maintenance windows.
	Secrets []string
	Now     bool
	Errors  formErrors
	// Started says what the last submit started, for a confirmation.
	Started string
}

// rotateChoice is a secret the form offers, with what rotating it does.
type rotateChoice struct{ Secret, Says string }

// rotateChoices are the secrets the form offers: those the API takes.
var rotateChoices = []rotateChoice{
	{domain.SecretKubernetesCA, "and every kubelet, component and admin certificate: old kubeconfigs (the break-glass one too) stop working"},
	{domain.SecretTalosCA, "old talosconfigs stop working"},
	{domain.SecretAggregatorCA, "the front-proxy CA of API aggregation"},
	{domain.SecretBootstrapToken, "the kubelet bootstrap token and the trustd join token"},
}

// Ticked reports whether secret was picked.
func (f rotateForm) Ticked(secret string) bool { return slices.Contains(f.Secrets, secret) }

// rotateSecrets creates an Upgrade of the tenant with spec.rotate (and
// spec.now): the upgrade saga rotates them machine by machine, stage by
// stage, and the run shows in the live upgrades table. The API checks the
// secrets (422 naming spec.rotate[i] and why a secret cannot be rotated).
func (u *UI) rotateSecrets(c echo.Context) error {
	t := c.Param("tenant")
	form, err := c.FormParams()
	if err != nil {
		return u.fail(c, domain.NewBadRequest("reading the form: "+err.Error()))
	}
	f := rotateForm{Tenant: t, Secrets: form["secret"], Now: form.Get("now") == "true"}
	if len(f.Secrets) == 0 {
		return u.rotateRefused(c, f, domain.NewInvalid(domain.UpgradeKind.Kind, "", []domain.Cause{{Field: "spec.rotate",
			Type: domain.CauseRequired, Message: "pick the secrets to rotate"}}))
	}
	name := rotationName(f.Secrets)
	body := map[string]any{"apiVersion": domain.APIVersion, "kind": domain.UpgradeKind.Kind, "metadata": map[string]any{"name": name},
		"spec": domain.UpgradeSpec{Rotate: f.Secrets, Now: f.Now, MaxParallelism: 1}}
	var created domain.Upgrade
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodPost, Path: "/tenants/" + t + "/upgrades", Body: body}, &created); err != nil {
		return u.rotateRefused(c, f, err)
	}
	if !isHTMX(c) {
		return c.Redirect(http.StatusSeeOther, "/ui/tenants/"+t+"#upgrades")
	}
	done := rotateForm{Tenant: t, Started: fmt.Sprintf("%s: %s started; it shows above as it runs.", created.Metadata.Name, upgradeTarget(created))}
	return render(c, http.StatusOK, rotateForms(viewerOf(c), done))
}

// rotateRefused shows causes and conflicts on the form, other refusals
// (403, a missing tenant) as errors.
func (u *UI) rotateRefused(c echo.Context, f rotateForm, err error) error {
	switch domain.ReasonOf(err) {
	case domain.ReasonInvalid, domain.ReasonBadRequest, domain.ReasonConflict:
		f.Errors = toFormErrors(err, "spec.rotate", "spec.now")
		if isHTMX(c) {
			return render(c, errorCode(err), rotateForms(viewerOf(c), f))
		}
		return render(c, errorCode(err), RotateFormPage(u, viewerOf(c), f))
	}
	return u.fail(c, err)
}

// rotationName is "rotate-<secrets>-<5 hex>", a DNS label.
func rotationName(secrets []string) string {
	var b strings.Builder
	for _, ch := range strings.ToLower(strings.Join(secrets, "-")) {
		if (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') {
			b.WriteRune(ch)
		} else {
			b.WriteByte('-')
		}
	}
	v := b.String()
	if len(v) > 40 {
		v = v[:40]
	}
	rnd := make([]byte, 3)
	_, _ = rand.Read(rnd)
	return "rotate-" + strings.Trim(v, "-") + "-" + hex.EncodeToString(rnd)[:5]
}

// rotationStage is where a rotation run is, e.g. "stage swap (2/3)"; "" for
// an upgrade, or a rotation the saga has not started.
func rotationStage(up domain.Upgrade) string {
	r := up.Status.Rotation
	if r == nil {
		return ""
	}
	return fmt.Sprintf("stage %s (%d/%d)", r.Stage, slices.Index(r.Stages, r.Stage)+1, len(r.Stages))
}

// machineMove is a machine's row's move: "v1.12.0 → v1.13.0", or for a
// rotation the stage its step is of.
func machineMove(up domain.Upgrade, m domain.UpgradeMachine) string {
	if r := up.Status.Rotation; r != nil {
		return r.Stage
	}
	return m.From + " → " + m.To
}
