package domain_test

import (
	"encoding/json"
	"sort"
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
	tenantDefaultSpec = `{"talosVersion":"v1.13.0","kubernetesVersion":"v1.35.4","controlPlane":{},` +
		`"network":{"podSubnets":["10.244.0.0/16"],"serviceSubnets":["10.96.0.0/12"],"dnsDomain":"cluster.local"}}`
	// tenantCreatedSpec is tenantDefaultSpec as a create stores it: with the
	// default backup schedule of a new tenant.
	tenantCreatedSpec = `{"talosVersion":"v1.13.0","kubernetesVersion":"v1.35.4","controlPlane":{},` +
		`"network":{"podSubnets":["10.244.0.0/16"],"serviceSubnets":["10.96.0.0/12"],"dnsDomain":"cluster.local"},` +
		`"etcdBackup":{"interval":"24h","keep":7}}`
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
