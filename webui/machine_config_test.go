package webui

import (
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// A machine's CONFIG is up to date, failed (with the cause) or pending, on
// its page and in the tenant's machine list.
func TestMachineConfigState(t *testing.T) {
	s := newUIStack(t, withMachineLogs(&fakeMachineLogs{}))
	s.acmeMachine()
	for _, name := range []string{"m2", "m3"} {
		s.create("/tenants/acme/machines", map[string]any{"metadata": map[string]any{"name": name},
			"spec": map[string]any{"nodeGroup": "cp", "role": "controlplane"}})
	}
	hash := strings.Repeat("ab", 32)
	now := time.Now().UTC().Format(time.RFC3339)
	s.apiCall(http.MethodPatch, "/tenants/acme/machines/m1", map[string]any{"metadata": map[string]any{
		"annotations": map[string]any{domain.AnnotationConfigHash: hash}}}, nil)
	s.apiCall(http.MethodPatch, "/tenants/acme/machines/m1/status", map[string]any{"status": map[string]any{
		"stage": "Running", "ready": true, "configUpToDate": true, "conditions": []map[string]any{{"type": domain.ConditionConfigApplied,
			"status": "True", "reason": "AppliedInPlace", "message": "applied without a reboot", "lastTransitionTime": now}}}}, nil)
	s.apiCall(http.MethodPatch, "/tenants/acme/machines/m2/status", map[string]any{"status": map[string]any{
		"stage": "Running", "ready": true, "configUpToDate": false, "conditions": []map[string]any{{"type": domain.ConditionConfigApplied,
			"status": "False", "reason": "ApplyFailed", "message": "the node refused the <config>: unavailable", "lastTransitionTime": now}}}}, nil)
	viewer := s.signIn("vera", domain.RoleView)

	tests := []struct {
		machine string
		want    []string
	}{
		{"m1", []string{`data-config-state="up to date"`, `title="AppliedInPlace: applied without a reboot"`,
			`data-testid="config-hash">abababababab<`, `title="` + hash + `"`, `data-config-change="` + hash + `"`}},
		{"m2", []string{`data-config-state="failed"`, "ApplyFailed: the node refused the &lt;config&gt;: unavailable", "none yet",
			`data-config-change=""`, "not applied"}},
		{"m3", []string{`data-config-state="pending"`, "none yet", "No config recorded yet."}},
	}
	for _, tc := range tests {
		t.Run(tc.machine, func(t *testing.T) {
			p := viewer.get("/ui/tenants/acme/machines/" + tc.machine)
			require.Equal(t, http.StatusOK, p.Code, p.Body)
			for _, w := range tc.want {
				require.Contains(t, p.Body, w)
			}
		})
	}
	require.NotContains(t, viewer.get("/ui/tenants/acme/machines/m3").Body, `data-testid="config-reason"`, "pending without a cause says none")

	// The history: the hash, then how it was applied (the status written after it).
	p := viewer.get("/ui/tenants/acme/machines/m1")
	require.Regexp(t, `data-config-change="`+hash+`"[\s\S]*?abababababab[\s\S]*?data-testid="config-result">\s*<span[^>]*>AppliedInPlace</span>[\s\S]*?applied without a reboot[\s\S]*?admin`, p.Body)
	require.Equal(t, 1, strings.Count(p.Body, "data-config-change="), "one config reached m1")
	// A later config the node refuses is a failure entry, newest first, live.
	var once sync.Once
	ok := viewer.liveEvents("/ui/live/tenants/acme/machines/m1", 15*time.Second, func(event, data string) bool {
		if event != "machine" {
			return false
		}
		once.Do(func() {
			s.apiCall(http.MethodPatch, "/tenants/acme/machines/m1/status", map[string]any{"status": map[string]any{
				"configUpToDate": false, "conditions": []map[string]any{{"type": domain.ConditionConfigApplied,
					"status": "False", "reason": "RenderFailed", "message": "patch gpu does not apply", "lastTransitionTime": now}}}}, nil)
		})
		return regexp.MustCompile(`data-config-change=""[\s\S]*?RenderFailed[\s\S]*?patch gpu does not apply[\s\S]*?data-config-change="` + hash + `"`).MatchString(data)
	})
	require.True(t, ok, "the failure shows first in the live history")
	s.apiCall(http.MethodPatch, "/tenants/acme/machines/m1/status", map[string]any{"status": map[string]any{
		"configUpToDate": true, "conditions": []map[string]any{{"type": domain.ConditionConfigApplied,
			"status": "True", "reason": "AppliedInPlace", "message": "applied without a reboot", "lastTransitionTime": now}}}}, nil)

	p = viewer.get("/ui/tenants/acme")
	require.Equal(t, http.StatusOK, p.Code, p.Body)
	for name, want := range map[string]string{"m1": "up to date", "m2": "failed", "m3": "pending"} {
		re := regexp.MustCompile(`data-machine="` + name + `"[\s\S]*?data-testid="config-state">\s*<span[^>]*data-config-state="([^"]+)"`)
		m := re.FindStringSubmatch(p.Body)
		require.NotNil(t, m, name)
		require.Equal(t, want, m[1], name)
	}
	require.Regexp(t, `data-machine="m2"[\s\S]*?data-testid="config-state">[\s\S]*?ApplyFailed</span>`, p.Body, "a failure names its reason in the list")
}
