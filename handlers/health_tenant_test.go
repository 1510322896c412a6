package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/handlers"
	"github.com/rezuscloud/rezuscloud/talos"
)

// fakeProber answers a fixed health and records what it was asked.
type fakeProber struct {
	mu    sync.Mutex
	calls []string
}

func (f *fakeProber) Probe(_ context.Context, tenant string, refresh bool) (domain.TenantHealth, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	call := tenant
	if refresh {
		call += "?refresh"
	}
	f.calls = append(f.calls, call)
	return domain.TenantHealth{APIVersion: domain.APIVersion, Kind: domain.TenantHealthKind, Tenant: tenant,
		State: domain.HealthDegraded, Reasons: []string{"etcd on cp-1 is unhealthy"}, Duration: "3ms",
		Machines: []domain.MachineHealth{{Name: "cp-1", Role: domain.RoleControlPlane, Reachable: true, Etcd: domain.EtcdMemberUnhealthy}}}, nil
}

func (f *fakeProber) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// withHealth rebuilds the stack's API with a health prober.
func withHealth(s *stack, h handlers.TenantHealthProber) *stack {
	s.srv.Close()
	s.api.StopWatches()
	s.api = handlers.New(handlers.Config{}, handlers.Deps{Store: s.env.Store, Cache: s.cache, Projector: s.projector,
		Identity: s.identity, Health: h})
	s.srv = httptest.NewServer(s.api.Handler())
	return s
}

func TestTenantHealthRoute(t *testing.T) {
	f := &fakeProber{}
	s := withHealth(newStack(t), f)
	s.mustCreate("/api/v1/tenants", tenantBody("acme", nil))

	r := s.do(http.MethodGet, "/api/v1/tenants/acme/health", nil)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	assert.Contains(t, r.Header.Get("Content-Type"), "application/json")
	var h domain.TenantHealth
	require.NoError(t, json.Unmarshal(r.Body, &h))
	assert.Equal(t, domain.TenantHealthKind, h.Kind)
	assert.Equal(t, "acme", h.Tenant)
	assert.Equal(t, domain.HealthDegraded, h.State)
	assert.Equal(t, []string{"etcd on cp-1 is unhealthy"}, h.Reasons)

	r = s.do(http.MethodGet, "/api/v1/tenants/acme/health?refresh=true", nil)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	assert.Equal(t, []string{"acme", "acme?refresh"}, f.log())

	r = s.do(http.MethodGet, "/api/v1/tenants/acme/health?refresh=maybe", nil)
	require.Equal(t, http.StatusBadRequest, r.Code, string(r.Body))
	assert.Equal(t, "refresh", r.status(t).Details.Causes[0].Field)

	r = s.do(http.MethodGet, "/api/v1/tenants/nope/health", nil)
	require.Equal(t, http.StatusNotFound, r.Code, string(r.Body))
	assert.Equal(t, domain.ReasonNotFound, r.status(t).Reason)

	r = s.do(http.MethodGet, "/api/v1/tenants/Not_A_Name/health", nil)
	require.Equal(t, http.StatusBadRequest, r.Code, string(r.Body))
	assert.Len(t, f.log(), 2, "only known tenants are probed")

	// Every role may read health.
	s.createUser("viewer", domain.RoleView, "password for the viewer")
	r = s.do(http.MethodGet, "/api/v1/tenants/acme/health", nil, bearer(s.sessionToken("viewer", "password for the viewer"))...)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
}

func TestTenantHealthRouteWithoutProber(t *testing.T) {
	s := newStack(t)
	s.mustCreate("/api/v1/tenants", tenantBody("acme", nil))
	r := s.do(http.MethodGet, "/api/v1/tenants/acme/health", nil)
	require.Equal(t, http.StatusServiceUnavailable, r.Code, string(r.Body))
	assert.Equal(t, domain.ReasonServiceUnavailable, r.status(t).Reason)
}

// The route served by the real HealthService: a tenant without machines is
// Unreachable, and the probe's verdict is written to the tenant's status.
func TestTenantHealthRouteWithHealthService(t *testing.T) {
	s := newStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	plain, err := eventstore.OpenSecrets(ctx, s.env.Store)
	require.NoError(t, err)
	sealed, err := eventstore.OpenSealedSecrets(ctx, plain, eventstore.SealerConfig{KeyFile: filepath.Join(t.TempDir(), "secrets.key")})
	require.NoError(t, err)
	pki := talos.NewPKI(talos.PKIConfig{Cache: s.cache, Secrets: sealed})
	withHealth(s, talos.NewHealthService(talos.HealthConfig{Cache: s.cache, PKI: pki, Store: s.env.Store}))
	s.mustCreate("/api/v1/tenants", tenantBody("acme", nil))

	r := s.do(http.MethodGet, "/api/v1/tenants/acme/health", nil)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	var h domain.TenantHealth
	require.NoError(t, json.Unmarshal(r.Body, &h))
	assert.Equal(t, domain.HealthUnreachable, h.State)
	assert.Equal(t, []string{"the tenant has no machines"}, h.Reasons)
	assert.False(t, h.Cached)
	assert.NotNil(t, h.Machines, "an empty list, not null")

	r = s.do(http.MethodGet, "/api/v1/tenants/acme/health", nil)
	require.NoError(t, json.Unmarshal(r.Body, &h))
	assert.True(t, h.Cached, "the second answer within 15 s is the first probe's")

	require.Eventually(t, func() bool {
		var tn domain.Tenant
		if json.Unmarshal(s.do(http.MethodGet, "/api/v1/tenants/acme", nil).Body, &tn) != nil {
			return false
		}
		for _, c := range tn.Status.Conditions {
			if c.Type == talos.ConditionHealthy {
				return c.Status == "False" && c.Reason == domain.HealthUnreachable && c.Message == "the tenant has no machines"
			}
		}
		return false
	}, 5*time.Second, 5*time.Millisecond)
}
