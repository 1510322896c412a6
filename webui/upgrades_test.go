package webui

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// The Upgrade button declares the tenant's Talos version, the control beside
// it its Kubernetes version (merge patches of the tenant's spec): the upgrade
// saga queues the runs, the UI never creates one itself. The API's refusals
// (422: the Status message and the field's cause) come back on the forms.
func TestVersionForms(t *testing.T) {
	s := newOpsStack(t)
	s.create("/tenants", map[string]any{"apiVersion": domain.APIVersion, "kind": "Tenant",
		"metadata": map[string]any{"name": "acme"}, "spec": map[string]any{}})
	b := s.signIn("ed", domain.RoleEdit)
	tenant := func() domain.Tenant {
		var tn domain.Tenant
		s.apiCall(http.MethodGet, "/tenants/acme", nil, &tn)
		return tn
	}

	page := b.get("/ui/test/ops/acme")
	require.Equal(t, http.StatusOK, page.Code, page.Body)
	for _, w := range []string{`data-testid="upgrade-form"`, `data-testid="kubernetes-upgrade-form"`, `hx-post="/ui/tenants/acme/versions"`,
		`data-testid="declared-talos">` + domain.DefaultTalosVersion + `<`, `data-testid="declared-kubernetes">` + domain.DefaultKubernetesVersion + `<`} {
		require.Contains(t, page.Body, w)
	}

	tests := []struct {
		name   string
		values url.Values
		field  string
		msg    []string
	}{
		{"no Talos version", url.Values{"talosVersion": {""}}, "spec.talosVersion", []string{"give the version to declare"}},
		{"no Kubernetes version", url.Values{"kubernetesVersion": {" "}}, "spec.kubernetesVersion", []string{"give the version to declare"}},
		{"not a Talos version", url.Values{"talosVersion": {"latest"}}, "spec.talosVersion",
			[]string{`tenant &#34;acme&#34; is invalid: spec.talosVersion`, `&#34;latest&#34; is not a semantic version`}},
		{"not a Kubernetes version", url.Values{"kubernetesVersion": {"1.x"}}, "spec.kubernetesVersion",
			[]string{`data-testid="form-error"`, `&#34;1.x&#34; is not a semantic version`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := b.hx(http.MethodPost, "/ui/tenants/acme/versions", tc.values)
			require.Equal(t, http.StatusUnprocessableEntity, r.Code, r.Body)
			require.Contains(t, r.Body, `data-testid="version-forms"`, "the forms come back")
			require.Contains(t, r.Body, `data-field-error="`+tc.field+`"`, r.Body)
			for _, m := range tc.msg {
				require.Contains(t, r.Body, m)
			}
			for k, v := range tc.values {
				if v[0] != "" && v[0] != " " {
					require.Contains(t, r.Body, `name="`+k+`" value="`+v[0]+`"`, "what was typed is kept")
				}
			}
		})
	}
	require.Equal(t, domain.DefaultTalosVersion, tenant().Spec.TalosVersion, "refused: nothing declared")

	talos, kube := nextPatch(t, domain.DefaultTalosVersion), nextPatch(t, domain.DefaultKubernetesVersion)
	r := b.hx(http.MethodPost, "/ui/tenants/acme/versions", url.Values{"talosVersion": {talos}})
	require.Equal(t, http.StatusOK, r.Code, r.Body)
	require.Contains(t, r.Body, `data-testid="flash-ok"`)
	require.Contains(t, r.Body, "acme now declares Talos "+talos+" (was "+domain.DefaultTalosVersion+")")
	require.Contains(t, r.Body, `data-testid="declared-talos">`+talos+`<`, "fresh forms follow")
	require.NotContains(t, r.Body, `value="`+talos+`"`)
	require.Equal(t, talos, tenant().Spec.TalosVersion)

	r = b.hx(http.MethodPost, "/ui/tenants/acme/versions", url.Values{"kubernetesVersion": {strings.TrimPrefix(kube, "v")}})
	require.Equal(t, http.StatusOK, r.Code, r.Body)
	require.Contains(t, r.Body, "acme now declares Kubernetes "+kube+" (was "+domain.DefaultKubernetesVersion+")")
	tn := tenant()
	require.Equal(t, kube, tn.Spec.KubernetesVersion)
	require.Equal(t, talos, tn.Spec.TalosVersion, "one field at a time")

	r = b.hx(http.MethodPost, "/ui/tenants/acme/versions", url.Values{"kubernetesVersion": {kube}})
	require.Equal(t, http.StatusOK, r.Code, r.Body)
	require.Contains(t, r.Body, "acme already declares Kubernetes "+kube+": nothing to upgrade.")

	var l itemList[domain.Upgrade]
	s.apiCall(http.MethodGet, "/tenants/acme/upgrades", nil, &l)
	require.Empty(t, l.Items, "the UI declares versions; the saga starts the runs")

	r = b.hx(http.MethodPost, "/ui/tenants/acme/versions", url.Values{"talosVersion": {talos}, "kubernetesVersion": {kube}})
	require.Equal(t, http.StatusBadRequest, r.Code, r.Body)

	// Without htmx the form posts and comes back to the tenant, or shows the
	// refusal on a page.
	b.get("/ui/test/ops/acme") // for the CSRF token
	full := b.form("/ui/tenants/acme/versions", url.Values{"talosVersion": {"bogus"}})
	require.Equal(t, http.StatusUnprocessableEntity, full.Code)
	require.Contains(t, full.Body, "<html")
	require.Contains(t, full.Body, `data-field-error="spec.talosVersion"`)
	full = b.form("/ui/tenants/acme/versions", url.Values{"talosVersion": {nextPatch(t, talos)}})
	require.Equal(t, http.StatusSeeOther, full.Code, full.Body)
	require.Equal(t, "/ui/tenants/acme#upgrades", full.Header.Get("Location"))
	require.Equal(t, nextPatch(t, talos), tenant().Spec.TalosVersion)

	viewer := s.signIn("vi", domain.RoleView)
	require.NotContains(t, viewer.get("/ui/test/ops/acme").Body, `data-testid="version-forms"`)
	r = viewer.hx(http.MethodPost, "/ui/tenants/acme/versions", url.Values{"talosVersion": {talos}})
	require.Equal(t, http.StatusForbidden, r.Code, r.Body)
	require.Contains(t, r.Body, `data-testid="flash-error"`)
}

// nextPatch is v with its patch number one higher.
func nextPatch(t *testing.T, v string) string {
	t.Helper()
	i := strings.LastIndex(v, ".")
	n, err := strconv.Atoi(v[i+1:])
	require.NoError(t, err)
	return v[:i+1] + strconv.Itoa(n+1)
}

func TestUpgradeTableShowsMachineProgress(t *testing.T) {
	s := newOpsStack(t)
	opsAcme(s)
	var up domain.Object
	s.apiCall(http.MethodPost, "/tenants/acme/upgrades", map[string]any{"metadata": map[string]any{"name": "to-113"},
		"spec": map[string]any{"talosVersion": "v1.13.0"}}, &up)
	editor := s.signIn("ed", domain.RoleEdit)
	rows := editor.liveEventWith("/ui/test/live/ops/acme", "upgrades", 10*time.Second, `data-upgrade="to-113"`)
	require.Contains(t, rows, `data-phase="Pending"`)
	require.Contains(t, rows, `<span data-testid="upgrade-progress">0/0</span>`)

	// The saga's progress, written as it writes it.
	s.apiCall(http.MethodPut, "/tenants/acme/upgrades/to-113/status", map[string]any{
		"metadata": map[string]any{"resourceVersion": up.Metadata.ResourceVersion},
		"status": map[string]any{"phase": "Running", "current": "w-1", "machines": []map[string]any{
			{"name": "cp-1", "nodeGroup": "cp", "role": "controlplane", "from": "v1.12.0", "to": "v1.13.0", "phase": "Done"},
			{"name": "w-1", "nodeGroup": "workers", "role": "worker", "from": "v1.12.0", "to": "v1.13.0", "phase": "Failed",
				"error": "node did not come back; rolled back"},
			{"name": "w-2", "nodeGroup": "workers", "role": "worker", "from": "v1.12.0", "to": "v1.13.0", "phase": "Draining",
				"message": "Draining (4 pods left)", "replica": "host-a-42"},
		}}}, nil)
	rows = editor.liveEventWith("/ui/test/live/ops/acme", "upgrades", 10*time.Second, `data-upgrade-machine="w-1"`)
	require.Contains(t, rows, `data-upgrade-machine="cp-1"`)
	require.Contains(t, rows, `<span data-testid="upgrade-progress">2/3</span>`)
	require.Contains(t, rows, `data-phase="Running"`)
	require.Contains(t, rows, `data-phase="Done"`)
	require.Contains(t, rows, `data-phase="Failed"`)
	require.Contains(t, rows, "v1.12.0 → v1.13.0")
	require.Contains(t, rows, "node did not come back; rolled back")
	require.Contains(t, rows, `data-phase="Draining"`)
	require.Contains(t, rows, `<span class="ml-1 text-slate-600" data-testid="machine-message">Draining (4 pods left)</span>`)
	require.Contains(t, rows, `data-testid="machine-replica">on host-a-42</span>`, "the replica that runs the step")
	require.Contains(t, rows, "upgrading w-1")
	require.Contains(t, rows, `data-testid="cancel-upgrade"`)

	viewer := s.signIn("vi", domain.RoleView)
	rows = viewer.liveEventWith("/ui/test/live/ops/acme", "upgrades", 10*time.Second, `data-upgrade-machine="w-1"`)
	require.NotContains(t, rows, "data-mutating")
	r := viewer.hx(http.MethodPost, "/ui/tenants/acme/upgrades/to-113/cancel", nil)
	require.Equal(t, http.StatusForbidden, r.Code, r.Body)

	r = editor.hx(http.MethodPost, "/ui/tenants/acme/upgrades/to-113/cancel", nil)
	require.Equal(t, http.StatusOK, r.Code, r.Body)
	require.Contains(t, r.Body, `data-testid="cancel-requested"`)
	require.NotContains(t, r.Body, `data-testid="cancel-upgrade"`)
	var got domain.Upgrade
	s.apiCall(http.MethodGet, "/tenants/acme/upgrades/to-113", nil, &got)
	require.True(t, got.Spec.CancelRequested)

	r = editor.hx(http.MethodPost, "/ui/tenants/acme/upgrades/nope/cancel", nil)
	require.Equal(t, http.StatusNotFound, r.Code, r.Body)
	require.Contains(t, r.Body, `data-testid="flash-error"`)
}

// A run names what it moves: Talos or Kubernetes.
func TestUpgradeTableNamesTheTarget(t *testing.T) {
	us := []domain.Upgrade{
		{Metadata: domain.ObjectMeta{Name: "k", Tenant: "acme"}, Spec: domain.UpgradeSpec{KubernetesVersion: "v1.36.1", MaxParallelism: 1}},
		{Metadata: domain.ObjectMeta{Name: "t", Tenant: "acme"}, Spec: domain.UpgradeSpec{TalosVersion: "v1.13.1", MaxParallelism: 1}},
	}
	var b strings.Builder
	require.NoError(t, upgradeTable(viewer{}, "", us).Render(context.Background(), &b))
	require.Contains(t, b.String(), `data-testid="upgrade-target">→ Kubernetes v1.36.1</td>`)
	require.Contains(t, b.String(), `data-testid="upgrade-target">→ Talos v1.13.1</td>`)
}

// A machine whose step waits shows what it waits for, the last answer and
// its durations (with the since and deadline the page's script moves them
// on from), and the words change live as the saga records a new answer.
func TestUpgradeTableShowsTheWait(t *testing.T) {
	s := newOpsStack(t)
	opsAcme(s)
	var up domain.Object
	s.apiCall(http.MethodPost, "/tenants/acme/upgrades", map[string]any{"metadata": map[string]any{"name": "to-1355"},
		"spec": map[string]any{"kubernetesVersion": "v1.35.5"}}, &up)
	waiting := func(rv, lastErr, checked string) string {
		var got domain.Object
		s.apiCall(http.MethodPut, "/tenants/acme/upgrades/to-1355/status", map[string]any{
			"metadata": map[string]any{"resourceVersion": rv},
			"status": map[string]any{"phase": "Running", "current": "cp-1", "machines": []map[string]any{
				{"name": "cp-1", "nodeGroup": "cp", "role": "controlplane", "from": "v1.35.4", "to": "v1.35.5", "phase": "Verifying",
					"message": "waiting for kube-apiserver on cp-1 to answer v1.35.5: " + lastErr,
					"wait": map[string]any{"for": "kube-apiserver on cp-1 to answer v1.35.5", "since": "2026-05-01T11:55:50Z",
						"deadline": "2026-05-01T12:05:50Z", "lastError": lastErr, "checked": checked}},
				{"name": "w-1", "nodeGroup": "workers", "role": "worker", "from": "v1.35.4", "to": "v1.35.5", "phase": "Pending"},
			}}}, &got)
		return got.Metadata.ResourceVersion
	}
	rv := waiting(up.Metadata.ResourceVersion, "connection refused", "2026-05-01T12:00:00Z")

	editor := s.signIn("ed", domain.RoleEdit)
	first := true
	ok := editor.liveEvents("/ui/test/live/ops/acme", 10*time.Second, func(event, data string) bool {
		switch {
		case event != "upgrades" || !strings.Contains(data, `data-testid="step-wait"`):
			return false
		case first:
			require.Contains(t, data, `data-wait-since="2026-05-01T11:55:50.000Z" data-wait-deadline="2026-05-01T12:05:50.000Z"`)
			require.Contains(t, data, `>waiting for kube-apiserver on cp-1 to answer v1.35.5: connection refused, `+
				`<span data-wait-elapsed>4m10s</span> <span data-wait-left>(fails in 5m50s)</span></span>`)
			require.NotContains(t, data, `data-testid="machine-message"`, "the saga's words of the wait are not shown twice")
			require.Equal(t, 1, strings.Count(data, `data-testid="step-wait"`), "only the waiting machine")
			first = false
			waiting(rv, "503 Service Unavailable", "2026-05-01T12:00:20Z")
			return false
		}
		return strings.Contains(data, `>waiting for kube-apiserver on cp-1 to answer v1.35.5: 503 Service Unavailable, `+
			`<span data-wait-elapsed>4m30s</span> <span data-wait-left>(fails in 5m30s)</span></span>`)
	})
	require.True(t, ok, "the new answer shows live")
}
