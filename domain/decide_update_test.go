package domain_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestDecideUpdate(t *testing.T) {
	type result struct {
		typ    string
		action domain.Action
	}
	tests := []struct {
		name string
		// state is the current object (nil: does not exist).
		state func(t *testing.T) *domain.Object
		// edit turns the state's body into the request body.
		edit       func(b *domain.Object)
		ref        domain.Ref
		expected   string
		dependents int
		wantReason domain.Reason
		wantFields []string
		// want is the one event expected; nil with no wantReason means no events.
		want  *result
		check func(t *testing.T, st, o *domain.Object)
	}{
		{
			name:  "spec change bumps generation",
			state: func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			edit:  func(b *domain.Object) { b.Spec = json.RawMessage(`{"talosVersion":"v1.13.1"}`) },
			want:  &result{"TenantUpdated", domain.ActionUpdated},
			check: func(t *testing.T, st, o *domain.Object) {
				require.Equal(t, int64(2), o.Metadata.Generation)
				require.Contains(t, string(o.Spec), `"talosVersion":"v1.13.1"`)
				require.Contains(t, string(o.Spec), `"podSubnets":["10.244.0.0/16"]`, "defaults are filled on update too")
			},
		},
		{
			name:  "label-only change keeps generation",
			state: func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			edit:  func(b *domain.Object) { b.Metadata.Labels = map[string]string{"env": "staging"} },
			want:  &result{"TenantUpdated", domain.ActionUpdated},
			check: func(t *testing.T, st, o *domain.Object) {
				require.Equal(t, int64(1), o.Metadata.Generation)
				require.Equal(t, map[string]string{"env": "staging"}, o.Metadata.Labels)
				require.Equal(t, st.Spec, o.Spec)
			},
		},
		{
			name:  "annotation-only change keeps generation",
			state: func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			edit:  func(b *domain.Object) { b.Metadata.Annotations = map[string]string{"owner": "team-a"} },
			want:  &result{"TenantUpdated", domain.ActionUpdated},
			check: func(t *testing.T, st, o *domain.Object) {
				require.Equal(t, int64(1), o.Metadata.Generation)
			},
		},
		{
			name:  "removing all labels",
			state: func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			edit:  func(b *domain.Object) { b.Metadata.Labels = nil },
			want:  &result{"TenantUpdated", domain.ActionUpdated},
			check: func(t *testing.T, st, o *domain.Object) {
				require.Nil(t, o.Metadata.Labels)
			},
		},
		{
			name:  "no-op update",
			state: func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			edit:  func(b *domain.Object) {},
		},
		{
			name:  "no-op update with the spec in a non-canonical but equal form",
			state: func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			edit: func(b *domain.Object) {
				b.Spec = json.RawMessage(`{ "network": {"dnsDomain": "cluster.local"}, "kubernetesVersion": "1.35.4" }`)
				b.Metadata.Labels = map[string]string{"env": "prod"}
			},
		},
		{
			name:  "no-op update with empty rather than nil labels",
			state: func(t *testing.T) *domain.Object { return nodeGroupState(t, nil) },
			ref:   refOf("NodeGroup", "t1", "workers"),
			edit:  func(b *domain.Object) { b.Metadata.Labels = map[string]string{} },
		},
		{
			name:     "expected version matches",
			state:    func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			expected: "5",
			edit:     func(b *domain.Object) { b.Metadata.Labels = nil },
			want:     &result{"TenantUpdated", domain.ActionUpdated},
		},
		{
			name:       "expected version is stale",
			state:      func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			expected:   "4",
			edit:       func(b *domain.Object) { b.Metadata.Labels = nil },
			wantReason: domain.ReasonConflict,
		},
		{
			name:       "uid changed: deleted and created again",
			state:      func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			edit:       func(b *domain.Object) { b.Metadata.UID = "another-uid" },
			wantReason: domain.ReasonConflict,
		},
		{
			name:       "not found",
			state:      func(t *testing.T) *domain.Object { return nil },
			edit:       func(b *domain.Object) {},
			wantReason: domain.ReasonNotFound,
		},
		{
			name:       "invalid spec",
			state:      func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			edit:       func(b *domain.Object) { b.Spec = json.RawMessage(`{"network":{"dnsDomain":"Cluster_Local"}}`) },
			wantReason: domain.ReasonInvalid,
			wantFields: []string{"spec.network.dnsDomain"},
		},
		{
			name:       "unknown spec field",
			state:      func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			edit:       func(b *domain.Object) { b.Spec = json.RawMessage(`{"nodes":3}`) },
			wantReason: domain.ReasonBadRequest,
			wantFields: []string{"spec.nodes"},
		},
		{
			name:       "renaming through the body",
			state:      func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			edit:       func(b *domain.Object) { b.Metadata.Name = "t2" },
			wantReason: domain.ReasonInvalid,
			wantFields: []string{"metadata.name"},
		},
		{
			name:  "count-only change scales",
			state: func(t *testing.T) *domain.Object { return nodeGroupState(t, nil) },
			ref:   refOf("NodeGroup", "t1", "workers"),
			edit:  func(b *domain.Object) { b.Spec = json.RawMessage(`{"role":"worker","count":5,"provider":"emu"}`) },
			want:  &result{"NodeGroupScaled", domain.ActionUpdated},
			check: func(t *testing.T, st, o *domain.Object) {
				require.Equal(t, int64(2), o.Metadata.Generation)
				require.Contains(t, string(o.Spec), `"count":5`)
			},
		},
		{
			name:  "count and node labels change",
			state: func(t *testing.T) *domain.Object { return nodeGroupState(t, nil) },
			ref:   refOf("NodeGroup", "t1", "workers"),
			edit: func(b *domain.Object) {
				b.Spec = json.RawMessage(`{"role":"worker","count":5,"provider":"emu","labels":{"tier":"web"}}`)
			},
			want: &result{"NodeGroupUpdated", domain.ActionUpdated},
		},
		{
			name:  "count and metadata labels change",
			state: func(t *testing.T) *domain.Object { return nodeGroupState(t, nil) },
			ref:   refOf("NodeGroup", "t1", "workers"),
			edit: func(b *domain.Object) {
				b.Spec = json.RawMessage(`{"role":"worker","count":5,"provider":"emu"}`)
				b.Metadata.Labels = map[string]string{"tier": "web"}
			},
			want: &result{"NodeGroupUpdated", domain.ActionUpdated},
		},
		{
			name:  "non-count spec change",
			state: func(t *testing.T) *domain.Object { return nodeGroupState(t, nil) },
			ref:   refOf("NodeGroup", "t1", "workers"),
			edit: func(b *domain.Object) {
				b.Spec = json.RawMessage(`{"role":"worker","count":3,"provider":"emu","providerConfig":{"shape":"large"}}`)
			},
			want: &result{"NodeGroupUpdated", domain.ActionUpdated},
			check: func(t *testing.T, st, o *domain.Object) {
				require.Equal(t, int64(2), o.Metadata.Generation)
			},
		},
		{
			name:  "status in an update body is ignored",
			state: func(t *testing.T) *domain.Object { return nodeGroupState(t, nil) },
			ref:   refOf("NodeGroup", "t1", "workers"),
			edit: func(b *domain.Object) {
				b.Spec = json.RawMessage(`{"role":"worker","count":4,"provider":"emu"}`)
				b.Status = json.RawMessage(`{"replicas":100,"readyReplicas":100}`)
			},
			want: &result{"NodeGroupScaled", domain.ActionUpdated},
			check: func(t *testing.T, st, o *domain.Object) {
				require.Equal(t, string(st.Status), string(o.Status))
			},
		},
		{
			name:  "status-only change in an update body is a no-op",
			state: func(t *testing.T) *domain.Object { return nodeGroupState(t, nil) },
			ref:   refOf("NodeGroup", "t1", "workers"),
			edit:  func(b *domain.Object) { b.Status = json.RawMessage(`{"replicas":0,"readyReplicas":0}`) },
		},
		{
			name:  "server-owned metadata is kept",
			state: func(t *testing.T) *domain.Object { return nodeGroupState(t, nil) },
			ref:   refOf("NodeGroup", "t1", "workers"),
			edit: func(b *domain.Object) {
				b.Metadata.Generation = 42
				b.Metadata.ResourceVersion = "1"
				b.Metadata.Finalizers = []string{"rezuscloud.io/drain"}
			},
			want: &result{"NodeGroupUpdated", domain.ActionUpdated},
			check: func(t *testing.T, st, o *domain.Object) {
				require.Equal(t, int64(1), o.Metadata.Generation)
				require.Equal(t, st.Metadata.UID, o.Metadata.UID)
				require.Equal(t, "t1", o.Metadata.Tenant)
				require.Equal(t, st.Metadata.CreationTimestamp, o.Metadata.CreationTimestamp)
				require.Equal(t, []string{"rezuscloud.io/drain"}, o.Metadata.Finalizers)
			},
		},
		// Updates of an object being deleted.
		{
			name:       "terminating: adding a finalizer is refused",
			state:      func(t *testing.T) *domain.Object { return tenantState(t, terminating("rezuscloud.io/destroy")) },
			edit:       func(b *domain.Object) { b.Metadata.Finalizers = append(b.Metadata.Finalizers, "rezuscloud.io/other") },
			wantReason: domain.ReasonInvalid,
			wantFields: []string{"metadata.finalizers"},
		},
		{
			name:  "terminating: removing the last finalizer deletes",
			state: func(t *testing.T) *domain.Object { return tenantState(t, terminating("rezuscloud.io/destroy")) },
			edit:  func(b *domain.Object) { b.Metadata.Finalizers = nil },
			want:  &result{"TenantDeleted", domain.ActionDeleted},
			check: func(t *testing.T, st, o *domain.Object) {
				require.Equal(t, st.Metadata.DeletionTimestamp, o.Metadata.DeletionTimestamp)
			},
		},
		{
			name:       "terminating: removing the last finalizer while dependents remain does not delete",
			state:      func(t *testing.T) *domain.Object { return tenantState(t, terminating("rezuscloud.io/destroy")) },
			edit:       func(b *domain.Object) { b.Metadata.Finalizers = nil },
			dependents: 2,
			want:       &result{"TenantUpdated", domain.ActionUpdated},
			check: func(t *testing.T, st, o *domain.Object) {
				require.Empty(t, o.Metadata.Finalizers)
				require.NotNil(t, o.Metadata.DeletionTimestamp)
			},
		},
		{
			name: "terminating: removing one of two finalizers",
			state: func(t *testing.T) *domain.Object {
				return tenantState(t, terminating("rezuscloud.io/destroy", "rezuscloud.io/backup"))
			},
			edit: func(b *domain.Object) { b.Metadata.Finalizers = []string{"rezuscloud.io/backup"} },
			want: &result{"TenantUpdated", domain.ActionUpdated},
			check: func(t *testing.T, st, o *domain.Object) {
				require.Equal(t, []string{"rezuscloud.io/backup"}, o.Metadata.Finalizers)
				require.Equal(t, st.Metadata.DeletionTimestamp, o.Metadata.DeletionTimestamp)
			},
		},
		{
			name:  "terminating: a label change keeps it terminating",
			state: func(t *testing.T) *domain.Object { return tenantState(t, terminating("rezuscloud.io/destroy")) },
			edit:  func(b *domain.Object) { b.Metadata.Labels = map[string]string{"env": "gone"} },
			want:  &result{"TenantUpdated", domain.ActionUpdated},
			check: func(t *testing.T, st, o *domain.Object) {
				require.Equal(t, st.Metadata.DeletionTimestamp, o.Metadata.DeletionTimestamp)
			},
		},
		{
			name:  "terminating: a no-op with finalizers left",
			state: func(t *testing.T) *domain.Object { return tenantState(t, terminating("rezuscloud.io/destroy")) },
			edit:  func(b *domain.Object) {},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.state(t)
			var body *domain.Object
			if st != nil {
				body = bodyOf(st)
			} else {
				body = newObject("Tenant", `{}`)
			}
			tc.edit(body)
			ref := tc.ref
			if ref.Kind == "" {
				ref = refOf("Tenant", "", "t1")
			}
			before := snapshot(st)
			cmd := command(domain.OpUpdate, ref, body)
			cmd.ExpectedVersion = tc.expected
			cmd.Dependents = tc.dependents
			evs, err := domain.Decide(st, cmd)
			require.Equal(t, before, st, "Decide must not modify the state")
			if tc.wantReason != "" {
				require.Error(t, err)
				require.Empty(t, evs)
				require.Equal(t, tc.wantReason, domain.ReasonOf(err), "error: %v", err)
				switch tc.wantReason {
				case domain.ReasonConflict:
					require.True(t, domain.IsConflict(err))
				case domain.ReasonNotFound:
					require.True(t, domain.IsNotFound(err))
				case domain.ReasonInvalid:
					require.True(t, domain.IsInvalid(err))
				}
				if tc.wantFields != nil {
					require.Equal(t, sorted(tc.wantFields), errFields(t, err))
				}
				return
			}
			require.NoError(t, err)
			if tc.want == nil {
				require.Empty(t, evs, "a no-op update returns no events")
				return
			}
			require.Len(t, evs, 1)
			requireEvent(t, evs[0], tc.want.typ, tc.want.action)
			o := evs[0].Object
			require.Equal(t, st.Metadata.UID, o.Metadata.UID)
			require.Equal(t, st.Metadata.Name, o.Metadata.Name)
			if tc.check != nil {
				tc.check(t, st, o)
			}
		})
	}
}
