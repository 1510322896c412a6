package webui

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// The Rotate secrets form creates an Upgrade with spec.rotate (and
// spec.now) through the API, which orders and checks the secrets: a
// refused one comes back on the form with the API's reason; the run shows
// in the live upgrades table titled with what it rotates and its stage.
func TestRotateForm(t *testing.T) {
	s := newOpsStack(t)
	opsAcme(s)
	editor := s.signIn("ed", domain.RoleEdit)
	page := editor.get("/ui/test/ops/acme")
	require.Equal(t, http.StatusOK, page.Code, page.Body)
	for _, w := range []string{`data-testid="rotate-form"`, `hx-post="/ui/tenants/acme/rotations"`, `data-testid="rotate-kubernetes-ca"`,
		`data-testid="rotate-talos-ca"`, `data-testid="rotate-aggregator-ca"`, `data-testid="rotate-bootstrap-token"`, `data-testid="rotate-now"`} {
		require.Contains(t, page.Body, w)
	}
	require.Greater(t, strings.Index(page.Body, `data-testid="rotate-forms"`), strings.Index(page.Body, `sse-swap="upgrades"`),
		"the form is outside the live element")

	for _, tc := range []struct {
		name   string
		values url.Values
		msg    string
	}{
		{"nothing picked", url.Values{}, "pick the secrets to rotate"},
		{"etcd CA", url.Values{"secret": {"kubernetes-ca", "etcd-ca"}}, "etcd-ca cannot be rotated: Talos cannot rotate the etcd CA (siderolabs/talos#8808)"},
		{"encryption key", url.Values{"secret": {"encryption-key"}}, "encryption-key cannot be rotated: Talos&#39;s config holds one secretbox key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := editor.hx(http.MethodPost, "/ui/tenants/acme/rotations", tc.values)
			require.Equal(t, http.StatusUnprocessableEntity, r.Code, r.Body)
			require.Contains(t, r.Body, `data-testid="rotate-forms"`, "the form comes back")
			require.Contains(t, r.Body, `data-field-error="spec.rotate"`, r.Body)
			require.Contains(t, r.Body, tc.msg)
			if slices.Contains(tc.values["secret"], "kubernetes-ca") {
				require.Contains(t, r.Body, `value="kubernetes-ca" checked`, "what was picked is kept")
			}
		})
	}
	var l itemList[domain.Upgrade]
	s.apiCall(http.MethodGet, "/tenants/acme/upgrades", nil, &l)
	require.Empty(t, l.Items, "refused: nothing created")

	r := editor.hx(http.MethodPost, "/ui/tenants/acme/rotations", url.Values{"secret": {"kubernetes-ca", "talos-ca"}, "now": {"true"}})
	require.Equal(t, http.StatusOK, r.Code, r.Body)
	require.Contains(t, r.Body, `data-testid="flash-ok"`)
	require.Contains(t, r.Body, "Rotate talos-ca, kubernetes-ca started")
	require.NotContains(t, r.Body, "checked", "a fresh form follows")
	s.apiCall(http.MethodGet, "/tenants/acme/upgrades", nil, &l)
	require.Len(t, l.Items, 1)
	up := l.Items[0]
	require.Equal(t, []string{domain.SecretTalosCA, domain.SecretKubernetesCA}, up.Spec.Rotate)
	require.True(t, up.Spec.Now)
	require.Regexp(t, `^rotate-kubernetes-ca-talos-ca-[0-9a-f]{5}$`, up.Metadata.Name)
	rows := editor.liveEventWith("/ui/test/live/ops/acme", "upgrades", 10*time.Second, `data-upgrade="`+up.Metadata.Name+`"`)
	require.Contains(t, rows, `data-testid="upgrade-target">Rotate talos-ca, kubernetes-ca</td>`)

	// Without htmx the form posts and comes back to the tenant.
	editor.get("/ui/test/ops/acme") // for the CSRF token
	full := editor.form("/ui/tenants/acme/rotations", url.Values{"secret": {"bootstrap-token"}})
	require.Equal(t, http.StatusSeeOther, full.Code, full.Body)
	require.Equal(t, "/ui/tenants/acme#upgrades", full.Header.Get("Location"))
	full = editor.form("/ui/tenants/acme/rotations", url.Values{"secret": {"service-account-key"}})
	require.Equal(t, http.StatusUnprocessableEntity, full.Code)
	require.Contains(t, full.Body, "<html")
	require.Contains(t, full.Body, `data-field-error="spec.rotate"`)

	viewer := s.signIn("vi", domain.RoleView)
	require.NotContains(t, viewer.get("/ui/test/ops/acme").Body, `data-testid="rotate-forms"`)
	r = viewer.hx(http.MethodPost, "/ui/tenants/acme/rotations", url.Values{"secret": {"talos-ca"}})
	require.Equal(t, http.StatusForbidden, r.Code, r.Body)
	require.Contains(t, r.Body, `data-testid="flash-error"`)
}

// A rotation run is titled with what it rotates, says its stage, and its
// machines' rows the stage their steps are of.
func TestUpgradeTableShowsARotation(t *testing.T) {
	up := domain.Upgrade{Metadata: domain.ObjectMeta{Name: "rot", Tenant: "acme"},
		Spec: domain.UpgradeSpec{Rotate: []string{domain.SecretTalosCA, domain.SecretKubernetesCA}, MaxParallelism: 1},
		Status: domain.UpgradeStatus{Phase: domain.UpgradeRunning, Current: "w-1",
			Rotation: &domain.RotationProgress{Stages: []string{domain.RotationAccept, domain.RotationSwap, domain.RotationDrop}, Stage: domain.RotationSwap},
			Machines: []domain.UpgradeMachine{
				{Name: "cp-1", Role: domain.RoleControlPlane, To: "v1.13.0", Phase: domain.StepDone},
				{Name: "w-1", Role: domain.RoleWorker, To: "v1.13.0", Phase: domain.StepPending},
			}}}
	var b strings.Builder
	require.NoError(t, upgradeTable(viewer{}, "", []domain.Upgrade{up}).Render(context.Background(), &b))
	require.Contains(t, b.String(), `data-testid="upgrade-target">Rotate talos-ca, kubernetes-ca</td>`)
	require.Contains(t, b.String(), `<div data-testid="rotation-stage">stage swap (2/3)</div>`)
	require.Equal(t, 2, strings.Count(b.String(), `<td class="whitespace-nowrap px-3 py-1.5">swap</td>`), b.String())
	require.NotContains(t, b.String(), "→")
}
