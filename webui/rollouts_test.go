package webui

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// The rollouts page lists rollouts live; an admin starts one through the
// form (the API's refusals come back on the form's fields); a rollout's page
// draws its waves with a tile per tenant by state, the halt with the tenant
// named, and Resume/Pause/Abort for admins only.
func TestRolloutPages(t *testing.T) {
	s := newUIStack(t)
	admin := s.signIn("ad", domain.RoleAdmin)
	viewer := s.signIn("vi", domain.RoleView)

	page := admin.get("/ui/rollouts")
	require.Equal(t, http.StatusOK, page.Code, page.Body)
	for _, w := range []string{"No rollouts yet.", `sse-swap="rollouts"`, `data-testid="rollout-create"`, `href="/ui/rollouts"`} {
		require.Contains(t, page.Body, w)
	}
	page = viewer.get("/ui/rollouts")
	require.Equal(t, http.StatusOK, page.Code, page.Body)
	require.NotContains(t, page.Body, `data-testid="rollout-create"`, "only admins start rollouts")

	// Bad input: every field at fault is named on the form.
	r := admin.hx(http.MethodPost, "/ui/rollouts", url.Values{"metadata.name": {"r1"}, "change": {"talosVersion"}, "version": {"latest"},
		"spec.waves": {"1,50%"}, "spec.soak": {"10m"}})
	require.Equal(t, http.StatusUnprocessableEntity, r.Code, r.Body)
	require.Contains(t, r.Body, "the last wave must be {percent: 100}")
	r = admin.hx(http.MethodPost, "/ui/rollouts", url.Values{"metadata.name": {"r1"}, "change": {"talosVersion"}, "version": {"v1.13.1"},
		"spec.waves": {"one"}, "spec.soak": {"10m"}})
	require.Equal(t, http.StatusUnprocessableEntity, r.Code, r.Body)
	require.Contains(t, r.Body, "neither a tenant count nor a percentage")

	r = admin.hx(http.MethodPost, "/ui/rollouts", url.Values{"metadata.name": {"r1"}, "change": {"talosVersion"}, "version": {"v1.13.1"},
		"spec.tenantSelector": {"env=prod"}, "spec.waves": {"1,50%,100%"}, "spec.soak": {"30m"}, "maxParallel": {"2"}})
	require.Equal(t, http.StatusCreated, r.Code, r.Body)
	var ro domain.Rollout
	s.apiCall(http.MethodGet, "/rollouts/r1", nil, &ro)
	require.Equal(t, "v1.13.1", ro.Spec.Change.TalosVersion)
	require.Equal(t, []domain.RolloutWave{{Tenants: 1, MaxParallel: 2}, {Percent: 50, MaxParallel: 2}, {Percent: 100, MaxParallel: 2}}, ro.Spec.Waves)
	r = viewer.hx(http.MethodPost, "/ui/rollouts", url.Values{"metadata.name": {"r2"}, "change": {"talosVersion"}, "version": {"v1.13.1"}, "spec.waves": {"100%"}})
	require.Equal(t, http.StatusForbidden, r.Code, r.Body)

	// A halted rollout as the controller records it.
	now := time.Now().UTC()
	st := domain.RolloutStatus{Phase: domain.RolloutHalted, Message: "halted at tenant t3: its change failed: upgrade refused",
		StartedAt: &now,
		Waves: []domain.RolloutWaveStatus{{Size: 1, State: domain.RolloutWaveDone}, {Size: 2, State: domain.RolloutWaveRunning,
			Wait: &domain.StepWait{For: "tenants of wave 2 to finish Talos v1.13.1 (1 of 2 done)", Since: now, Deadline: now.Add(6 * time.Hour), LastError: "t3: upgrade refused"}}, {Size: 3, State: domain.RolloutWaveWaiting}},
		Tenants: []domain.RolloutTenantStatus{{Name: "t1", State: "Done"}, {Name: "t2", Wave: 1, State: "Done"}, {Name: "t3", Wave: 1, State: "Failed", Attempt: 1, Message: "upgrade refused"},
			{Name: "t4", Wave: 2, State: "Waiting"}, {Name: "t5", Wave: 2, State: "Waiting"}, {Name: "t6", Wave: 2, State: "Waiting"}},
		Halt:   &domain.RolloutHalt{Number: 1, Tenant: "t3", Reason: "its change failed: upgrade refused", At: now},
		Counts: domain.RolloutCounts{Total: 6, Done: 2, Failed: 1, Waiting: 3}}
	s.record(domain.RolloutKind, "", "halted", domain.RolloutSpec{Change: domain.RolloutChange{TalosVersion: "v1.13.1"},
		Waves: []domain.RolloutWave{{Tenants: 1}, {Percent: 50}, {Percent: 100}}, Soak: "5m"}, st)
	page = admin.get("/ui/rollouts/halted")
	require.Equal(t, http.StatusOK, page.Code, page.Body)
	for _, w := range []string{`data-testid="rollout-halt"`, "Halted at tenant", `href="/ui/tenants/t3"`, `data-wave="3" data-state="Waiting"`,
		`data-tenant="t3" data-state="Failed"`, `data-tenant="t1" data-state="Done"`, `data-testid="resume-rollout"`, `data-testid="abort-rollout"`,
		`sse-connect="/ui/live/rollouts/halted`, "upgrade refused", "2/6", `data-testid="wave-wait"`,
		"waiting for tenants of wave 2 to finish Talos v1.13.1 (1 of 2 done): t3: upgrade refused"} {
		require.Contains(t, page.Body, w)
	}
	page = viewer.get("/ui/rollouts/halted")
	require.Equal(t, http.StatusOK, page.Code, page.Body)
	require.NotContains(t, page.Body, `data-testid="resume-rollout"`)
	require.NotContains(t, page.Body, `data-testid="abort-rollout"`)

	// Resume acknowledges the halt by its number; pause and abort set the spec.
	r = viewer.hx(http.MethodPost, "/ui/rollouts/halted/resume", url.Values{})
	require.Equal(t, http.StatusForbidden, r.Code, r.Body)
	r = admin.hx(http.MethodPost, "/ui/rollouts/halted/resume", url.Values{})
	require.Equal(t, http.StatusOK, r.Code, r.Body)
	s.apiCall(http.MethodGet, "/rollouts/halted", nil, &ro)
	require.Equal(t, 1, ro.Spec.ResumeHalt)
	require.False(t, ro.Spec.Paused)
	r = admin.hx(http.MethodPost, "/ui/rollouts/halted/pause", url.Values{})
	require.Equal(t, http.StatusOK, r.Code, r.Body)
	r = admin.hx(http.MethodPost, "/ui/rollouts/halted/abort", url.Values{})
	require.Equal(t, http.StatusOK, r.Code, r.Body)
	s.apiCall(http.MethodGet, "/rollouts/halted", nil, &ro)
	require.True(t, ro.Spec.Paused)
	require.True(t, ro.Spec.Abort)
	r = admin.hx(http.MethodPost, "/ui/rollouts/halted/explode", url.Values{})
	require.Equal(t, http.StatusNotFound, r.Code, r.Body)

	// The list is live: a new rollout shows up on the open stream.
	require.True(t, admin.liveEventsOpen("/ui/live/rollouts", 10*time.Second, func() {
		s.record(domain.RolloutKind, "", "later", domain.RolloutSpec{Change: domain.RolloutChange{KubernetesVersion: "v1.36.1"},
			Waves: []domain.RolloutWave{{Percent: 100}}, Soak: "0s"}, nil)
	}, func(event, data string) bool {
		return event == "rollouts" && strings.Contains(data, `data-rollout="later"`)
	}))

	// A large wave is drawn as small tiles, not names.
	var big []domain.RolloutTenantStatus
	for i := range 60 {
		big = append(big, domain.RolloutTenantStatus{Name: "big-" + strings.Repeat("x", i%3) + string(rune('a'+i%26)), State: "Waiting"})
	}
	s.record(domain.RolloutKind, "", "big", domain.RolloutSpec{Change: domain.RolloutChange{TalosVersion: "v1.13.1"},
		Waves: []domain.RolloutWave{{Percent: 100}}, Soak: "0s"},
		domain.RolloutStatus{Phase: domain.RolloutProgressing, Waves: []domain.RolloutWaveStatus{{Size: 60, State: "Running"}}, Tenants: big})
	page = admin.get("/ui/rollouts/big")
	require.Equal(t, http.StatusOK, page.Code, page.Body)
	require.Contains(t, page.Body, `class="block h-3 w-3 rounded-sm`)
}
