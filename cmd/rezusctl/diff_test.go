package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// liveNodeGroup is a node group as the server keeps it: spec normalised and
// defaulted, server-managed fields set.
func liveNodeGroup(t *testing.T, spec string, labels map[string]string, finalizers ...string) *domain.Object {
	t.Helper()
	norm, causes := domain.NodeGroupKind.NormalizeSpec(json.RawMessage(spec))
	require.Empty(t, causes)
	o := obj("NodeGroup", "acme", "workers", time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC), string(norm), `{"phase":"Ready","readyReplicas":2}`, labels)
	o.Metadata.ResourceVersion = "42"
	o.Metadata.Generation = 3
	o.Metadata.Finalizers = finalizers
	return o
}

func oneDocument(t *testing.T, text string) document {
	t.Helper()
	docs, err := parseDocuments(strings.NewReader(text), "test.yaml")
	require.NoError(t, err)
	require.Len(t, docs, 1)
	return docs[0]
}

func TestDiffDocument(t *testing.T) {
	ng, err := resolveKind("nodegroup")
	require.NoError(t, err)
	const doc = "kind: NodeGroup\nmetadata: {name: workers, labels: {tier: gold}}\nspec: {role: worker, count: 2, provider: emu}\n"
	const spec = `{"role":"worker","count":2,"provider":"emu"}`
	tests := []struct {
		name string
		doc  string
		live *domain.Object
		// want is the whole diff; "" means no differences.
		want    string
		wantErr string
	}{
		{
			name: "server-managed fields, status and defaults are no difference",
			doc:  doc,
			live: liveNodeGroup(t, spec, map[string]string{"tier": "gold"}),
		},
		{
			name: "the server's key order is no difference",
			doc:  "kind: NodeGroup\nmetadata: {name: workers, labels: {tier: gold}}\nspec: {provider: emu, count: 2, role: worker}\n",
			live: liveNodeGroup(t, spec, map[string]string{"tier": "gold"}),
		},
		{
			name: "finalizers the document does not mention are kept",
			doc:  doc,
			live: liveNodeGroup(t, spec, map[string]string{"tier": "gold"}, "rezuscloud.io/machines"),
		},
		{
			name: "finalizers the document lists replace the live ones",
			doc:  "kind: NodeGroup\nmetadata: {name: workers, labels: {tier: gold}, finalizers: []}\nspec: {role: worker, count: 2, provider: emu}\n",
			live: liveNodeGroup(t, spec, map[string]string{"tier": "gold"}, "rezuscloud.io/machines"),
			want: "--- live/nodegroup/acme/workers\n+++ merged/nodegroup/acme/workers\n" +
				"@@ -5,8 +5,6 @@\n   tenant: acme\n   labels:\n     tier: gold\n-  finalizers:\n-    - rezuscloud.io/machines\n spec:\n   count: 2\n   provider: emu\n",
		},
		{
			name: "a changed count and label",
			doc:  "kind: NodeGroup\nmetadata: {name: workers, labels: {tier: silver}}\nspec: {role: worker, count: 3, provider: emu}\n",
			live: liveNodeGroup(t, spec, map[string]string{"tier": "gold"}),
			want: "--- live/nodegroup/acme/workers\n+++ merged/nodegroup/acme/workers\n" +
				"@@ -4,9 +4,9 @@\n   name: workers\n   tenant: acme\n   labels:\n-    tier: gold\n+    tier: silver\n spec:\n-  count: 2\n+  count: 3\n   provider: emu\n   role: worker\n   updateStrategy:\n",
		},
		{
			name: "a new object is all additions",
			doc:  doc,
			want: "--- live/nodegroup/acme/workers\n+++ merged/nodegroup/acme/workers\n" +
				"@@ -0,0 +1,13 @@\n+apiVersion: rezuscloud.io/v1\n+kind: NodeGroup\n+metadata:\n+  name: workers\n+  tenant: acme\n+  labels:\n+    tier: gold\n+spec:\n" +
				"+  count: 2\n+  provider: emu\n+  role: worker\n+  updateStrategy:\n+    maxParallelism: 1\n",
		},
		{
			name:    "a spec the server would refuse is an error naming the field",
			doc:     "kind: NodeGroup\nmetadata: {name: workers}\nspec: {role: controlplane, count: 2, provider: emu}\n",
			live:    liveNodeGroup(t, spec, nil),
			wantErr: "spec.count: a control-plane group needs an odd count",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := diffDocument(ng, "acme", oneDocument(t, tt.doc), tt.live)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}
