package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGetScopes(t *testing.T) {
	f, srv := newFakeAPI(t)
	f.put("/api/v1/tenants/acme/nodegroups/workers", obj("NodeGroup", "acme", "workers", tcNow, `{"role":"worker","count":2,"provider":"emu"}`, "", nil))
	f.put("/api/v1/nodegroups/workers", obj("NodeGroup", "acme", "workers", tcNow, `{"role":"worker","count":2,"provider":"emu"}`, "", nil))
	tc := newTestCLI(t)
	tc.ok("config", "set-context", "test", "--server", srv.URL, "--token", "tok") // no default tenant

	r := tc.run("get", "ng")
	assert.Equal(t, 1, r.code)
	assert.Equal(t, "error: nodegroups are tenant-scoped: give --tenant/-t (or set a tenant on the context), or -A for all tenants\n", r.stderr)

	assert.Equal(t, "NAME      ROLE     COUNT   MIN   MAX   TARGET   PROVIDER   AGE\nworkers   worker   2       -     -     2        emu        60m\n", tc.ok("get", "ng", "-t", "acme"))
	assert.Equal(t, "TENANT   NAME      ROLE     COUNT   MIN   MAX   TARGET   PROVIDER   AGE\nacme     workers   worker   2       -     -     2        emu        60m\n", tc.ok("get", "nodegroups", "-A"))
	assert.Equal(t, "nodegroup/workers\n", tc.ok("get", "nodegroup", "workers", "-t", "acme", "-o", "name"))
	assert.Equal(t, []string{
		"GET /api/v1/tenants/acme/nodegroups", "GET /api/v1/nodegroups", "GET /api/v1/tenants/acme/nodegroups/workers",
	}, f.callLog()[:3], "-A lists through /api/v1/<plural>")

	r = tc.run("get", "ng", "-t", "acme", "-o", "xml")
	assert.Contains(t, r.stderr, `unknown output format "xml"`)

	r = tc.run("get", "machines", "-t", "acme")
	assert.Equal(t, 0, r.code)
	assert.Equal(t, "no machines in tenant \"acme\"\n", r.stderr, "an empty table says so on stderr")
	assert.Equal(t, "{\n    \"apiVersion\": \"rezuscloud.io/v1\",\n    \"kind\": \"MachineList\",\n    \"metadata\": {\n        \"resourceVersion\": \"2\"\n    },\n    \"items\": []\n}\n",
		tc.ok("get", "machines", "-t", "acme", "-o", "json"))
}

// Big lists are read page by page with limit and continue.
func TestGetPaginates(t *testing.T) {
	var (
		mu      sync.Mutex
		queries []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		mu.Lock()
		queries = append(queries, r.URL.RawQuery)
		mu.Unlock()
		start := 0
		if c := q.Get("continue"); c != "" {
			fmt.Sscanf(c, "after-%d", &start)
		}
		var items []string
		for i := start; i < start+2 && i < 5; i++ {
			items = append(items, fmt.Sprintf(`{"kind":"Tenant","metadata":{"name":"t%d"}}`, i))
		}
		cont := ""
		if start+2 < 5 {
			cont = fmt.Sprintf(`,"continue":"after-%d"`, start+2)
		}
		fmt.Fprintf(w, `{"metadata":{"resourceVersion":"%d"%s},"items":[%s]}`, 100+start, cont, strings.Join(items, ","))
	}))
	defer srv.Close()
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)
	assert.Equal(t, "tenant/t0\ntenant/t1\ntenant/t2\ntenant/t3\ntenant/t4\n", tc.ok("get", "tn", "--chunk-size", "2", "-o", "name", "-l", "env=prod"))
	assert.Equal(t, []string{
		"labelSelector=env%3Dprod&limit=2",
		"continue=after-2&labelSelector=env%3Dprod&limit=2",
		"continue=after-4&labelSelector=env%3Dprod&limit=2",
	}, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), queries...) }())
	out := tc.ok("get", "tn", "--chunk-size", "2", "-o", "yaml")
	assert.Contains(t, out, "kind: TenantList\nmetadata:\n  resourceVersion: \"100\"\n", "the list is at the first page's version")
	assert.Equal(t, 5, strings.Count(out, "- kind: Tenant"))
}

func TestDescribe(t *testing.T) {
	f, srv := newFakeAPI(t)
	f.put("/api/v1/tenants/acme/machines/cp-0", obj("Machine", "acme", "cp-0", tcNow,
		`{"nodeGroup":"cp","role":"controlplane","address":"10.0.0.10"}`,
		`{"stage":"Running","ready":true,"conditions":[{"type":"Ready","status":"True","reason":"NodeHealthy","message":"all services up","lastTransitionTime":"2026-05-01T11:55:00Z"},{"type":"ConfigUpToDate","status":"False","lastTransitionTime":"2026-05-01T11:30:00Z"}],"talosVersion":"v1.13.0"}`,
		map[string]string{"b": "2", "a": "1"}))
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)

	// The events endpoint is missing (an older server): describe still works.
	golden(t, "describe.noevents", tc.ok("describe", "mc", "cp-0"))

	f.handle("GET /api/v1/events", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		assert.Equal(t, []string{"Machine", "acme", "cp-0"}, []string{q.Get("kind"), q.Get("tenant"), q.Get("name")})
		if r.URL.Query().Get("continue") == "" {
			fmt.Fprint(w, `{"kind":"EventList","metadata":{"continue":"7"},"items":[
				{"seq":3,"type":"MachineCreated","action":"Created","actor":"system:apply","time":"2026-05-01T11:00:00Z","object":{"kind":"Machine","metadata":{"name":"cp-0","tenant":"acme"}}}]}`)
			return
		}
		fmt.Fprint(w, `{"kind":"EventList","metadata":{},"items":[
			{"seq":9,"type":"MachineStatusUpdated","action":"Updated","actor":"system:status","time":"2026-05-01T11:55:00.123Z","object":{"kind":"Machine","metadata":{"name":"cp-0","tenant":"acme"}}}]}`)
	})
	golden(t, "describe.events", tc.ok("describe", "machine", "cp-0", "-t", "acme"))

	r := tc.run("describe", "mc", "nope")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "NotFound")
	r = tc.run("describe", "mc")
	assert.Contains(t, r.stderr, "give KIND NAME")
}

func TestDelete(t *testing.T) {
	f, srv := newFakeAPI(t)
	f.put("/api/v1/tenants/acme/nodegroups/workers", obj("NodeGroup", "acme", "workers", tcNow, `{}`, "", nil))
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)
	assert.Equal(t, "nodegroup/workers deleted\n", tc.ok("delete", "ng", "workers"))
	r := tc.run("delete", "ng", "workers")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "NotFound")

	// 202: held by finalizers. --wait watches from the answered version until DELETED.
	f.handle("DELETE /api/v1/tenants/acme", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprint(w, `{"kind":"Tenant","metadata":{"name":"acme","resourceVersion":"20","finalizers":["rezuscloud.io/infra"],"deletionTimestamp":"2026-05-01T12:00:00Z"}}`)
	})
	f.handle("GET /api/v1/tenants/acme", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"kind":"Tenant","metadata":{"name":"acme","resourceVersion":"20"}}`)
	})
	f.handle("GET /api/v1/tenants", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, sseFrame(21, "DELETED", `{"kind":"Tenant","metadata":{"name":"other"}}`))
		fmt.Fprint(w, sseFrame(22, "MODIFIED", `{"kind":"Tenant","metadata":{"name":"acme"}}`))
		fmt.Fprint(w, sseFrame(23, "DELETED", `{"kind":"Tenant","metadata":{"name":"acme"}}`))
	})
	assert.Equal(t, "tenant/acme deletion requested; waiting for finalizers rezuscloud.io/infra\n", tc.ok("delete", "tenant", "acme"))
	r = tc.run("delete", "tenant", "acme", "--wait")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "tenant/acme deleted\n", r.stdout)
	assert.Equal(t, "tenant/acme deletion requested; waiting for finalizers rezuscloud.io/infra\n", r.stderr)
	assert.Equal(t, "resourceVersion=20&watch=true", f.queriesOf("GET /api/v1/tenants")[0])

	// Never deleted: --timeout ends the wait.
	f.handle("GET /api/v1/tenants", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	r = tc.run("delete", "tenant", "acme", "--wait", "--timeout", "50ms")
	assert.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `timed out after 50ms waiting for tenant "acme" to be deleted`)
}

func TestGetUsersShowsBindings(t *testing.T) {
	f, srv := newFakeAPI(t)
	f.put("/api/v1/users/alice", obj("User", "", "alice", tcNow,
		`{"role":"none","bindings":[{"role":"admin","tenants":["acme","beta"]},{"role":"view","tenantSelector":"env=prod"}]}`, "", nil))
	tc := newTestCLI(t)
	tc.ok("config", "set-context", "test", "--server", srv.URL, "--token", "tok")
	assert.Equal(t, "NAME    ROLE   BINDINGS                           AGE\nalice   none   admin:acme,beta; view:{env=prod}   60m\n",
		tc.ok("get", "user", "alice"))
}
