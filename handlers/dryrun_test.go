package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/talos"
)

// labelsInPlace stands in for the nodes of the handler tests (10.0.0.x
// answers nothing here; the e2e tests ask real emulated nodes): a config
// with a sysctl would reboot, anything else is taken in place.
type labelsInPlace struct{}

func (labelsInPlace) ApplyConfigDryRun(_ context.Context, _ *secrets.Bundle, _ string, cfg []byte) (talos.ApplyResult, error) {
	if strings.Contains(string(cfg), "sysctls:") {
		return talos.ApplyResult{Mode: machine.ApplyConfigurationRequest_REBOOT}, nil
	}
	return talos.ApplyResult{Mode: machine.ApplyConfigurationRequest_NO_REBOOT}, nil
}

type dryRunAnswer struct {
	Spec   json.RawMessage      `json:"spec"`
	Impact *domain.ChangeImpact `json:"impact"`
	Error  string               `json:"impactError"`
}

func TestDryRunShowsImpactAndWritesNothing(t *testing.T) {
	s := newTalosStack(t)
	s.acme()
	byMachine := func(a dryRunAnswer) map[string]domain.MachineImpact {
		out := map[string]domain.MachineImpact{}
		for _, m := range a.Impact.Machines {
			out[m.Machine] = m
		}
		return out
	}
	dry := func(method, path string, body any) dryRunAnswer {
		t.Helper()
		var a dryRunAnswer
		require.Eventually(t, func() bool { // the tenant's PKI comes a moment after it
			r := s.do(method, path+"?dryRun=All", body)
			want := http.StatusOK
			if method == http.MethodPost {
				want = http.StatusCreated // as the write would answer
			}
			require.Equal(t, want, r.Code, string(r.Body))
			a = dryRunAnswer{}
			require.NoError(t, json.Unmarshal(r.Body, &a))
			return a.Impact != nil
		}, 10*time.Second, 20*time.Millisecond)
		return a
	}
	before := s.do(http.MethodGet, "/api/v1/tenants/acme/nodegroups/workers", nil)

	// A node label: the workers' configs change, in place; the control plane's not.
	a := dry(http.MethodPatch, "/api/v1/tenants/acme/nodegroups/workers", `{"spec":{"labels":{"tier":"api"}}}`)
	require.Contains(t, string(a.Spec), `"tier":"api"`, "the object as it would be stored")
	m := byMachine(a)
	require.Equal(t, domain.ImpactReconfigure, m["w1"].Action)
	require.True(t, m["w1"].ConfigChanges)
	require.False(t, m["w1"].Reboot)
	require.Equal(t, domain.ImpactNone, m["cp1"].Action)
	require.Equal(t, "0 rebooted (drained first), 1 reconfigured in place, 0 created, 0 destroyed, 1 unchanged", a.Impact.Summary)

	// A sysctl on every machine, by a config patch: Talos would reboot them.
	a = dry(http.MethodPost, "/api/v1/tenants/acme/configpatches", map[string]any{"metadata": map[string]any{"name": "sysctl"},
		"spec": map[string]any{"target": map[string]any{"kind": "all"}, "patch": "machine:\n  sysctls:\n    vm.max_map_count: \"262144\"\n"}})
	for _, name := range []string{"cp1", "w1"} {
		require.Equal(t, domain.ImpactReboot, byMachine(a)[name].Action, name)
		require.True(t, byMachine(a)[name].Drain, name)
	}

	// Fewer machines: the one that goes is named.
	a = dry(http.MethodPatch, "/api/v1/tenants/acme/nodegroups/workers", `{"spec":{"count":0}}`)
	require.Equal(t, domain.ImpactDestroy, byMachine(a)["w1"].Action)

	// Nothing was written.
	after := s.do(http.MethodGet, "/api/v1/tenants/acme/nodegroups/workers", nil)
	require.JSONEq(t, string(before.Body), string(after.Body))
	require.Equal(t, http.StatusNotFound, s.do(http.MethodGet, "/api/v1/tenants/acme/configpatches/sysctl", nil).Code)

	// A dry run is never a real write: other values and other routes are refused.
	r := s.do(http.MethodPatch, "/api/v1/tenants/acme/nodegroups/workers?dryRun=true", `{"spec":{"count":0}}`)
	require.Equal(t, http.StatusBadRequest, r.Code)
	require.Equal(t, "dryRun", r.status(t).Details.Causes[0].Field)
	r = s.do(http.MethodDelete, "/api/v1/tenants/acme/nodegroups/workers?dryRun=All", nil)
	require.Equal(t, http.StatusBadRequest, r.Code, string(r.Body))
	r = s.do(http.MethodPost, "/api/v1/users?dryRun=All", map[string]any{"metadata": map[string]any{"name": "dora"}, "spec": map[string]any{"role": "view"}})
	require.Equal(t, http.StatusBadRequest, r.Code, string(r.Body))
	require.Equal(t, http.StatusNotFound, s.do(http.MethodGet, "/api/v1/users/dora", nil).Code)
	after = s.do(http.MethodGet, "/api/v1/tenants/acme/nodegroups/workers", nil)
	require.JSONEq(t, string(before.Body), string(after.Body))
}
