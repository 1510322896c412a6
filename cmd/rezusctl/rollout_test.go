package main

import (
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// TestRolloutVerbRetriesAConflict: the rollout controller writes a running
// rollout's status between the CLI's read and its patch; pause reads the
// rollout again and patches at its new resourceVersion instead of failing
// with the conflict, and gives up after rolloutVerbAttempts.
func TestRolloutVerbRetriesAConflict(t *testing.T) {
	f, srv := newFakeAPI(t)
	const path = "/api/v1/rollouts/r1"
	f.put(path, obj(domain.RolloutKind.Kind, "", "r1", time.Now(), `{"change":{"talosVersion":"v1.13.1"}}`, `{"phase":"Running"}`, nil))
	var (
		mu        sync.Mutex
		conflicts int
		patched   []string // the resourceVersions the patches were made at
	)
	f.handle("PATCH "+path, func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
			Spec map[string]any `json:"spec"`
		}
		b, _ := io.ReadAll(r.Body)
		require.NoError(t, json.Unmarshal(b, &body))
		assert.Equal(t, true, body.Spec["paused"])
		mu.Lock()
		patched = append(patched, body.Metadata.ResourceVersion)
		left := conflicts
		if left > 0 {
			conflicts--
		}
		mu.Unlock()
		f.mu.Lock()
		cur := f.objects[path]
		f.mu.Unlock()
		if left > 0 || body.Metadata.ResourceVersion != cur.Metadata.ResourceVersion {
			// The controller wrote the status meanwhile.
			f.put(path, cur)
			writeStatus(w, domain.NewConflict(domain.RolloutKind.Kind, "r1", "the object has been modified"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(cur)
	})
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)

	conflicts = 2
	assert.Equal(t, "rollout/r1: pause requested\n", tc.ok("rollout", "pause", "r1"))
	require.Len(t, patched, 3, "read and patched again after each conflict")
	assert.NotEqual(t, patched[0], patched[2], "the last patch is at the version read after the conflicts")

	patched, conflicts = nil, rolloutVerbAttempts
	r := tc.run("rollout", "pause", "r1")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "Conflict")
	assert.Len(t, patched, rolloutVerbAttempts, "bounded")
}

// TestRolloutCreateRotation: --rotate (repeatable) is the rollout's
// change.rotate, one change among the others.
func TestRolloutCreateRotation(t *testing.T) {
	f, srv := newFakeAPI(t)
	tc := newTestCLI(t)
	tc.loginTo(srv.URL)
	assert.Equal(t, "rollout/new-cas created: rotation of kubernetes-ca, talos-ca\n",
		tc.ok("rollout", "create", "new-cas", "--rotate", "kubernetes-ca", "--rotate", "talos-ca", "--soak", "0s"))
	var sent domain.Object
	require.NoError(t, json.Unmarshal(f.body("POST /api/v1/rollouts"), &sent))
	var spec domain.RolloutSpec
	require.NoError(t, json.Unmarshal(sent.Spec, &spec))
	assert.Equal(t, domain.RolloutChange{Rotate: []string{"kubernetes-ca", "talos-ca"}}, spec.Change)

	r := tc.run("rollout", "create", "both", "--rotate", "talos-ca", "--talos-version", "v1.13.1")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "give one change")
}
