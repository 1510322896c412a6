package handlers_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// upgradeStack is a tenant "acme" with a control-plane and a worker group and
// one machine in each, both observed on v1.12.0.
func upgradeStack(t *testing.T) *stack {
	s := newStack(t).withProvider()
	s.mustCreate("/api/v1/tenants", map[string]any{"metadata": map[string]any{"name": "acme"}, "spec": map[string]any{"talosVersion": "v1.12.0"}})
	s.mustCreate("/api/v1/tenants/acme/nodegroups", map[string]any{"metadata": map[string]any{"name": "cp"},
		"spec": map[string]any{"role": "controlplane", "count": 1, "provider": "emu"}})
	s.mustCreate("/api/v1/tenants/acme/nodegroups", nodeGroupBody("workers", 1))
	for name, group := range map[string]string{"cp-1": "cp", "w-1": "workers"} {
		role := "worker"
		if group == "cp" {
			role = "controlplane"
		}
		m := s.mustCreate("/api/v1/tenants/acme/machines", map[string]any{"metadata": map[string]any{"name": name},
			"spec": map[string]any{"nodeGroup": group, "role": role, "address": "10.0.0.1"}})
		r := s.do(http.MethodPut, "/api/v1/tenants/acme/machines/"+name+"/status", map[string]any{
			"metadata": map[string]any{"resourceVersion": m.Metadata.ResourceVersion},
			"status":   map[string]any{"stage": "Running", "ready": true, "talosVersion": "v1.12.0"}})
		require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	}
	return s
}

func upgradeBody(name string, spec map[string]any) map[string]any {
	return map[string]any{"metadata": map[string]any{"name": name}, "spec": spec}
}

func causeFieldsOf(st domain.Status) []string {
	var out []string
	if st.Details != nil {
		for _, c := range st.Details.Causes {
			out = append(out, c.Field)
		}
	}
	return out
}

func TestUpgradeCreateChecksVersions(t *testing.T) {
	s := upgradeStack(t)
	tests := []struct {
		name   string
		spec   map[string]any
		fields []string
		msg    string
	}{
		{"skips a minor version", map[string]any{"talosVersion": "v1.14.0"}, []string{"spec.talosVersion"}, "machines cp-1, w-1 run v1.12.0: v1.12.0 to v1.14.0 skips a minor version; upgrade to v1.13.x first"},
		{"downgrade across a minor version", map[string]any{"talosVersion": "v1.11.3", "nodeGroups": []string{"workers"}}, []string{"spec.talosVersion"}, "machines w-1 run v1.12.0: v1.12.0 to v1.11.3 is a downgrade"},
		{"unknown node group", map[string]any{"talosVersion": "v1.13.0", "nodeGroups": []string{"gpu", "workers"}}, []string{"spec.nodeGroups[0]"}, `node group "gpu" does not exist`},
		{"not a version", map[string]any{"talosVersion": "latest"}, []string{"spec.talosVersion"}, "not a semantic version"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := s.do(http.MethodPost, "/api/v1/tenants/acme/upgrades", upgradeBody("bad", tc.spec))
			require.Equal(t, http.StatusUnprocessableEntity, r.Code, string(r.Body))
			st := r.status(t)
			require.Equal(t, domain.ReasonInvalid, st.Reason)
			require.Equal(t, tc.fields, causeFieldsOf(st))
			require.Contains(t, st.Message, tc.msg)
		})
	}
	u := s.mustCreate("/api/v1/tenants/acme/upgrades", upgradeBody("to-113", map[string]any{"talosVersion": "1.13.0", "nodeGroups": []string{"workers"}}))
	require.JSONEq(t, `{"talosVersion":"v1.13.0","nodeGroups":["workers"],"maxParallelism":1}`, string(u.Spec))
	require.JSONEq(t, `{"phase":"Pending"}`, string(u.Status))
}

// TestUpgradeCreateChecksKubernetesVersions: an Upgrade of Kubernetes is
// refused with a cause on spec.kubernetesVersion when its run would refuse it
// (from the version the configs carry, against the machines' Talos
// versions), and on spec.nodeGroups when it names groups.
func TestUpgradeCreateChecksKubernetesVersions(t *testing.T) {
	s := versionStack(t, "v1.34.2")
	tests := []struct {
		name   string
		spec   map[string]any
		fields []string
		msg    string
	}{
		{"skips a minor version", map[string]any{"kubernetesVersion": "v1.36.0"}, []string{"spec.kubernetesVersion"},
			"the machines' configs carry Kubernetes v1.34.2: Kubernetes v1.34.2 to v1.36.0 skips a minor version; upgrade to v1.35.x first"},
		{"downgrade", map[string]any{"kubernetesVersion": "v1.34.1"}, []string{"spec.kubernetesVersion"}, "v1.34.2 to v1.34.1 is a downgrade"},
		{"both versions", map[string]any{"kubernetesVersion": "v1.35.0", "talosVersion": "v1.13.0"}, []string{"spec.kubernetesVersion"}, "not both"},
		{"node groups", map[string]any{"kubernetesVersion": "v1.35.0", "nodeGroups": []string{"workers"}}, []string{"spec.nodeGroups"}, "covers every machine of the tenant"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := s.do(http.MethodPost, "/api/v1/tenants/acme/upgrades", upgradeBody("bad", tc.spec))
			require.Equal(t, http.StatusUnprocessableEntity, r.Code, string(r.Body))
			st := r.status(t)
			require.Equal(t, domain.ReasonInvalid, st.Reason)
			require.Equal(t, tc.fields, causeFieldsOf(st))
			require.Contains(t, st.Message, tc.msg)
		})
	}
	// Talos 1.12 runs Kubernetes up to 1.35.
	u := s.mustCreate("/api/v1/tenants/acme/upgrades", upgradeBody("k8s-135", map[string]any{"kubernetesVersion": "1.35.0"}))
	require.JSONEq(t, `{"kubernetesVersion":"v1.35.0","maxParallelism":1}`, string(u.Spec))

	// A Talos version the machines' configs' Kubernetes does not run: Talos
	// 1.13 runs Kubernetes 1.31 at the oldest.
	old := versionStack(t, "v1.30.5")
	r := old.do(http.MethodPost, "/api/v1/tenants/acme/upgrades", upgradeBody("to-113", map[string]any{"talosVersion": "v1.13.0"}))
	require.Equal(t, http.StatusUnprocessableEntity, r.Code, string(r.Body))
	require.Equal(t, []string{"spec.talosVersion"}, causeFieldsOf(r.status(t)))
	require.Contains(t, r.status(t).Message, "machines cp-1, w-1 run v1.12.0: version of Kubernetes 1.30.5 is too old to be used with Talos 1.13.0")
	// On Talos 1.12, Kubernetes 1.36 is too new.
	tooNew := versionStack(t, "v1.35.1")
	r = tooNew.do(http.MethodPost, "/api/v1/tenants/acme/upgrades", upgradeBody("k8s-136", map[string]any{"kubernetesVersion": "v1.36.0"}))
	require.Equal(t, http.StatusUnprocessableEntity, r.Code, string(r.Body))
	require.Contains(t, r.status(t).Message, "machines cp-1, w-1 run Talos v1.12.0: version of Kubernetes 1.36.0 is too new to be used with Talos 1.12.0")
}

func TestUpgradeSpecIsFixedButCancelRequested(t *testing.T) {
	s := upgradeStack(t)
	u := s.mustCreate("/api/v1/tenants/acme/upgrades", upgradeBody("to-113", map[string]any{"talosVersion": "v1.13.0"}))
	const path = "/api/v1/tenants/acme/upgrades/to-113"

	r := s.do(http.MethodPut, path, map[string]any{"metadata": map[string]any{"name": "to-113", "resourceVersion": u.Metadata.ResourceVersion},
		"spec": map[string]any{"talosVersion": "v1.13.1"}})
	require.Equal(t, http.StatusUnprocessableEntity, r.Code, string(r.Body))
	require.Equal(t, []string{"spec"}, causeFieldsOf(r.status(t)))
	r = s.do(http.MethodPatch, path, `{"spec":{"maxParallelism":3}}`)
	require.Equal(t, http.StatusUnprocessableEntity, r.Code, string(r.Body))

	r = s.do(http.MethodPatch, path, `{"metadata":{"labels":{"team":"infra"}}}`)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	r = s.do(http.MethodPatch, path, `{"spec":{"cancelRequested":true}}`)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	require.Contains(t, string(r.object(t).Spec), `"cancelRequested":true`)
	r = s.do(http.MethodPatch, path, `{"spec":{"cancelRequested":false}}`)
	require.Equal(t, http.StatusUnprocessableEntity, r.Code, string(r.Body))
	require.Equal(t, []string{"spec.cancelRequested"}, causeFieldsOf(r.status(t)))
}

func TestUpgradeCancelAndDelete(t *testing.T) {
	s := upgradeStack(t)
	s.mustCreate("/api/v1/tenants/acme/upgrades", upgradeBody("to-113", map[string]any{"talosVersion": "v1.13.0"}))
	const path = "/api/v1/tenants/acme/upgrades/to-113"
	setPhase := func(phase string) {
		t.Helper()
		cur := s.do(http.MethodGet, path, nil).object(t)
		r := s.do(http.MethodPut, path+"/status", map[string]any{"metadata": map[string]any{"resourceVersion": cur.Metadata.ResourceVersion},
			"status": map[string]any{"phase": phase}})
		require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	}
	setPhase(domain.UpgradeRunning)

	r := s.do(http.MethodDelete, path, nil)
	require.Equal(t, http.StatusConflict, r.Code, string(r.Body))
	require.Contains(t, r.status(t).Message, "cancel it")

	before := s.lastSeq()
	r = s.do(http.MethodPost, path+"/cancel", nil)
	require.Equal(t, http.StatusAccepted, r.Code, string(r.Body))
	require.Contains(t, r.status(t).Message, "stops after the machine it is upgrading")
	require.Equal(t, before+1, s.lastSeq(), "one event: UpgradeCancelRequested")
	var got domain.Upgrade
	require.NoError(t, json.Unmarshal(s.do(http.MethodGet, path, nil).Body, &got))
	require.True(t, got.Spec.CancelRequested, "read after write")
	require.Equal(t, int64(2), got.Metadata.Generation)

	r = s.do(http.MethodPost, path+"/cancel", nil)
	require.Equal(t, http.StatusAccepted, r.Code, "asking again is fine: %s", r.Body)
	require.Equal(t, before+1, s.lastSeq(), "and changes nothing")

	setPhase(domain.UpgradeCanceled)
	r = s.do(http.MethodPost, path+"/cancel", nil)
	require.Equal(t, http.StatusConflict, r.Code, string(r.Body))
	require.Contains(t, r.status(t).Message, "already finished (Canceled)")
	require.Equal(t, http.StatusOK, s.do(http.MethodDelete, path, nil).Code)

	r = s.do(http.MethodPost, "/api/v1/tenants/acme/upgrades/nope/cancel", nil)
	require.Equal(t, http.StatusNotFound, r.Code, string(r.Body))
	r = s.do(http.MethodPost, "/api/v1/tenants/acme/upgrades/No_Such/cancel", nil)
	require.Equal(t, http.StatusBadRequest, r.Code, string(r.Body))
}
