package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPruneDecide(t *testing.T) {
	ng, err := resolveKind("ng")
	require.NoError(t, err)
	tn, err := resolveKind("tenant")
	require.NoError(t, err)
	listed := func(names ...string) []item {
		var out []item
		for _, n := range names {
			out = append(out, item{Obj: obj("NodeGroup", "acme", n, time.Time{}, "", "", nil)})
		}
		return out
	}
	deleting := listed("going")
	now := time.Now()
	deleting[0].Obj.Metadata.DeletionTimestamp = &now

	tests := []struct {
		name   string
		scope  pruneScope
		listed []item
		keep   map[objectKey]bool
		want   []string
	}{
		{name: "nothing listed", scope: pruneScope{kind: ng, tenant: "acme"}, want: nil},
		{
			name: "every listed object is in the files", scope: pruneScope{kind: ng, tenant: "acme"},
			listed: listed("a", "b"), keep: map[objectKey]bool{{"NodeGroup", "acme", "a"}: true, {"NodeGroup", "acme", "b"}: true},
		},
		{
			name: "the ones not in the files go, sorted", scope: pruneScope{kind: ng, tenant: "acme"},
			listed: listed("z", "a", "m"), keep: map[objectKey]bool{{"NodeGroup", "acme", "m"}: true},
			want: []string{"a", "z"},
		},
		{
			name: "a name kept in another tenant does not keep this one", scope: pruneScope{kind: ng, tenant: "acme"},
			listed: listed("a"), keep: map[objectKey]bool{{"NodeGroup", "other", "a"}: true},
			want: []string{"a"},
		},
		{
			name: "a name kept as another kind does not keep this one", scope: pruneScope{kind: ng, tenant: "acme"},
			listed: listed("a"), keep: map[objectKey]bool{{"Tenant", "", "a"}: true},
			want: []string{"a"},
		},
		{
			name: "an object being deleted is left to its finalizers", scope: pruneScope{kind: ng, tenant: "acme"},
			listed: deleting,
		},
		{
			name: "cluster-scoped kinds have no tenant", scope: pruneScope{kind: tn},
			listed: listed("acme", "old"), keep: map[objectKey]bool{{"Tenant", "", "acme"}: true},
			want: []string{"old"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, p := range pruneDecide(tt.scope, tt.listed, tt.keep) {
				assert.Equal(t, tt.scope.kind.Kind, p.scope.kind.Kind)
				got = append(got, p.name)
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestPruneOptions(t *testing.T) {
	tests := []struct {
		name string
		args []string
		// wantErr is in stderr; the valid lines fail later, reaching for
		// a server that is not there.
		wantErr string
	}{
		{name: "no pruning", args: nil, wantErr: "127.0.0.1:1"},
		{name: "prune with a selector", args: []string{"--prune", "-l", "managed-by=gitops"}, wantErr: "127.0.0.1:1"},
		{name: "prune with a selector given long", args: []string{"--selector=managed-by=gitops", "--prune"}, wantErr: "127.0.0.1:1"},
		{name: "prune without a selector is refused", args: []string{"--prune"}, wantErr: "error: --prune needs a label selector (-l)"},
		{name: "a selector without prune is refused", args: []string{"-l", "a=b"}, wantErr: "error: -l selects the objects --prune may delete: give --prune too"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc := newTestCLI(t)
			r := tc.run(append([]string{"apply", "-f", "testdata/e2e/cluster.yaml", "--server", "http://127.0.0.1:1"}, tt.args...)...)
			assert.Equal(t, 1, r.code)
			assert.Contains(t, r.stderr, tt.wantErr)
			assert.Empty(t, r.stdout)
		})
	}
}
