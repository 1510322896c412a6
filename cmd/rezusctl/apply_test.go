package main

import (
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestApplyCreatesThenUpdates(t *testing.T) {
	f, srv := newFakeAPI(t)
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)

	out := tc.ok("apply", "-f", "testdata/cluster.yaml")
	assert.Equal(t, "tenant/acme created\nnodegroup/cp created\nnodegroup/workers created\n", out)
	assert.Equal(t, []string{
		"GET /api/v1/tenants/acme", "POST /api/v1/tenants",
		"GET /api/v1/tenants/acme/nodegroups/cp", "POST /api/v1/tenants/acme/nodegroups",
		"GET /api/v1/tenants/acme/nodegroups/workers", "POST /api/v1/tenants/acme/nodegroups",
	}, f.callLog())
	var posted domain.Object
	require.NoError(t, json.Unmarshal(f.body("POST /api/v1/tenants/acme/nodegroups"), &posted))
	assert.Equal(t, "NodeGroup", posted.Kind, "short kind names become the Kind")
	assert.Equal(t, domain.APIVersion, posted.APIVersion)
	assert.Equal(t, "acme", posted.Metadata.Tenant, "the context's tenant fills in")

	f.resetCalls()
	out = tc.ok("apply", "-f", "testdata/cluster.yaml")
	assert.Equal(t, "tenant/acme unchanged\nnodegroup/cp unchanged\nnodegroup/workers unchanged\n", out)
	var put domain.Object
	require.NoError(t, json.Unmarshal(f.body("PUT /api/v1/tenants/acme"), &put))
	assert.Equal(t, "1", put.Metadata.ResourceVersion, "PUT carries the version just read")

	// A changed document is configured; finalizers set by a controller survive.
	f.mu.Lock()
	f.objects["/api/v1/tenants/acme"].Metadata.Finalizers = []string{"rezuscloud.io/infra"}
	f.mu.Unlock()
	tc.stdin = "kind: Tenant\nmetadata: {name: acme, labels: {env: staging}}\nspec: {talosVersion: v1.13.0}\n"
	assert.Equal(t, "tenant/acme configured\n", tc.ok("apply", "-f", "-"))
	require.NoError(t, json.Unmarshal(f.body("PUT /api/v1/tenants/acme"), &put))
	assert.Equal(t, []string{"rezuscloud.io/infra"}, put.Metadata.Finalizers)
	assert.Equal(t, map[string]string{"env": "staging"}, put.Metadata.Labels)
}

func TestApplyRetriesOneConflict(t *testing.T) {
	f, srv := newFakeAPI(t)
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)
	f.put("/api/v1/tenants/acme", obj("Tenant", "", "acme", tcNow, `{"talosVersion":"v1.12.0"}`, "", nil))

	f.conflictNext("/api/v1/tenants/acme", 1)
	tc.stdin = "kind: Tenant\nmetadata: {name: acme}\nspec: {talosVersion: v1.13.0}\n"
	assert.Equal(t, "tenant/acme configured\n", tc.ok("apply", "-f", "-"))
	assert.Equal(t, []string{"GET /api/v1/tenants/acme", "PUT /api/v1/tenants/acme", "GET /api/v1/tenants/acme", "PUT /api/v1/tenants/acme"},
		f.callLog(), "a 409 is retried from a fresh read")

	f.resetCalls()
	f.conflictNext("/api/v1/tenants/acme", applyConflictRetries+1)
	tc.stdin = "kind: Tenant\nmetadata: {name: acme}\nspec: {talosVersion: v1.11.0}\n"
	r := tc.run("apply", "-f", "-")
	assert.Equal(t, 1, r.code)
	assert.Len(t, f.callLog(), 2*(applyConflictRetries+1), "and only applyConflictRetries times")
	assert.Contains(t, r.stderr, "stdin (document 1, line 1) (Tenant \"acme\"):\nError from server (Conflict): operation cannot be fulfilled")
}

// Two writers creating the same object: the loser's POST gets 409
// AlreadyExists, and the retry updates what the winner created.
func TestApplyCreateRace(t *testing.T) {
	f, srv := newFakeAPI(t)
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)
	var answered atomic.Bool // handlers may run on different connections
	f.handle("POST /api/v1/tenants", func(w http.ResponseWriter, r *http.Request) {
		if answered.CompareAndSwap(false, true) {
			f.put("/api/v1/tenants/acme", obj("Tenant", "", "acme", tcNow, `{}`, "", nil))
			writeStatus(w, domain.NewAlreadyExists("Tenant", "acme"))
		}
	})
	tc.stdin = "kind: Tenant\nmetadata: {name: acme}\nspec: {talosVersion: v1.13.0}\n"
	assert.Equal(t, "tenant/acme configured\n", tc.ok("apply", "-f", "-"))
	assert.Equal(t, []string{"GET /api/v1/tenants/acme", "POST /api/v1/tenants", "GET /api/v1/tenants/acme", "PUT /api/v1/tenants/acme"}, f.callLog())
}

func TestApplyTenantRules(t *testing.T) {
	_, srv := newFakeAPI(t)
	tests := []struct {
		name, doc string
		args      []string
		want      string
	}{
		{"no tenant anywhere", "kind: NodeGroup\nmetadata: {name: a}\n", nil, "nodegroups are tenant-scoped: set metadata.tenant or give --tenant/-t"},
		{"flag and document disagree", "kind: NodeGroup\nmetadata: {name: a, tenant: x}\n", []string{"-t", "y"}, `metadata.tenant "x" does not match --tenant "y"`},
		{"cluster-scoped with a tenant", "kind: Tenant\nmetadata: {name: a, tenant: x}\n", nil, "tenants are cluster-scoped: remove metadata.tenant"},
		{"unknown kind", "kind: Pod\nmetadata: {name: a}\n", nil, `unknown resource kind "Pod"`},
		{"other apiVersion", "apiVersion: v1\nkind: Tenant\nmetadata: {name: a}\n", nil, `apiVersion "v1" is not supported`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc := newTestCLI(t)
			tc.ok("config", "set-context", "test", "--server", srv.URL, "--token", "tok")
			tc.stdin = tt.doc
			r := tc.run(append([]string{"apply", "-f", "-"}, tt.args...)...)
			assert.Equal(t, 1, r.code)
			assert.Contains(t, r.stderr, tt.want)
		})
	}
}

func TestCreate(t *testing.T) {
	f, srv := newFakeAPI(t)
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)
	assert.Equal(t, "tenant/dir-tenant created\nprovider/emu created\n", tc.ok("create", "-f", "testdata/manifests"))
	assert.Equal(t, []string{"POST /api/v1/tenants", "POST /api/v1/providers"}, f.callLog(), "create does not read first")

	// Every document is tried; each failure is reported and the exit code says so.
	r := tc.run("create", "-f", "testdata/manifests", "-f", "testdata/list.json")
	assert.Equal(t, 1, r.code)
	assert.Equal(t, "nodegroup/a created\nnodegroup/b created\n", r.stdout)
	assert.Contains(t, r.stderr, "testdata/manifests/01-tenant.yaml (document 1, line 1) (Tenant \"dir-tenant\"):\nError from server (AlreadyExists): tenant \"dir-tenant\" already exists\n")
	assert.Contains(t, r.stderr, "Error from server (AlreadyExists): provider \"emu\" already exists\n")

	r = tc.run("create", "extra-arg")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "give files with -f")
}
