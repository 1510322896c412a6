package domain_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

func TestDecideUnknownKindAndOp(t *testing.T) {
	_, err := domain.Decide(nil, command(domain.OpCreate, refOf("Widget", "", "w"), newObject("Widget", "{}")))
	require.Equal(t, domain.ReasonBadRequest, domain.ReasonOf(err))

	_, err = domain.Decide(nil, command("Frobnicate", refOf("Tenant", "", "t1"), newObject("Tenant", "{}")))
	require.Equal(t, domain.ReasonBadRequest, domain.ReasonOf(err))
}

func TestDecideCreate(t *testing.T) {
	existing := &domain.Object{APIVersion: domain.APIVersion, Kind: "Tenant",
		Metadata: domain.ObjectMeta{Name: "t1", UID: "other", ResourceVersion: "3", Generation: 1}, Spec: json.RawMessage(tenantDefaultSpec)}

	tests := []struct {
		name  string
		ref   domain.Ref
		obj   func() *domain.Object
		state *domain.Object
		// wantReason is empty for success.
		wantReason domain.Reason
		wantFields []string
		// wantType is the event type on success.
		wantType string
		check    func(t *testing.T, o *domain.Object)
	}{
		{
			name: "tenant with empty spec gets defaults and initial status",
			ref:  refOf("Tenant", "", "t1"),
			obj:  func() *domain.Object { return newObject("Tenant", `{}`) },
			// tenant: talosVersion v1.13.0, podSubnets 10.244.0.0/16, ...
			wantType: "TenantCreated",
			check: func(t *testing.T, o *domain.Object) {
				require.JSONEq(t, tenantCreatedSpec, string(o.Spec))
				require.JSONEq(t, `{"phase":"Pending","machines":{"total":0,"ready":0,"controlPlane":0,"workers":0}}`, string(o.Status))
				require.Empty(t, o.Metadata.Tenant)
			},
		},
		{
			name:     "tenant with no spec at all gets defaults",
			ref:      refOf("Tenant", "", "t1"),
			obj:      func() *domain.Object { return newObject("Tenant", "") },
			wantType: "TenantCreated",
			check: func(t *testing.T, o *domain.Object) {
				require.JSONEq(t, tenantCreatedSpec, string(o.Spec))
			},
		},
		{
			name: "tenant versions are canonicalised with a leading v",
			ref:  refOf("Tenant", "", "t1"),
			obj: func() *domain.Object {
				return newObject("Tenant", `{"kubernetesVersion":"1.35.4","talosVersion":"1.12.4"}`)
			},
			wantType: "TenantCreated",
			check: func(t *testing.T, o *domain.Object) {
				var s domain.TenantSpec
				require.NoError(t, json.Unmarshal(o.Spec, &s))
				require.Equal(t, "v1.35.4", s.KubernetesVersion)
				require.Equal(t, "v1.12.4", s.TalosVersion)
				require.Equal(t, []string{"10.244.0.0/16"}, s.Network.PodSubnets)
			},
		},
		{
			name: "node group lives in its tenant, defaults maxParallelism, has no initial status",
			ref:  refOf("NodeGroup", "t1", "workers"),
			obj: func() *domain.Object {
				o := newObject("NodeGroup", workerSpec)
				o.Metadata.Tenant = "t1"
				o.Metadata.Name = "workers"
				return o
			},
			wantType: "NodeGroupCreated",
			check: func(t *testing.T, o *domain.Object) {
				require.Equal(t, "t1", o.Metadata.Tenant)
				require.JSONEq(t, `{"role":"worker","count":3,"provider":"emu","updateStrategy":{"maxParallelism":1}}`, string(o.Spec))
				require.Nil(t, o.Status)
			},
		},
		{
			name:     "machine gets its initial status",
			ref:      refOf("Machine", "t1", "m1"),
			obj:      func() *domain.Object { return newObject("Machine", `{"nodeGroup":"workers","role":"worker"}`) },
			wantType: "MachineCreated",
			check: func(t *testing.T, o *domain.Object) {
				require.JSONEq(t, `{"stage":"Unknown","ready":false,"configUpToDate":false}`, string(o.Status))
			},
		},
		{
			name:     "config patch defaults",
			ref:      refOf("ConfigPatch", "t1", "p1"),
			obj:      func() *domain.Object { return newObject("ConfigPatch", `{"patch":"machine: {}"}`) },
			wantType: "ConfigPatchCreated",
			check: func(t *testing.T, o *domain.Object) {
				require.JSONEq(t, `{"target":{"kind":"all"},"patch":"machine: {}","format":"strategic","enabled":true,"weight":0}`, string(o.Spec))
			},
		},
		{
			name: "metadata is carried, server-owned metadata from the client is ignored",
			ref:  refOf("Provider", "", "emu"),
			obj: func() *domain.Object {
				o := newObject("Provider", `{"type":"emulated"}`)
				old := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
				o.Metadata = domain.ObjectMeta{
					Name: "emu", UID: "client-uid", ResourceVersion: "99", Generation: 7,
					CreationTimestamp: &old, DeletionTimestamp: &old,
					Labels:      map[string]string{"env": "test"},
					Annotations: map[string]string{"note": "free text ✓"},
					Finalizers:  []string{"rezuscloud.io/cleanup"},
				}
				return o
			},
			wantType: "ProviderCreated",
			check: func(t *testing.T, o *domain.Object) {
				require.Equal(t, map[string]string{"env": "test"}, o.Metadata.Labels)
				require.Equal(t, map[string]string{"note": "free text ✓"}, o.Metadata.Annotations)
				require.Equal(t, []string{"rezuscloud.io/cleanup"}, o.Metadata.Finalizers)
				require.Nil(t, o.Metadata.DeletionTimestamp)
			},
		},
		{
			name: "empty labels, annotations and finalizers are stored as nil",
			ref:  refOf("Tenant", "", "t1"),
			obj: func() *domain.Object {
				o := newObject("Tenant", `{}`)
				o.Metadata.Labels = map[string]string{}
				o.Metadata.Annotations = map[string]string{}
				o.Metadata.Finalizers = []string{}
				return o
			},
			wantType: "TenantCreated",
			check: func(t *testing.T, o *domain.Object) {
				require.Nil(t, o.Metadata.Labels)
				require.Nil(t, o.Metadata.Annotations)
				require.Nil(t, o.Metadata.Finalizers)
			},
		},
		{
			name: "status in a create body is ignored",
			ref:  refOf("Tenant", "", "t1"),
			obj: func() *domain.Object {
				o := newObject("Tenant", `{}`)
				o.Status = json.RawMessage(`{"phase":"Ready"}`)
				return o
			},
			wantType: "TenantCreated",
			check: func(t *testing.T, o *domain.Object) {
				require.JSONEq(t, `{"phase":"Pending","machines":{"total":0,"ready":0,"controlPlane":0,"workers":0}}`, string(o.Status))
			},
		},
		{
			name:     "apiVersion and kind may be omitted",
			ref:      refOf("Tenant", "", "t1"),
			obj:      func() *domain.Object { return &domain.Object{Spec: json.RawMessage(`{}`)} },
			wantType: "TenantCreated",
			check: func(t *testing.T, o *domain.Object) {
				require.Equal(t, domain.APIVersion, o.APIVersion)
				require.Equal(t, "Tenant", o.Kind)
			},
		},
		{
			name:     "kind may be addressed by its plural",
			ref:      refOf("tenants", "", "t1"),
			obj:      func() *domain.Object { return newObject("Tenant", `{}`) },
			wantType: "TenantCreated",
		},
		{
			name:       "already exists",
			ref:        refOf("Tenant", "", "t1"),
			obj:        func() *domain.Object { return newObject("Tenant", `{}`) },
			state:      existing,
			wantReason: domain.ReasonAlreadyExists,
		},
		{
			name:       "empty name",
			ref:        refOf("Tenant", "", ""),
			obj:        func() *domain.Object { return newObject("Tenant", `{}`) },
			wantReason: domain.ReasonInvalid,
			wantFields: []string{"metadata.name"},
		},
		{
			name:       "upper-case name",
			ref:        refOf("Tenant", "", "Prod"),
			obj:        func() *domain.Object { return newObject("Tenant", `{}`) },
			wantReason: domain.ReasonInvalid,
			wantFields: []string{"metadata.name"},
		},
		{
			name:       "dotted name is not one subject token",
			ref:        refOf("Tenant", "", "a.b"),
			obj:        func() *domain.Object { return newObject("Tenant", `{}`) },
			wantReason: domain.ReasonInvalid,
			wantFields: []string{"metadata.name"},
		},
		{
			name:       "name starting with a dash",
			ref:        refOf("NodeGroup", "t1", "-workers"),
			obj:        func() *domain.Object { return newObject("NodeGroup", workerSpec) },
			wantReason: domain.ReasonInvalid,
			wantFields: []string{"metadata.name"},
		},
		{
			name:       "name of 64 characters",
			ref:        refOf("Tenant", "", strings.Repeat("a", 64)),
			obj:        func() *domain.Object { return newObject("Tenant", `{}`) },
			wantReason: domain.ReasonInvalid,
			wantFields: []string{"metadata.name"},
		},
		{
			name:     "name of 63 characters",
			ref:      refOf("Tenant", "", strings.Repeat("a", 63)),
			obj:      func() *domain.Object { return newObject("Tenant", `{}`) },
			wantType: "TenantCreated",
		},
		{
			name: "metadata.name does not match the URL",
			ref:  refOf("Tenant", "", "t1"),
			obj: func() *domain.Object {
				o := newObject("Tenant", `{}`)
				o.Metadata.Name = "t2"
				return o
			},
			wantReason: domain.ReasonInvalid,
			wantFields: []string{"metadata.name"},
		},
		{
			name: "tenant given for a cluster-scoped tenant",
			ref:  refOf("Tenant", "", "t1"),
			obj: func() *domain.Object {
				o := newObject("Tenant", `{}`)
				o.Metadata.Tenant = "t0"
				return o
			},
			wantReason: domain.ReasonInvalid,
			wantFields: []string{"metadata.tenant"},
		},
		{
			name: "tenant given for a cluster-scoped provider",
			ref:  refOf("Provider", "", "emu"),
			obj: func() *domain.Object {
				o := newObject("Provider", `{"type":"emulated"}`)
				o.Metadata.Tenant = "t1"
				return o
			},
			wantReason: domain.ReasonInvalid,
			wantFields: []string{"metadata.tenant"},
		},
		{
			name: "tenant of a node group does not match the URL",
			ref:  refOf("NodeGroup", "t1", "workers"),
			obj: func() *domain.Object {
				o := newObject("NodeGroup", workerSpec)
				o.Metadata.Tenant = "t2"
				return o
			},
			wantReason: domain.ReasonInvalid,
			wantFields: []string{"metadata.tenant"},
		},
		{
			name: "wrong apiVersion",
			ref:  refOf("Tenant", "", "t1"),
			obj: func() *domain.Object {
				o := newObject("Tenant", `{}`)
				o.APIVersion = "v1"
				return o
			},
			wantReason: domain.ReasonInvalid,
			wantFields: []string{"apiVersion"},
		},
		{
			name: "wrong kind",
			ref:  refOf("Tenant", "", "t1"),
			obj: func() *domain.Object {
				o := newObject("Tenant", `{}`)
				o.Kind = "NodeGroup"
				return o
			},
			wantReason: domain.ReasonInvalid,
			wantFields: []string{"kind"},
		},
		{
			name: "bad labels, annotations and finalizers",
			ref:  refOf("Tenant", "", "t1"),
			obj: func() *domain.Object {
				o := newObject("Tenant", `{}`)
				o.Metadata.Labels = map[string]string{"bad key!": "x", "ok": "bad value!"}
				o.Metadata.Annotations = map[string]string{"/nope": "x"}
				o.Metadata.Finalizers = []string{"rezuscloud.io/a", "not a name!", "rezuscloud.io/a"}
				return o
			},
			wantReason: domain.ReasonInvalid,
			wantFields: []string{
				"metadata.annotations[/nope]",
				"metadata.finalizers[1]", "metadata.finalizers[2]",
				"metadata.labels[bad key!]", "metadata.labels[ok]",
			},
		},
		{
			name: "every problem at once, metadata and spec",
			ref:  refOf("Tenant", "", "t1"),
			obj: func() *domain.Object {
				o := newObject("Tenant", `{"talosVersion":"latest","network":{"podSubnets":["10.244.0.1/16"]}}`)
				o.APIVersion = "rezuscloud.io/v2"
				o.Kind = "Machine"
				o.Metadata.Name = "t2"
				return o
			},
			wantReason: domain.ReasonInvalid,
			wantFields: []string{"apiVersion", "kind", "metadata.name", "spec.network.podSubnets[0]", "spec.talosVersion"},
		},
		{
			name: "invalid spec value",
			ref:  refOf("NodeGroup", "t1", "cp"),
			obj: func() *domain.Object {
				return newObject("NodeGroup", `{"role":"controlplane","count":2,"provider":"emu"}`)
			},
			wantReason: domain.ReasonInvalid,
			wantFields: []string{"spec.count"},
		},
		{
			name:       "unknown spec field is a bad request",
			ref:        refOf("Tenant", "", "t1"),
			obj:        func() *domain.Object { return newObject("Tenant", `{"talosversion":"v1.13.0","extra":true}`) },
			wantReason: domain.ReasonBadRequest,
			wantFields: []string{"spec.extra", "spec.talosversion"},
		},
		{
			name:       "wrong JSON type is a bad request",
			ref:        refOf("NodeGroup", "t1", "workers"),
			obj:        func() *domain.Object { return newObject("NodeGroup", `{"role":"worker","count":"3","provider":"emu"}`) },
			wantReason: domain.ReasonBadRequest,
			wantFields: []string{"spec.count"},
		},
		{
			name: "a bad request wins over invalid metadata, and keeps every cause",
			ref:  refOf("Tenant", "", "t1"),
			obj: func() *domain.Object {
				o := newObject("Tenant", `{"network":{"podSubnets":"10.244.0.0/16"}}`)
				o.Metadata.Name = "t2"
				return o
			},
			wantReason: domain.ReasonBadRequest,
			wantFields: []string{"metadata.name", "spec.network.podSubnets"},
		},
		{
			name: "not-a-JSON-object providerConfig is a bad request",
			ref:  refOf("NodeGroup", "t1", "workers"),
			obj: func() *domain.Object {
				return newObject("NodeGroup", `{"role":"worker","count":1,"provider":"emu","providerConfig":[1,2]}`)
			},
			wantReason: domain.ReasonBadRequest,
			wantFields: []string{"spec.providerConfig"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obj := tc.obj()
			before := snapshot(obj)
			evs, err := domain.Decide(tc.state, command(domain.OpCreate, tc.ref, obj))
			require.Equal(t, before, obj, "Decide must not modify the command's object")
			if tc.wantReason != "" {
				require.Error(t, err)
				require.Empty(t, evs)
				require.Equal(t, tc.wantReason, domain.ReasonOf(err), "error: %v", err)
				var de *domain.Error
				require.ErrorAs(t, err, &de)
				require.Equal(t, tc.wantReason.Code(), domain.StatusOf(err).Code)
				if tc.wantFields != nil {
					require.Equal(t, sorted(tc.wantFields), errFields(t, err), "error: %v", err)
					for _, c := range de.Causes {
						require.NotEmpty(t, c.Message, "cause %+v", c)
						require.NotEmpty(t, c.Type, "cause %+v", c)
					}
				}
				if tc.wantReason == domain.ReasonInvalid || tc.wantReason == domain.ReasonBadRequest {
					require.NotEmpty(t, de.Causes)
				}
				return
			}
			require.NoError(t, err)
			require.Len(t, evs, 1)
			ev := evs[0]
			requireEvent(t, ev, tc.wantType, domain.ActionCreated)
			o := ev.Object
			kind := domain.MustKind(tc.ref.Kind)
			require.Equal(t, domain.APIVersion, o.APIVersion)
			require.Equal(t, kind.Kind, o.Kind)
			require.Equal(t, tc.ref.Name, o.Metadata.Name)
			require.Equal(t, testUID, o.Metadata.UID)
			require.Equal(t, int64(1), o.Metadata.Generation)
			require.NotNil(t, o.Metadata.CreationTimestamp)
			require.True(t, o.Metadata.CreationTimestamp.Equal(testNow))
			require.Equal(t, time.UTC, o.Metadata.CreationTimestamp.Location())
			require.Nil(t, o.Metadata.DeletionTimestamp)
			require.Equal(t, ev.Ref(), o.Ref())
			if tc.check != nil {
				tc.check(t, o)
			}
		})
	}
}
