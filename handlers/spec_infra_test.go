package handlers_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// causeFields are the fields of a 422's causes, with their messages.
func causeFields(t *testing.T, r response) map[string]string {
	t.Helper()
	require.Equal(t, http.StatusUnprocessableEntity, r.Code, string(r.Body))
	st := r.status(t)
	require.Equal(t, domain.ReasonInvalid, st.Reason)
	require.NotNil(t, st.Details, string(r.Body))
	out := map[string]string{}
	for _, c := range st.Details.Causes {
		out[c.Field] = c.Message
	}
	return out
}

// TestProviderConfigValidatedAtWriteTime: the provider type's own validation
// (the generator's) answers a 422 naming the field, on create, update and
// patch of Providers and node groups; a node group naming a Provider that
// does not exist is refused on spec.provider.
func TestProviderConfigValidatedAtWriteTime(t *testing.T) {
	s := newStack(t)
	s.mustCreate("/api/v1/tenants", tenantBody("acme", nil))

	f := causeFields(t, s.do("POST", "/api/v1/providers", `{"metadata":{"name":"emu"},"spec":{"type":"emulated","config":{}}}`))
	require.Equal(t, map[string]string{"spec.config.endpoint": "required unless spec.credentialsRef names credentials that hold EMULATOR_ENDPOINT"}, f)
	f = causeFields(t, s.do("POST", "/api/v1/providers", `{"metadata":{"name":"os"},"spec":{"type":"openstack","config":{"authURL":"https://k","password":"x"}}}`))
	require.Equal(t, map[string]string{"spec.config.password": "unknown field"}, f)
	f = causeFields(t, s.do("POST", "/api/v1/providers", `{"metadata":{"name":"rack"},"spec":{"type":"metal","config":{"endpoint":"x"}}}`))
	require.Contains(t, f, "spec.config.endpoint")

	f = causeFields(t, s.do("POST", "/api/v1/tenants/acme/nodegroups", nodeGroupBody("workers", 1)))
	require.Equal(t, map[string]string{"spec.provider": `provider "emu" not found; create the Provider first`}, f)

	s.withProvider()
	f = causeFields(t, s.do(http.MethodPatch, "/api/v1/providers/emu", `{"spec":{"config":{"endpoint":"127.0.0.1:8089"}}}`))
	require.Contains(t, f["spec.config.endpoint"], "must be an http URL")
	cur := s.do(http.MethodGet, "/api/v1/providers/emu", nil).object(t)
	f = causeFields(t, s.do(http.MethodPut, "/api/v1/providers/emu", fmt.Sprintf(`{"metadata":{"name":"emu","resourceVersion":%q},"spec":{"type":"emulated","config":{"endpoint":"http://x","region":"a"}}}`, cur.Metadata.ResourceVersion)))
	require.Equal(t, map[string]string{"spec.config.region": "unknown field"}, f)

	f = causeFields(t, s.do("POST", "/api/v1/tenants/acme/nodegroups", `{"metadata":{"name":"workers"},"spec":{"role":"worker","count":1,"provider":"emu","providerConfig":{"flavor":"m1"}}}`))
	require.Equal(t, map[string]string{"spec.providerConfig.flavor": "unknown field"}, f)
	s.mustCreate("/api/v1/tenants/acme/nodegroups", nodeGroupBody("workers", 1))
	f = causeFields(t, s.do(http.MethodPatch, "/api/v1/tenants/acme/nodegroups/workers", `{"spec":{"providerConfig":{"flavor":"m1"}}}`))
	require.Equal(t, map[string]string{"spec.providerConfig.flavor": "unknown field"}, f)
	f = causeFields(t, s.do(http.MethodPatch, "/api/v1/tenants/acme/nodegroups/workers", `{"spec":{"provider":"nope"}}`))
	require.Contains(t, f, "spec.provider")
	// A type change must suit the groups that name the Provider.
	f = causeFields(t, s.do(http.MethodPatch, "/api/v1/providers/emu", `{"spec":{"type":"openstack","config":{"endpoint":null,"authURL":"https://keystone.example.com:5000/v3"}}}`))
	require.Len(t, f, 1, "%v", f)
	require.Contains(t, f["spec.type"], "node group acme/workers does not suit type openstack: spec.providerConfig.")

	// A metal group: the listed machines must match the count.
	s.mustCreate("/api/v1/providers", map[string]any{"metadata": map[string]any{"name": "rack"}, "spec": map[string]any{"type": "metal"}})
	f = causeFields(t, s.do("POST", "/api/v1/tenants/acme/nodegroups", `{"metadata":{"name":"metal"},"spec":{"role":"worker","count":2,"provider":"rack","providerConfig":{"machines":[{"address":"10.0.0.1"}]}}}`))
	require.Equal(t, map[string]string{"spec.providerConfig.machines": "lists 1 machines but spec.count is 2"}, f)
	s.mustCreate("/api/v1/tenants/acme/nodegroups", `{"metadata":{"name":"metal"},"spec":{"role":"worker","count":1,"provider":"rack","providerConfig":{"machines":[{"address":"10.0.0.1"}]}}}`)
}

// scaleStack is a tenant with a control-plane group cp of three machines and
// a worker group, as the apply worker would have recorded them.
func scaleStack(t *testing.T) *stack {
	s := newStack(t).withProvider()
	s.mustCreate("/api/v1/tenants", tenantBody("acme", nil))
	s.mustCreate("/api/v1/tenants/acme/nodegroups", `{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":3,"provider":"emu"}}`)
	s.mustCreate("/api/v1/tenants/acme/nodegroups", nodeGroupBody("workers", 2))
	for i := range 3 {
		s.mustCreate("/api/v1/tenants/acme/machines", fmt.Sprintf(`{"metadata":{"name":"cp-%d"},"spec":{"nodeGroup":"cp","role":"controlplane","address":"10.0.0.%d"}}`, i, i+1))
	}
	s.mustCreate("/api/v1/tenants/acme/machines", `{"metadata":{"name":"workers-0"},"spec":{"nodeGroup":"workers","role":"worker","address":"10.0.1.1"}}`)
	return s
}

// observe writes a machine's observed readiness, as a health probe does.
func (s *stack) observe(machine string, ready bool) {
	s.t.Helper()
	cur := s.do(http.MethodGet, "/api/v1/tenants/acme/machines/"+machine, nil).object(s.t)
	r := s.do(http.MethodPut, "/api/v1/tenants/acme/machines/"+machine+"/status", fmt.Sprintf(
		`{"metadata":{"name":%q,"resourceVersion":%q},"status":{"stage":"Running","ready":%t,"lastSeen":%q}}`,
		machine, cur.Metadata.ResourceVersion, ready, time.Now().UTC().Format(time.RFC3339)))
	require.Equal(s.t, http.StatusOK, r.Code, string(r.Body))
}

// TestControlPlaneScaleDownRefusals: a change that would lose etcd quorum on
// the way, leave an even number of control planes or none while workers
// remain is a 422 on spec.count with the reason; safe ones pass.
func TestControlPlaneScaleDownRefusals(t *testing.T) {
	const cp = "/api/v1/tenants/acme/nodegroups/cp"
	t.Run("3 to 2 is refused (even)", func(t *testing.T) {
		s := scaleStack(t)
		f := causeFields(t, s.do(http.MethodPatch, cp, `{"spec":{"count":2}}`))
		require.Contains(t, f["spec.count"], "odd count")
	})
	t.Run("3 to 1 keeping an unready machine loses quorum on the way", func(t *testing.T) {
		s := scaleStack(t)
		s.observe("cp-0", false)
		s.observe("cp-1", true)
		s.observe("cp-2", true)
		f := causeFields(t, s.do(http.MethodPatch, cp, `{"spec":{"count":1}}`))
		require.Equal(t, "scaling the control planes of cp from 3 to 1 is refused: removing cp-2 would leave 1 healthy of 2 etcd members; quorum needs 2", f["spec.count"])
	})
	t.Run("3 to 1 with the unready machine going is fine", func(t *testing.T) {
		s := scaleStack(t)
		s.observe("cp-0", true)
		s.observe("cp-1", true)
		s.observe("cp-2", false)
		r := s.do(http.MethodPatch, cp, `{"spec":{"count":1}}`)
		require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	})
	t.Run("3 to 1, machines never observed: the apply worker checks the live membership", func(t *testing.T) {
		s := scaleStack(t)
		r := s.do(http.MethodPatch, cp, `{"spec":{"count":1}}`)
		require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	})
	t.Run("without quorum now nothing goes", func(t *testing.T) {
		s := scaleStack(t)
		s.observe("cp-0", true)
		s.observe("cp-1", false)
		s.observe("cp-2", false)
		f := causeFields(t, s.do(http.MethodPatch, cp, `{"spec":{"count":1}}`))
		require.Contains(t, f["spec.count"], "etcd has no quorum now (1 of 3 members healthy, 2 needed)")
	})
	t.Run("a second control-plane group must not make the total even", func(t *testing.T) {
		s := scaleStack(t)
		s.mustCreate("/api/v1/tenants/acme/nodegroups", `{"metadata":{"name":"cpb"},"spec":{"role":"controlplane","count":3,"provider":"emu"}}`)
		for i := range 3 {
			s.mustCreate("/api/v1/tenants/acme/machines", fmt.Sprintf(`{"metadata":{"name":"cpb-%d"},"spec":{"nodeGroup":"cpb","role":"controlplane"}}`, i))
		}
		f := causeFields(t, s.do(http.MethodPatch, "/api/v1/tenants/acme/nodegroups/cpb", `{"spec":{"count":1}}`))
		require.Contains(t, f["spec.count"], "it would leave 4 control planes: etcd needs an odd number")
	})
	t.Run("a role change takes the group's control planes away", func(t *testing.T) {
		s := scaleStack(t)
		f := causeFields(t, s.do(http.MethodPatch, cp, `{"spec":{"role":"worker"}}`))
		require.Contains(t, f["spec.count"], "it would remove all 3 control planes while the tenant has other node groups")
	})
	t.Run("deleting the control-plane group while workers remain is refused", func(t *testing.T) {
		s := scaleStack(t)
		f := causeFields(t, s.do(http.MethodDelete, cp, nil))
		require.Equal(t, "deleting cp removes its 3 control planes and is refused: it would remove all 3 control planes while the tenant has other node groups; a cluster needs at least one", f["spec.count"])
		// Without the workers it may go: nothing is left to serve.
		require.Less(t, s.do(http.MethodDelete, "/api/v1/tenants/acme/nodegroups/workers", nil).Code, 300)
		require.Less(t, s.do(http.MethodDelete, cp, nil).Code, 300)
	})
	t.Run("workers scale down freely", func(t *testing.T) {
		s := scaleStack(t)
		r := s.do(http.MethodPatch, "/api/v1/tenants/acme/nodegroups/workers", `{"spec":{"count":0}}`)
		require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	})
	t.Run("a deleted tenant takes its groups", func(t *testing.T) {
		s := scaleStack(t)
		require.Less(t, s.do(http.MethodDelete, "/api/v1/tenants/acme", nil).Code, 300)
		require.Eventually(t, func() bool {
			return s.do(http.MethodGet, "/api/v1/tenants/acme", nil).Code == http.StatusNotFound
		}, 10*time.Second, 20*time.Millisecond)
	})
}
