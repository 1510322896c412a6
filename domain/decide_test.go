package domain_test

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// testNow is deliberately not UTC: Decide must store UTC times.
var testNow = time.Date(2026, 5, 1, 14, 30, 0, 0, time.FixedZone("CEST", 2*60*60))

const (
	testUID   = "0b9c1f2e-8a51-4f0e-9d4e-3c2b1a0f9e8d"
	testActor = "alice"
	testCorr  = "corr-1"
)

// Canonical specs as the normalisers produce them.
const (
	tenantDefaultSpec = `{"talosVersion":"v1.13.0","kubernetesVersion":"v1.36.0","controlPlane":{},` +
		`"network":{"podSubnets":["10.244.0.0/16"],"serviceSubnets":["10.96.0.0/12"],"dnsDomain":"cluster.local"}}`
	workerSpec = `{"role":"worker","count":3,"provider":"emu"}`
)

// newObject builds a request body for kind with the given spec.
func newObject(kind, spec string) *domain.Object {
	o := &domain.Object{APIVersion: domain.APIVersion, Kind: kind}
	if spec != "" {
		o.Spec = json.RawMessage(spec)
	}
	return o
}

func refOf(kind, tenant, name string) domain.Ref {
	return domain.Ref{Kind: kind, Tenant: tenant, Name: name}
}

// command fills in the parts of a command every test shares.
func command(op domain.Op, ref domain.Ref, obj *domain.Object) domain.Command {
	return domain.Command{Op: op, Ref: ref, Object: obj, Actor: testActor, CorrelationID: testCorr, Now: testNow, NewUID: testUID}
}

// mustCreate creates an object and evolves it at sequence seq, the state a
// later command sees.
func mustCreate(t *testing.T, ref domain.Ref, obj *domain.Object, seq uint64) *domain.Object {
	t.Helper()
	evs, err := domain.Decide(nil, command(domain.OpCreate, ref, obj))
	require.NoError(t, err)
	require.Len(t, evs, 1)
	st := domain.Evolve(nil, &evs[0], seq)
	require.NotNil(t, st)
	return st
}

// errFields returns the sorted cause fields of a domain error.
func errFields(t *testing.T, err error) []string {
	t.Helper()
	var de *domain.Error
	require.ErrorAs(t, err, &de)
	out := make([]string, 0, len(de.Causes))
	for _, c := range de.Causes {
		out = append(out, c.Field)
	}
	sort.Strings(out)
	return out
}

// snapshot copies o for a later "unchanged" check. DeepCopy turns an empty
// finalizer slice into nil, which would make the check fail for no reason.
func snapshot(o *domain.Object) *domain.Object {
	c := o.DeepCopy()
	if c != nil && o.Metadata.Finalizers != nil && c.Metadata.Finalizers == nil {
		c.Metadata.Finalizers = []string{}
	}
	return c
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

// requireEvent checks the envelope of one event.
func requireEvent(t *testing.T, ev domain.Event, typ string, action domain.Action) {
	t.Helper()
	require.Equal(t, typ, ev.Type)
	require.Equal(t, action, ev.Action)
	require.Equal(t, testActor, ev.Actor)
	require.Equal(t, testCorr, ev.CorrelationID)
	require.True(t, ev.Time.Equal(testNow), "event time %v", ev.Time)
	require.Equal(t, time.UTC, ev.Time.Location())
	require.NotNil(t, ev.Object)
	require.Empty(t, ev.Object.Metadata.ResourceVersion, "the post-image has no resourceVersion: the stream sequence is it")
}

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
				require.JSONEq(t, tenantDefaultSpec, string(o.Spec))
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
				require.JSONEq(t, tenantDefaultSpec, string(o.Spec))
			},
		},
		{
			name: "tenant versions are canonicalised with a leading v",
			ref:  refOf("Tenant", "", "t1"),
			obj: func() *domain.Object {
				return newObject("Tenant", `{"kubernetesVersion":"1.36.0","talosVersion":"1.12.4"}`)
			},
			wantType: "TenantCreated",
			check: func(t *testing.T, o *domain.Object) {
				var s domain.TenantSpec
				require.NoError(t, json.Unmarshal(o.Spec, &s))
				require.Equal(t, "v1.36.0", s.KubernetesVersion)
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

// The states the update, delete and status tests start from.
func tenantState(t *testing.T, mutate func(o *domain.Object)) *domain.Object {
	t.Helper()
	in := newObject("Tenant", `{}`)
	in.Metadata.Labels = map[string]string{"env": "prod"}
	st := mustCreate(t, refOf("Tenant", "", "t1"), in, 5)
	if mutate != nil {
		mutate(st)
	}
	return st
}

func nodeGroupState(t *testing.T, mutate func(o *domain.Object)) *domain.Object {
	t.Helper()
	in := newObject("NodeGroup", workerSpec)
	st := mustCreate(t, refOf("NodeGroup", "t1", "workers"), in, 7)
	st.Status = json.RawMessage(`{"replicas":3,"readyReplicas":2}`)
	if mutate != nil {
		mutate(st)
	}
	return st
}

// bodyOf is the body a client sends back after reading state: the object with
// its metadata, to be edited.
func bodyOf(st *domain.Object) *domain.Object {
	b := st.DeepCopy()
	b.Metadata.CreationTimestamp = nil
	return b
}

func terminating(fins ...string) func(o *domain.Object) {
	return func(o *domain.Object) {
		del := testNow.Add(-time.Hour).UTC()
		o.Metadata.DeletionTimestamp = &del
		o.Metadata.Finalizers = fins
	}
}

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
				b.Spec = json.RawMessage(`{ "network": {"dnsDomain": "cluster.local"}, "kubernetesVersion": "1.36.0" }`)
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

func TestDecideDelete(t *testing.T) {
	tests := []struct {
		name       string
		state      func(t *testing.T) *domain.Object
		ref        domain.Ref
		dependents int
		expected   string
		wantReason domain.Reason
		// wantType and wantAction describe the one event; empty wantType means none.
		wantType   string
		wantAction domain.Action
		check      func(t *testing.T, st, o *domain.Object)
	}{
		{
			name:       "without finalizers the object is deleted",
			state:      func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			wantType:   "TenantDeleted",
			wantAction: domain.ActionDeleted,
			check: func(t *testing.T, st, o *domain.Object) {
				require.NotNil(t, o.Metadata.DeletionTimestamp)
				require.True(t, o.Metadata.DeletionTimestamp.Equal(testNow))
				require.Equal(t, time.UTC, o.Metadata.DeletionTimestamp.Location())
			},
		},
		{
			name:       "node group without finalizers",
			state:      func(t *testing.T) *domain.Object { return nodeGroupState(t, nil) },
			ref:        refOf("NodeGroup", "t1", "workers"),
			wantType:   "NodeGroupDeleted",
			wantAction: domain.ActionDeleted,
		},
		{
			name: "with finalizers deletion is requested",
			state: func(t *testing.T) *domain.Object {
				return tenantState(t, func(o *domain.Object) { o.Metadata.Finalizers = []string{"rezuscloud.io/destroy"} })
			},
			wantType:   "TenantDeletionRequested",
			wantAction: domain.ActionUpdated,
			check: func(t *testing.T, st, o *domain.Object) {
				require.NotNil(t, o.Metadata.DeletionTimestamp)
				require.True(t, o.Metadata.DeletionTimestamp.Equal(testNow))
				require.Equal(t, []string{"rezuscloud.io/destroy"}, o.Metadata.Finalizers)
				require.Equal(t, st.Spec, o.Spec)
			},
		},
		{
			name:       "dependents hold a deletion back even without finalizers",
			state:      func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			dependents: 3,
			wantType:   "TenantDeletionRequested",
			wantAction: domain.ActionUpdated,
			check: func(t *testing.T, st, o *domain.Object) {
				require.NotNil(t, o.Metadata.DeletionTimestamp)
			},
		},
		{
			name:  "deleting a terminating object again does nothing",
			state: func(t *testing.T) *domain.Object { return tenantState(t, terminating("rezuscloud.io/destroy")) },
		},
		{
			name:       "deleting a terminating object with dependents again does nothing",
			state:      func(t *testing.T) *domain.Object { return tenantState(t, terminating()) },
			dependents: 1,
		},
		{
			name:       "deleting a terminating object with nothing holding it back finishes the deletion",
			state:      func(t *testing.T) *domain.Object { return tenantState(t, terminating()) },
			wantType:   "TenantDeleted",
			wantAction: domain.ActionDeleted,
			check: func(t *testing.T, st, o *domain.Object) {
				require.Equal(t, st.Metadata.DeletionTimestamp, o.Metadata.DeletionTimestamp, "the first deletion time is kept")
			},
		},
		{
			name:       "not found",
			state:      func(t *testing.T) *domain.Object { return nil },
			wantReason: domain.ReasonNotFound,
		},
		{
			name:       "stale expected version",
			state:      func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			expected:   "1",
			wantReason: domain.ReasonConflict,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.state(t)
			ref := tc.ref
			if ref.Kind == "" {
				ref = refOf("Tenant", "", "t1")
			}
			before := snapshot(st)
			cmd := command(domain.OpDelete, ref, nil)
			cmd.Dependents = tc.dependents
			cmd.ExpectedVersion = tc.expected
			evs, err := domain.Decide(st, cmd)
			require.Equal(t, before, st, "Decide must not modify the state")
			if tc.wantReason != "" {
				require.Equal(t, tc.wantReason, domain.ReasonOf(err), "error: %v", err)
				require.Empty(t, evs)
				return
			}
			require.NoError(t, err)
			if tc.wantType == "" {
				require.Empty(t, evs)
				return
			}
			require.Len(t, evs, 1)
			requireEvent(t, evs[0], tc.wantType, tc.wantAction)
			o := evs[0].Object
			require.Equal(t, st.Metadata.UID, o.Metadata.UID)
			require.Equal(t, st.Metadata.Generation, o.Metadata.Generation)
			if tc.check != nil {
				tc.check(t, st, o)
			}
		})
	}
}

func TestDecideStatus(t *testing.T) {
	machineState := func(t *testing.T) *domain.Object {
		return mustCreate(t, refOf("Machine", "t1", "m1"), newObject("Machine", `{"nodeGroup":"workers","role":"worker"}`), 9)
	}
	tests := []struct {
		name       string
		state      func(t *testing.T) *domain.Object
		ref        domain.Ref
		status     string
		labels     map[string]string
		wantReason domain.Reason
		wantFields []string
		// wantStatus is the stored status (JSONEq); empty means no event.
		wantStatus string
	}{
		{
			name:       "valid status is normalised",
			state:      func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			status:     `{"phase":"Ready","observedGeneration":1,"conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2026-05-01T12:00:00Z"}]}`,
			wantStatus: `{"phase":"Ready","observedGeneration":1,"conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2026-05-01T12:00:00Z"}],"machines":{"total":0,"ready":0,"controlPlane":0,"workers":0}}`,
		},
		{
			name:       "labels in a status body are ignored",
			state:      func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			status:     `{"phase":"Provisioning"}`,
			labels:     map[string]string{"hijack": "yes"},
			wantStatus: `{"phase":"Provisioning","machines":{"total":0,"ready":0,"controlPlane":0,"workers":0}}`,
		},
		{
			name:       "bad condition status",
			state:      func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			status:     `{"conditions":[{"type":"Ready","status":"Maybe"}]}`,
			wantReason: domain.ReasonInvalid,
			wantFields: []string{"status.conditions[0].status"},
		},
		{
			name:       "condition without a type, duplicate condition, bad phase",
			state:      func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			status:     `{"phase":"Sleeping","conditions":[{"status":"True"},{"type":"A","status":"True"},{"type":"A","status":"False"}]}`,
			wantReason: domain.ReasonInvalid,
			wantFields: []string{"status.conditions[0].type", "status.conditions[2].type", "status.phase"},
		},
		{
			name:       "unknown status field",
			state:      func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			status:     `{"phase":"Ready","healthy":true}`,
			wantReason: domain.ReasonBadRequest,
			wantFields: []string{"status.healthy"},
		},
		{
			name:       "node group ready replicas above replicas",
			state:      func(t *testing.T) *domain.Object { return nodeGroupState(t, nil) },
			ref:        refOf("NodeGroup", "t1", "workers"),
			status:     `{"replicas":1,"readyReplicas":2}`,
			wantReason: domain.ReasonInvalid,
			wantFields: []string{"status.readyReplicas"},
		},
		{
			name:       "machine talos version",
			state:      machineState,
			ref:        refOf("Machine", "t1", "m1"),
			status:     `{"stage":"Running","ready":true,"talosVersion":"one"}`,
			wantReason: domain.ReasonInvalid,
			wantFields: []string{"status.talosVersion"},
		},
		{
			name:       "machine stage defaults to Unknown",
			state:      machineState,
			ref:        refOf("Machine", "t1", "m1"),
			status:     `{"ready":true,"configUpToDate":true}`,
			wantStatus: `{"stage":"Unknown","ready":true,"configUpToDate":true}`,
		},
		{
			name:   "no-op when equal after normalisation",
			state:  func(t *testing.T) *domain.Object { return nodeGroupState(t, nil) },
			ref:    refOf("NodeGroup", "t1", "workers"),
			status: `{ "readyReplicas": 2, "replicas": 3 }`,
		},
		{
			name:   "writing a created tenant's status back unchanged is a no-op",
			state:  func(t *testing.T) *domain.Object { return tenantState(t, nil) },
			status: "<state>",
		},
		{
			name:   "writing a created machine's status back unchanged is a no-op",
			state:  machineState,
			ref:    refOf("Machine", "t1", "m1"),
			status: "<state>",
		},
		{
			name:       "not found",
			state:      func(t *testing.T) *domain.Object { return nil },
			status:     `{"phase":"Ready"}`,
			wantReason: domain.ReasonNotFound,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.state(t)
			ref := tc.ref
			if ref.Kind == "" {
				ref = refOf("Tenant", "", "t1")
			}
			body := &domain.Object{Status: json.RawMessage(tc.status)}
			if tc.status == "<state>" {
				body.Status = append(json.RawMessage(nil), st.Status...)
			}
			body.Metadata.Labels = tc.labels
			before := snapshot(st)
			evs, err := domain.Decide(st, command(domain.OpUpdateStatus, ref, body))
			require.Equal(t, before, st, "Decide must not modify the state")
			if tc.wantReason != "" {
				require.Equal(t, tc.wantReason, domain.ReasonOf(err), "error: %v", err)
				require.Empty(t, evs)
				if tc.wantFields != nil {
					require.Equal(t, sorted(tc.wantFields), errFields(t, err))
				}
				return
			}
			require.NoError(t, err)
			if tc.wantStatus == "" {
				if len(evs) > 0 {
					t.Fatalf("want no events, got %s with status %s (state status %s)", evs[0].Type, evs[0].Object.Status, st.Status)
				}
				return
			}
			require.Len(t, evs, 1)
			requireEvent(t, evs[0], domain.MustKind(ref.Kind).Kind+"StatusUpdated", domain.ActionUpdated)
			o := evs[0].Object
			require.JSONEq(t, tc.wantStatus, string(o.Status))
			require.Equal(t, st.Spec, o.Spec)
			require.Equal(t, st.Metadata.Generation, o.Metadata.Generation, "a status write does not bump generation")
			require.Equal(t, st.Metadata.Labels, o.Metadata.Labels)
		})
	}
}

func TestEvolve(t *testing.T) {
	created, err := domain.Decide(nil, command(domain.OpCreate, refOf("NodeGroup", "t1", "workers"), func() *domain.Object {
		o := newObject("NodeGroup", workerSpec)
		o.Metadata.Labels = map[string]string{"a": "b"}
		o.Metadata.Annotations = map[string]string{"c": "d"}
		o.Metadata.Finalizers = []string{"rezuscloud.io/drain"}
		return o
	}()))
	require.NoError(t, err)
	require.Len(t, created, 1)

	t.Run("sets resourceVersion to the sequence", func(t *testing.T) {
		tests := []struct {
			seq  uint64
			want string
		}{{1, "1"}, {42, "42"}, {18446744073709551615, "18446744073709551615"}}
		for _, tc := range tests {
			st := domain.Evolve(nil, &created[0], tc.seq)
			require.NotNil(t, st)
			require.Equal(t, tc.want, st.Metadata.ResourceVersion)
			require.Empty(t, created[0].Object.Metadata.ResourceVersion, "the event is not changed")
		}
	})

	t.Run("returns nil for Deleted", func(t *testing.T) {
		st := domain.Evolve(nil, &created[0], 3)
		evs, err := domain.Decide(st, command(domain.OpUpdate, refOf("NodeGroup", "t1", "workers"), func() *domain.Object {
			b := bodyOf(st)
			b.Metadata.Finalizers = nil
			return b
		}()))
		require.NoError(t, err)
		require.Len(t, evs, 1)
		st = domain.Evolve(st, &evs[0], 4)
		evs, err = domain.Decide(st, command(domain.OpDelete, refOf("NodeGroup", "t1", "workers"), nil))
		require.NoError(t, err)
		require.Len(t, evs, 1)
		require.Equal(t, domain.ActionDeleted, evs[0].Action)
		require.Nil(t, domain.Evolve(st, &evs[0], 5))
	})

	t.Run("does not alias the event's object", func(t *testing.T) {
		ev := created[0]
		want := ev.Object.DeepCopy()
		st := domain.Evolve(nil, &ev, 1)
		st.Metadata.Labels["a"] = "changed"
		st.Metadata.Annotations["c"] = "changed"
		st.Metadata.Finalizers[0] = "changed"
		*st.Metadata.CreationTimestamp = st.Metadata.CreationTimestamp.Add(time.Hour)
		for i := range st.Spec {
			st.Spec[i] = ' '
		}
		st.Metadata.Name = "changed"
		require.Equal(t, want, ev.Object)
	})

	t.Run("a whole life", func(t *testing.T) {
		ref := refOf("Tenant", "", "life")
		var st *domain.Object
		var seq uint64
		apply := func(cmd domain.Command, wantType string) {
			t.Helper()
			evs, err := domain.Decide(st, cmd)
			require.NoError(t, err)
			require.Len(t, evs, 1)
			require.Equal(t, wantType, evs[0].Type)
			seq++
			st = domain.Evolve(st, &evs[0], seq)
		}
		in := newObject("Tenant", `{}`)
		in.Metadata.Finalizers = []string{"rezuscloud.io/destroy"}
		apply(command(domain.OpCreate, ref, in), "TenantCreated")
		require.Equal(t, "1", st.Metadata.ResourceVersion)

		up := bodyOf(st)
		up.Spec = json.RawMessage(`{"kubernetesVersion":"1.36.1"}`)
		cmd := command(domain.OpUpdate, ref, up)
		cmd.ExpectedVersion = "1"
		apply(cmd, "TenantUpdated")
		require.Equal(t, int64(2), st.Metadata.Generation)

		// The old version is now stale.
		cmd.ExpectedVersion = "1"
		_, err := domain.Decide(st, cmd)
		require.True(t, domain.IsConflict(err))

		apply(command(domain.OpDelete, ref, nil), "TenantDeletionRequested")
		require.True(t, st.Terminating())
		require.Equal(t, "3", st.Metadata.ResourceVersion)

		done := bodyOf(st)
		done.Metadata.Finalizers = nil
		evs, err := domain.Decide(st, command(domain.OpUpdate, ref, done))
		require.NoError(t, err)
		require.Len(t, evs, 1)
		require.Equal(t, "TenantDeleted", evs[0].Type)
		require.Nil(t, domain.Evolve(st, &evs[0], 4))
	})
}

func TestErrorStatusCodes(t *testing.T) {
	tests := []struct {
		err  error
		code int
	}{
		{domain.NewNotFound("Tenant", "t1"), http.StatusNotFound},
		{domain.NewAlreadyExists("Tenant", "t1"), http.StatusConflict},
		{domain.NewConflict("Tenant", "t1", "stale"), http.StatusConflict},
		{domain.NewInvalid("Tenant", "t1", []domain.Cause{{Field: "spec", Message: "bad"}}), http.StatusUnprocessableEntity},
		{domain.NewBadRequest("bad"), http.StatusBadRequest},
	}
	for _, tc := range tests {
		t.Run(string(domain.ReasonOf(tc.err)), func(t *testing.T) {
			s := domain.StatusOf(tc.err)
			require.Equal(t, tc.code, s.Code)
			require.Equal(t, "Status", s.Kind)
			require.Equal(t, "Failure", s.Status)
		})
	}
}
