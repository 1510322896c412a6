package webui

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestNodeGroupDelete(t *testing.T) {
	s := newUIStack(t)
	s.acme()
	edit, view := s.signIn("erin", "edit"), s.signIn("vic", "view")

	require.NotContains(t, view.get("/ui/tenants/acme").Body, `data-testid="delete-nodegroup"`)
	page := edit.get("/ui/tenants/acme")
	require.Contains(t, page.Body, `aria-label="Delete node group workers"`)
	require.Regexp(t, `hx-confirm="Delete node group workers of acme\? Its 2 machines will be removed by the next apply."`, page.Body)

	p := view.hxTarget(http.MethodDelete, "/ui/tenants/acme/nodegroups/workers", "nodegroup-rows")
	require.Equal(t, http.StatusForbidden, p.Code, p.Body)
	require.Equal(t, "#flash", p.Header.Get("HX-Retarget"))

	p = edit.hxTarget(http.MethodDelete, "/ui/tenants/acme/nodegroups/nope", "nodegroup-rows")
	require.Equal(t, http.StatusNotFound, p.Code, p.Body)

	p = edit.hxTarget(http.MethodDelete, "/ui/tenants/acme/nodegroups/workers", "nodegroup-rows")
	require.Equal(t, http.StatusOK, p.Code, p.Body)
	require.NotContains(t, p.Body, "<html")
	require.NotContains(t, p.Body, `data-nodegroup="workers"`)
	require.Contains(t, p.Body, `data-nodegroup="cp"`)
	code, _ := s.apiRaw(http.MethodGet, "/tenants/acme/nodegroups/workers", nil)
	require.Equal(t, http.StatusNotFound, code)
}

func TestNodeGroupTaints(t *testing.T) {
	s := newUIStack(t)
	s.acme()
	edit := s.signIn("erin", "edit")
	p := edit.get("/ui/tenants/acme/nodegroups/workers/edit")
	require.Equal(t, http.StatusOK, p.Code, p.Body)
	require.Regexp(t, `for="nodegroup-taints"[\s\S]*?id="nodegroup-taints"`, p.Body)

	form := func(taints string) url.Values {
		return url.Values{"metadata.resourceVersion": {s.nodeGroup("acme", "workers").Metadata.ResourceVersion}, "spec.count": {"2"},
			"spec.labels": {"tier=gpu"}, "spec.updateStrategy.maxParallelism": {"1"}, "spec.taints": {taints}}
	}
	p = edit.hx(http.MethodPost, "/ui/tenants/acme/nodegroups/workers", form("dedicated=gpu:Sometimes\nnocolon"))
	require.Equal(t, http.StatusUnprocessableEntity, p.Code, p.Body)
	require.Contains(t, p.Body, `data-field-error="spec.taints">&#34;nocolon&#34; is not key=value:Effect`)

	p = edit.hx(http.MethodPost, "/ui/tenants/acme/nodegroups/workers", form("dedicated=gpu:Sometimes"))
	require.Equal(t, http.StatusUnprocessableEntity, p.Code, p.Body)
	require.Regexp(t, `data-field-error="spec.taints">[^<]*NoSchedule`, p.Body)
	require.Contains(t, p.Body, "dedicated=gpu:Sometimes</textarea>") // what was typed is kept

	p = edit.hx(http.MethodPost, "/ui/tenants/acme/nodegroups/workers", form("dedicated=gpu:NoSchedule\nspot:PreferNoSchedule"))
	require.Equal(t, http.StatusOK, p.Code, p.Body)
	ng := s.nodeGroup("acme", "workers")
	require.Equal(t, []domain.Taint{{Key: "dedicated", Value: "gpu", Effect: "NoSchedule"}, {Key: "spot", Effect: "PreferNoSchedule"}}, ng.Spec.Taints)
	require.Equal(t, map[string]string{"tier": "gpu"}, ng.Spec.Labels)

	p = edit.get("/ui/tenants/acme/nodegroups/workers/edit")
	require.Contains(t, p.Body, "dedicated=gpu:NoSchedule\nspot:PreferNoSchedule</textarea>")

	p = edit.hx(http.MethodPost, "/ui/tenants/acme/nodegroups/workers", form(""))
	require.Equal(t, http.StatusOK, p.Code, p.Body)
	require.Empty(t, s.nodeGroup("acme", "workers").Spec.Taints)
}

// An autoscaled group shows its bounds and target; its count is the
// autoscaler's, so the scale buttons are disabled and say why, and the
// edit form's count field says who owns it.
func TestNodeGroupAutoscaledView(t *testing.T) {
	v := viewer{access: domain.GlobalAccess(domain.RoleEdit)}
	tn := domain.Tenant{Metadata: domain.ObjectMeta{Name: "acme"}}
	ngs := []domain.NodeGroup{
		{Metadata: domain.ObjectMeta{Name: "burst"}, Spec: domain.NodeGroupSpec{Role: domain.RoleWorker, Count: 3,
			Autoscaling: &domain.Autoscaling{MinCount: 1, MaxCount: 5}}},
		{Metadata: domain.ObjectMeta{Name: "fixed"}, Spec: domain.NodeGroupSpec{Role: domain.RoleWorker, Count: 2}},
	}
	var b strings.Builder
	require.NoError(t, nodeGroupTable(v, tn, ngs, nil).Render(t.Context(), &b))
	burst, fixed, ok := strings.Cut(b.String(), `data-nodegroup="fixed"`)
	require.True(t, ok)
	require.Regexp(t, `data-testid="nodegroup-count">3<span[^>]*>\s*autoscaled 1–5, target 3\s*</span>`, burst)
	require.Equal(t, 2, strings.Count(burst, `disabled title="The cluster-autoscaler sets this group&#39;s count`), "both scale buttons")
	require.Contains(t, fixed, `data-testid="nodegroup-count">2</td>`)
	require.NotContains(t, fixed, "autoscale")
	require.NotRegexp(t, `\sdisabled[\s>]`, fixed, "a group of 2 scales both ways by hand")

	b.Reset()
	require.NoError(t, nodeGroupEditFormView(v, editFormOf("acme", &ngs[0])).Render(t.Context(), &b))
	require.Contains(t, b.String(), "Owned by the cluster-autoscaler, within 1–5")
}
