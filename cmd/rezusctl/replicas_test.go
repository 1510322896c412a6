package main

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// replicasBody is what GET /api/v1/replicas answers on three replicas, one
// of them (c-1) of a release before 0.4.0, which does not count its tenants;
// the CLI's clock is 2026-05-01T12:00:00Z.
const replicasBody = `{"apiVersion":"rezuscloud.io/v1","kind":"ReplicaList","self":"b-1","schemaLevel":2,"clusterSchemaLevel":2,"writeSchemaLevel":2,"items":[
{"holder":"a-1","id":"run-a","version":"0.4.0","startedAt":"2026-05-01T11:00:00Z","seen":"2026-05-01T11:59:57Z","tenants":5,"natsServer":"n1","schemaLevel":2},
{"holder":"b-1","id":"run-b","version":"0.4.0","startedAt":"2026-05-01T11:58:30Z","seen":"2026-05-01T11:59:58Z","tenants":0,"natsServer":"n2","schemaLevel":2},
{"holder":"c-1","version":"0.3.0","startedAt":"2026-04-29T12:00:00Z","seen":"2026-05-01T11:59:59Z","natsServer":"n3","schemaLevel":2}]}`

func TestGetReplicas(t *testing.T) {
	f, srv := newFakeAPI(t)
	answer := replicasBody
	f.handle("GET /api/v1/replicas", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			writeStatus(w, domain.NewForbidden("", "", "only admins may list the replicas"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(answer))
	})
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)

	assert.Equal(t, ""+
		"HOLDER   VERSION   STARTED   HEARTBEAT   TENANTS     SCHEMA\n"+
		"a-1      0.4.0     60m       3s          5           2\n"+
		"b-1      0.4.0     90s       2s          0           2\n"+
		"c-1      0.3.0     2d        1s          <unknown>   2\n", tc.ok("get", "replicas"))
	assert.Equal(t, ""+
		"HOLDER   VERSION   STARTED   HEARTBEAT   TENANTS     SCHEMA   ID       NATS   SELF\n"+
		"a-1      0.4.0     60m       3s          5           2        run-a    n1     \n"+
		"b-1      0.4.0     90s       2s          0           2        run-b    n2     *\n"+
		"c-1      0.3.0     2d        1s          <unknown>   2        <none>   n3     \n", tc.ok("get", "replica", "-o", "wide"),
		"the replica that answered is marked")
	assert.Equal(t, "replica/a-1\nreplica/b-1\nreplica/c-1\n", tc.ok("get", "replicas", "-o", "name"))
	assert.Contains(t, tc.ok("get", "replicas", "-o", "json"), "{\n    \"apiVersion\": \"rezuscloud.io/v1\",\n    \"kind\": \"ReplicaList\",\n    \"self\": \"b-1\",")
	yaml := tc.ok("get", "replicas", "-o", "yaml")
	assert.Contains(t, yaml, "kind: ReplicaList\nself: b-1\n")
	assert.Contains(t, yaml, "  - holder: c-1\n    version: 0.3.0\n", "the server's key order")
	assert.Equal(t, []string{"GET /api/v1/replicas"}, f.callLog()[:1])

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "replicas", "a-1"}, "without a NAME"},
		{[]string{"get", "replicas", "-w"}, "cannot be watched"},
		{[]string{"get", "replicas", "-l", "a=b"}, "cannot be watched or selected"},
		{[]string{"get", "replicas", "-o", "xml"}, `unknown output format "xml"`},
	} {
		r := tc.run(tt.args...)
		assert.Equal(t, 1, r.code, "%v: %s", tt.args, r.stdout)
		assert.Contains(t, r.stderr, tt.want, tt.args)
	}

	answer = `{"apiVersion":"rezuscloud.io/v1","kind":"ReplicaList","schemaLevel":2,"clusterSchemaLevel":2,"writeSchemaLevel":2,"items":[]}`
	r := tc.run("get", "replicas")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "", r.stdout)
	assert.Equal(t, "no replicas: the server runs without heartbeats\n", r.stderr)

	tc.ok("config", "set-context", "viewer", "--server", srv.URL, "--token", "view-token", "--current")
	r = tc.run("get", "replicas")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "only admins may list the replicas")
}
