package handlers_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/handlers"
	"github.com/rezuscloud/rezuscloud/talos"
)

// TestMetalMachineTakeover: issue 42, finding 5. An editor of tenant acme
// listed, in a metal node group, the address of a maintenance-mode machine
// registered for tenant beta, and acme's apply configured it with acme's PKI.
// An address another tenant holds is refused at write on the field at fault
// (whoever writes it, without naming the other tenant), both ways; within a
// tenant an address belongs to one node group; and an address in the
// metadata service's or the server's loopback is refused too.
func TestMetalMachineTakeover(t *testing.T) {
	s := newStack(t)
	s.mustCreate("/api/v1/providers", map[string]any{"metadata": map[string]any{"name": "rack"}, "spec": map[string]any{"type": "metal"}})
	s.mustCreate("/api/v1/tenants", tenantBody("acme", nil))
	s.mustCreate("/api/v1/tenants", tenantBody("beta", nil))
	alice := bearer(s.createBoundUser("alice", domain.RoleNone, `[{"role":"edit","tenants":["acme"]}]`))
	bob := bearer(s.createBoundUser("bob", domain.RoleNone, `[{"role":"edit","tenants":["beta"]}]`))
	patch := append(append([]string(nil), alice...), "Content-Type", "application/merge-patch+json")

	// Beta registers its machine, waiting in maintenance mode.
	r := s.do(http.MethodPost, "/api/v1/tenants/beta/machines", metalMachineBody("spare", "workers", "10.0.0.5"), bob...)
	require.Equal(t, http.StatusCreated, r.Code, string(r.Body))

	// Alice lists it third in a metal group of acme: refused, on its field.
	group := metalGroupBody("workers", "10.0.0.4", "10.0.0.6", "10.0.0.5")
	r = s.do(http.MethodPost, "/api/v1/tenants/acme/nodegroups", group, alice...)
	requireFieldCause(t, r, "spec.providerConfig.machines[2].address", "registered in another tenant")
	require.NotContains(t, string(r.Body), "beta")
	require.NotContains(t, string(r.Body), "spare")
	// Not even an admin gives it to acme; nor another spelling of it.
	requireFieldCause(t, s.do(http.MethodPost, "/api/v1/tenants/acme/nodegroups", group), "spec.providerConfig.machines[2].address", "another tenant")
	requireFieldCause(t, s.do(http.MethodPost, "/api/v1/tenants/acme/nodegroups", metalGroupBody("workers", "::ffff:10.0.0.5"), alice...),
		"spec.providerConfig.machines[0].address", "another tenant")
	// Nor as a machine of acme that a selector would pick.
	requireFieldCause(t, s.do(http.MethodPost, "/api/v1/tenants/acme/machines", metalMachineBody("stolen", "workers", "10.0.0.5"), alice...), "spec.address", "another tenant")

	// A group without it is fine; adding it by a patch is refused too.
	r = s.do(http.MethodPost, "/api/v1/tenants/acme/nodegroups", metalGroupBody("workers", "10.0.0.4"), alice...)
	require.Equal(t, http.StatusCreated, r.Code, string(r.Body))
	requireFieldCause(t, s.do(http.MethodPatch, "/api/v1/tenants/acme/nodegroups/workers",
		`{"spec":{"count":2,"providerConfig":{"machines":[{"address":"10.0.0.4"},{"address":"10.0.0.5"}]}}}`, patch...),
		"spec.providerConfig.machines[1].address", "another tenant")

	// The other way: beta's machines stay beta's, and acme's stay acme's.
	requireFieldCause(t, s.do(http.MethodPost, "/api/v1/tenants/beta/machines", metalMachineBody("grab", "workers", "10.0.0.4"), bob...), "spec.address", "another tenant")
	requireFieldCause(t, s.do(http.MethodPost, "/api/v1/tenants/beta/nodegroups", metalGroupBody("cp", "10.0.0.4"), bob...),
		"spec.providerConfig.machines[0].address", "another tenant")
	// Within a tenant an address belongs to one node group.
	requireFieldCause(t, s.do(http.MethodPost, "/api/v1/tenants/acme/nodegroups", metalGroupBody("cp", "10.0.0.4"), alice...),
		"spec.providerConfig.machines[0].address", "listed by node group workers")
	// A group's unchanged machines are not in its way (its other edits pass).
	r = s.do(http.MethodPatch, "/api/v1/tenants/acme/nodegroups/workers", `{"metadata":{"labels":{"rack":"r1"}}}`, patch...)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	// Once beta's machine goes, acme may have it.
	require.Equal(t, http.StatusOK, s.do(http.MethodDelete, "/api/v1/tenants/beta/machines/spare", nil, bob...).Code)
	r = s.do(http.MethodPatch, "/api/v1/tenants/acme/nodegroups/workers",
		`{"spec":{"count":2,"providerConfig":{"machines":[{"address":"10.0.0.4"},{"address":"10.0.0.5"}]}}}`, patch...)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))

	// No arbitrary hosts: the metadata service, the server's loopback.
	for _, addr := range []string{"169.254.169.254", "::ffff:169.254.169.254", "127.0.0.1", "::1", "fe80::1"} {
		requireFieldCause(t, s.do(http.MethodPost, "/api/v1/tenants/acme/nodegroups", metalGroupBody("probe", addr), alice...),
			"spec.providerConfig.machines[0].address", "metal machines may not be there")
		requireFieldCause(t, s.do(http.MethodPost, "/api/v1/tenants/acme/machines", metalMachineBody("probe", "workers", addr), alice...),
			"spec.address", "metal machines may not be there")
	}
}

// TestMetalNetworksConfigured: with networks configured only addresses in
// them are taken, loopback too when listed (an emulator's setup).
func TestMetalNetworksConfigured(t *testing.T) {
	nets, err := talos.ParseNetworks("10.20.0.0/16,127.0.0.0/8")
	require.NoError(t, err)
	s := newStack(t, func(c *handlers.Config) { c.MetalAddresses = talos.AddressPolicy{Networks: nets} })
	s.mustCreate("/api/v1/providers", map[string]any{"metadata": map[string]any{"name": "rack"}, "spec": map[string]any{"type": "metal"}})
	s.mustCreate("/api/v1/tenants", tenantBody("acme", nil))
	requireFieldCause(t, s.do(http.MethodPost, "/api/v1/tenants/acme/nodegroups", metalGroupBody("workers", "10.0.0.4")),
		"spec.providerConfig.machines[0].address", "outside the networks metal machines may be on (10.20.0.0/16, 127.0.0.0/8)")
	s.mustCreate("/api/v1/tenants/acme/nodegroups", metalGroupBody("workers", "10.20.0.4", "127.0.3.1"))
}

func metalMachineBody(name, group, address string) map[string]any {
	return map[string]any{"metadata": map[string]any{"name": name},
		"spec": map[string]any{"nodeGroup": group, "role": "worker", "address": address}}
}

func metalGroupBody(name string, addresses ...string) map[string]any {
	var ms []map[string]any
	for _, a := range addresses {
		ms = append(ms, map[string]any{"address": a})
	}
	return map[string]any{"metadata": map[string]any{"name": name},
		"spec": map[string]any{"role": "worker", "count": len(addresses), "provider": "rack", "providerConfig": map[string]any{"machines": ms}}}
}

// requireCause checks a 422 whose causes include field with a message
// containing msg.
func requireFieldCause(t *testing.T, r response, field, msg string) {
	t.Helper()
	require.Equal(t, http.StatusUnprocessableEntity, r.Code, string(r.Body))
	for _, c := range r.status(t).Details.Causes {
		if c.Field == field {
			require.Contains(t, c.Message, msg)
			return
		}
	}
	require.Failf(t, "no cause on "+field, "%s", r.Body)
}

// A metal group does not autoscale: its machines are the ones it lists.
func TestMetalGroupsDoNotAutoscale(t *testing.T) {
	s := newStack(t)
	s.mustCreate("/api/v1/providers", map[string]any{"metadata": map[string]any{"name": "rack"}, "spec": map[string]any{"type": "metal"}})
	s.mustCreate("/api/v1/tenants", tenantBody("acme", nil))
	body := metalGroupBody("workers", "10.0.0.4")
	body["spec"].(map[string]any)["autoscaling"] = map[string]any{"minCount": 1, "maxCount": 2}
	requireFieldCause(t, s.do(http.MethodPost, "/api/v1/tenants/acme/nodegroups", body), "spec.autoscaling", "metal groups do not autoscale")
}
