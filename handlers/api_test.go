package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/internal/buildinfo"
)

func TestCRUDLifecycle(t *testing.T) {
	s := newStack(t).withProvider()
	ten := s.mustCreate("/api/v1/tenants", tenantBody("acme", map[string]string{"env": "prod"}))
	require.Equal(t, "acme", ten.Metadata.Name)
	require.Equal(t, int64(1), ten.Metadata.Generation)
	require.NotEmpty(t, ten.Metadata.UID)
	require.JSONEq(t, `{"talosVersion":"v1.13.0","kubernetesVersion":"v1.35.4","controlPlane":{},
		"network":{"podSubnets":["10.244.0.0/16"],"serviceSubnets":["10.96.0.0/12"],"dnsDomain":"cluster.local"},
		"etcdBackup":{"interval":"24h","keep":7}}`, string(ten.Spec), "a new tenant gets the default backup schedule")

	// Read-after-write: the GET right after the POST sees it, at the same version.
	got := s.do(http.MethodGet, "/api/v1/tenants/acme", nil)
	require.Equal(t, http.StatusOK, got.Code)
	require.Equal(t, ten.Metadata.ResourceVersion, got.object(t).Metadata.ResourceVersion)

	ng := s.mustCreate("/api/v1/tenants/acme/nodegroups", nodeGroupBody("workers", 3))
	require.Equal(t, "acme", ng.Metadata.Tenant)

	// PUT with the current version: a spec change bumps generation.
	ng.Spec = []byte(`{"role":"worker","count":5,"provider":"emu"}`)
	put := s.do(http.MethodPut, "/api/v1/tenants/acme/nodegroups/workers", ng)
	require.Equal(t, http.StatusOK, put.Code, string(put.Body))
	ng2 := put.object(t)
	require.Equal(t, int64(2), ng2.Metadata.Generation)
	require.NotEqual(t, ng.Metadata.ResourceVersion, ng2.Metadata.ResourceVersion)

	// PUT with the old version: 409.
	stale := s.do(http.MethodPut, "/api/v1/tenants/acme/nodegroups/workers", ng)
	require.Equal(t, http.StatusConflict, stale.Code)
	require.Equal(t, domain.ReasonConflict, stale.status(t).Reason)

	// Label-only PATCH keeps generation.
	p := s.do(http.MethodPatch, "/api/v1/tenants/acme/nodegroups/workers", `{"metadata":{"labels":{"tier":"gold"}}}`)
	require.Equal(t, http.StatusOK, p.Code, string(p.Body))
	require.Equal(t, int64(2), p.object(t).Metadata.Generation)
	require.Equal(t, "gold", p.object(t).Metadata.Labels["tier"])

	// PATCH with a stale resourceVersion precondition: 409.
	pc := s.do(http.MethodPatch, "/api/v1/tenants/acme/nodegroups/workers",
		fmt.Sprintf(`{"metadata":{"resourceVersion":%q},"spec":{"count":7}}`, ng.Metadata.ResourceVersion))
	require.Equal(t, http.StatusConflict, pc.Code)

	// Status subresource: written separately, spec untouched, generation unchanged.
	cur := s.do(http.MethodGet, "/api/v1/tenants/acme/nodegroups/workers", nil).object(t)
	cur.Status = []byte(`{"replicas":5,"readyReplicas":2,"observedGeneration":2}`)
	st := s.do(http.MethodPut, "/api/v1/tenants/acme/nodegroups/workers/status", cur)
	require.Equal(t, http.StatusOK, st.Code, string(st.Body))
	require.JSONEq(t, `{"replicas":5,"readyReplicas":2,"observedGeneration":2}`, string(st.object(t).Status))
	require.Equal(t, int64(2), st.object(t).Metadata.Generation)
	// A status sent through the main resource is ignored.
	cur = st.object(t)
	cur.Status = []byte(`{"replicas":9,"readyReplicas":9}`)
	cur.Metadata.Labels = map[string]string{"tier": "silver"}
	main := s.do(http.MethodPut, "/api/v1/tenants/acme/nodegroups/workers", cur)
	require.Equal(t, http.StatusOK, main.Code)
	require.JSONEq(t, `{"replicas":5,"readyReplicas":2,"observedGeneration":2}`, string(main.object(t).Status))

	// List in the tenant and across tenants.
	lst := s.do(http.MethodGet, "/api/v1/tenants/acme/nodegroups", nil)
	require.Equal(t, http.StatusOK, lst.Code)
	require.Contains(t, string(lst.Body), `"kind":"NodeGroupList"`)
	all := s.do(http.MethodGet, "/api/v1/nodegroups", nil)
	require.Contains(t, string(all.Body), `"name":"workers"`)

	// DELETE without finalizers: 200 and gone.
	del := s.do(http.MethodDelete, "/api/v1/tenants/acme/nodegroups/workers", nil)
	require.Equal(t, http.StatusOK, del.Code, string(del.Body))
	require.NotNil(t, del.object(t).Metadata.DeletionTimestamp)
	require.Equal(t, http.StatusNotFound, s.do(http.MethodGet, "/api/v1/tenants/acme/nodegroups/workers", nil).Code)

	// The same name can be created again, with a new uid.
	again := s.mustCreate("/api/v1/tenants/acme/nodegroups", nodeGroupBody("workers", 1))
	require.NotEqual(t, ng.Metadata.UID, again.Metadata.UID)
}

func TestNamesAreUniquePerTenantNotGlobally(t *testing.T) {
	s := newStack(t).withProvider()
	s.mustCreate("/api/v1/tenants", tenantBody("a", nil))
	s.mustCreate("/api/v1/tenants", tenantBody("b", nil))
	s.mustCreate("/api/v1/tenants/a/nodegroups", nodeGroupBody("workers", 1))
	s.mustCreate("/api/v1/tenants/b/nodegroups", nodeGroupBody("workers", 1))
	dup := s.do(http.MethodPost, "/api/v1/tenants/a/nodegroups", nodeGroupBody("workers", 1))
	require.Equal(t, http.StatusConflict, dup.Code)
	require.Equal(t, domain.ReasonAlreadyExists, dup.status(t).Reason)
}

func TestConcurrentPutsWithSameVersion(t *testing.T) {
	s := newStack(t)
	ten := s.mustCreate("/api/v1/tenants", tenantBody("race", nil))
	before := s.lastSeq()

	const n = 50
	codes := make([]int, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := *ten
			body.Metadata.Labels = map[string]string{"writer": fmt.Sprint(i)}
			<-start
			codes[i] = s.do(http.MethodPut, "/api/v1/tenants/race", &body).Code
		}()
	}
	close(start)
	wg.Wait()

	count := map[int]int{}
	for _, c := range codes {
		count[c]++
	}
	require.Equal(t, map[int]int{http.StatusOK: 1, http.StatusConflict: n - 1}, count)
	require.Equal(t, before+1, s.lastSeq(), "exactly one new event in the stream")
}

func TestIdempotencyKey(t *testing.T) {
	s := newStack(t)
	before := s.lastSeq()
	body := tenantBody("idem", nil)
	first := s.do(http.MethodPost, "/api/v1/tenants", body, "Idempotency-Key", "k-1")
	require.Equal(t, http.StatusCreated, first.Code, string(first.Body))
	retry := s.do(http.MethodPost, "/api/v1/tenants", body, "Idempotency-Key", "k-1")
	require.Equal(t, http.StatusCreated, retry.Code, string(retry.Body))
	require.Equal(t, "true", retry.Header.Get("Idempotent-Replayed"))
	require.Equal(t, first.object(t).Metadata.UID, retry.object(t).Metadata.UID)
	require.Equal(t, first.object(t).Metadata.ResourceVersion, retry.object(t).Metadata.ResourceVersion)
	require.Equal(t, before+1, s.lastSeq(), "one object, one event")

	// Without the key the same POST is a conflict, and a different key is a new request.
	require.Equal(t, http.StatusConflict, s.do(http.MethodPost, "/api/v1/tenants", body).Code)
	require.Equal(t, http.StatusConflict, s.do(http.MethodPost, "/api/v1/tenants", body, "Idempotency-Key", "k-2").Code)

	// Concurrent retries of one keyed request still make one event.
	before = s.lastSeq()
	var wg sync.WaitGroup
	codes := make([]int, 10)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = s.do(http.MethodPost, "/api/v1/tenants", tenantBody("burst", nil), "Idempotency-Key", "k-3").Code
		}()
	}
	wg.Wait()
	for _, c := range codes {
		require.Equal(t, http.StatusCreated, c)
	}
	require.Equal(t, before+1, s.lastSeq())
}

func TestTenantDeletionCascades(t *testing.T) {
	s := newStack(t).withProvider()
	s.mustCreate("/api/v1/tenants", tenantBody("gone", nil))
	s.mustCreate("/api/v1/tenants/gone/nodegroups", nodeGroupBody("a", 1))
	s.mustCreate("/api/v1/tenants/gone/configpatches", map[string]any{"metadata": map[string]any{"name": "p"},
		"spec": map[string]any{"patch": "machine:\n  install:\n    disk: /dev/vda\n"}})
	s.mustCreate("/api/v1/tenants", tenantBody("kept", nil))
	s.mustCreate("/api/v1/tenants/kept/nodegroups", nodeGroupBody("a", 1))

	del := s.do(http.MethodDelete, "/api/v1/tenants/gone", nil)
	require.Equal(t, http.StatusOK, del.Code, string(del.Body))
	require.Equal(t, http.StatusNotFound, s.do(http.MethodGet, "/api/v1/tenants/gone", nil).Code)
	require.Equal(t, http.StatusNotFound, s.do(http.MethodGet, "/api/v1/tenants/gone/nodegroups/a", nil).Code)
	require.Equal(t, http.StatusNotFound, s.do(http.MethodGet, "/api/v1/tenants/gone/configpatches/p", nil).Code)
	require.Equal(t, http.StatusOK, s.do(http.MethodGet, "/api/v1/tenants/kept/nodegroups/a", nil).Code)
	// Objects cannot be created in a tenant that does not exist.
	require.Equal(t, http.StatusNotFound, s.do(http.MethodPost, "/api/v1/tenants/gone/nodegroups", nodeGroupBody("b", 1)).Code)
}

func TestFinalizersHoldDeletion(t *testing.T) {
	s := newStack(t).withProvider()
	s.mustCreate("/api/v1/tenants", tenantBody("fin", nil))
	ng := nodeGroupBody("held", 1)
	ng["metadata"].(map[string]any)["finalizers"] = []string{"rezuscloud.io/cleanup"}
	s.mustCreate("/api/v1/tenants/fin/nodegroups", ng)

	// Deleting the tenant: the node group is held by its finalizer, so both stay, terminating.
	del := s.do(http.MethodDelete, "/api/v1/tenants/fin", nil)
	require.Equal(t, http.StatusAccepted, del.Code, string(del.Body))
	require.NotNil(t, del.object(t).Metadata.DeletionTimestamp)
	held := s.do(http.MethodGet, "/api/v1/tenants/fin/nodegroups/held", nil)
	require.Equal(t, http.StatusOK, held.Code)
	require.NotNil(t, held.object(t).Metadata.DeletionTimestamp)
	// No new objects in a terminating tenant.
	forbidden := s.do(http.MethodPost, "/api/v1/tenants/fin/nodegroups", nodeGroupBody("late", 1))
	require.Equal(t, http.StatusForbidden, forbidden.Code)
	// Adding a finalizer to a terminating object is refused.
	add := s.do(http.MethodPatch, "/api/v1/tenants/fin/nodegroups/held", `{"metadata":{"finalizers":["rezuscloud.io/cleanup","x.io/more"]}}`)
	require.Equal(t, http.StatusUnprocessableEntity, add.Code)

	// Removing the last finalizer deletes the node group, and then the tenant goes too.
	rm := s.do(http.MethodPatch, "/api/v1/tenants/fin/nodegroups/held", `{"metadata":{"finalizers":null}}`)
	require.Equal(t, http.StatusOK, rm.Code, string(rm.Body))
	require.Equal(t, http.StatusNotFound, s.do(http.MethodGet, "/api/v1/tenants/fin/nodegroups/held", nil).Code)
	require.Eventually(t, func() bool {
		return s.do(http.MethodGet, "/api/v1/tenants/fin", nil).Code == http.StatusNotFound
	}, 10*time.Second, 5*time.Millisecond)
}

func TestAuthHealthVersionMetrics(t *testing.T) {
	s := newStack(t)
	noAuth := s.do(http.MethodGet, "/api/v1/tenants", nil, "Authorization", "")
	require.Equal(t, http.StatusUnauthorized, noAuth.Code)
	require.Equal(t, domain.ReasonUnauthorized, noAuth.status(t).Reason)
	wrong := s.do(http.MethodGet, "/api/v1/tenants", nil, "Authorization", "Bearer nope")
	require.Equal(t, http.StatusUnauthorized, wrong.Code)

	require.Equal(t, http.StatusOK, s.do(http.MethodGet, "/healthz", nil, "Authorization", "").Code)
	require.Eventually(t, func() bool { return s.do(http.MethodGet, "/readyz", nil, "Authorization", "").Code == http.StatusOK }, 10*time.Second, 5*time.Millisecond)
	v := s.do(http.MethodGet, "/version", nil, "Authorization", "")
	require.Contains(t, string(v.Body), `"apiVersion":"rezuscloud.io/v1"`)
	// With no Config.Version, the release this tree is (internal/buildinfo/VERSION).
	require.Contains(t, string(v.Body), `"version":"`+buildinfo.Version()+`"`)
	require.NotContains(t, string(v.Body), `"version":"dev"`)

	s.mustCreate("/api/v1/tenants", tenantBody("m", nil))
	require.Equal(t, http.StatusUnauthorized, s.do(http.MethodGet, "/metrics", nil, "Authorization", "").Code)
	m := s.do(http.MethodGet, "/metrics", nil)
	require.Equal(t, http.StatusOK, m.Code)
	for _, series := range []string{
		`rezus_http_requests_total{code="201",method="POST",route="/api/v1/tenants"} 1`,
		"rezus_http_request_duration_seconds_bucket",
		"rezus_events_appended_total 1",
		"rezus_projection_lag_events",
		"rezus_watches_active 0",
	} {
		require.Contains(t, string(m.Body), series)
	}
	nf := s.do(http.MethodGet, "/api/v1/nothing-here", nil)
	require.Equal(t, http.StatusNotFound, nf.Code)
	require.Equal(t, "Status", nf.status(t).Kind)
	require.True(t, strings.HasPrefix(nf.Header.Get("Content-Type"), "application/json"))
}

// TestEventsCarryActorAndCorrelation checks the stored event names who did what
// and carries the request id, and that the post-image is in the event.
func TestEventsCarryActorAndCorrelation(t *testing.T) {
	s := newStack(t)
	r := s.do(http.MethodPost, "/api/v1/tenants", tenantBody("who", nil), "X-Request-Id", "req-42")
	require.Equal(t, http.StatusCreated, r.Code)
	id := r.Header.Get("X-Request-Id")
	require.NotEqual(t, "req-42", id, "the server makes its own request id")
	require.Equal(t, "req-42", r.Header.Get("X-Client-Request-Id"))
	rec, err := s.env.Store.Load(context.Background(), domain.Ref{Kind: "Tenant", Name: "who"})
	require.NoError(t, err)
	require.Equal(t, "TenantCreated", rec.Event.Type)
	require.Equal(t, "admin", rec.Event.Actor) // the static token acts as admin
	require.Equal(t, id, rec.Event.CorrelationID)
	require.Equal(t, "who", rec.Event.Object.Metadata.Name)
	require.Equal(t, r.object(t).Metadata.UID, rec.Event.Object.Metadata.UID)

	// Without a request id one is made up and returned.
	r = s.do(http.MethodPost, "/api/v1/tenants", tenantBody("who2", nil))
	require.NotEmpty(t, r.Header.Get("X-Request-Id"))
}
