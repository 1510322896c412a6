package talos_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/talos"
)

// notYet is a read model that has not applied the machine's create yet: on
// three replicas, the one running an apply may not have, a moment after the
// acknowledged create.
type notYet struct{}

func (notYet) Peek(domain.Ref) (*domain.Object, uint64) { return nil, 0 }

// The apply worker creates a machine and records its day-0 config at once;
// a hint that has not seen the create must not make that a NotFound
// (issue 47: "recording the config of machine cp-0: machine "cp-0" not
// found"). The store answers from the stream.
func TestConfigRecorderRecordsAMachineItsHintHasNotSeen(t *testing.T) {
	env := eventstoretest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	ref := domain.ObjectRef(domain.MachineKind, "acme", "cp-0")
	env.Create(t, domain.MachineKind, ref.Tenant, ref.Name, `{"nodeGroup":"cp","role":"controlplane"}`)
	rec := talos.ConfigRecorder{Store: env.Store, Actor: domain.ActorApplyWorker, Hint: notYet{},
		Now: func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }}

	require.NoError(t, rec.Applied(ctx, ref, "h1", talos.ReasonDay0, "booted with its config as user data"))
	m := loadMachine(t, ctx, env, ref)
	require.Equal(t, "h1", m.Metadata.Annotations[domain.AnnotationConfigHash])
	require.True(t, m.Status.ConfigUpToDate)
	require.Equal(t, talos.ReasonDay0, domain.FindCondition(m.Status.Conditions, domain.ConditionConfigApplied).Reason)

	require.NoError(t, rec.Failed(ctx, ref, talos.ReasonApplyFailed, "refused"))
	m = loadMachine(t, ctx, env, ref)
	require.False(t, m.Status.ConfigUpToDate)
	require.Equal(t, "False", domain.FindCondition(m.Status.Conditions, domain.ConditionConfigApplied).Status)
}

func loadMachine(t *testing.T, ctx context.Context, env *eventstoretest.Env, ref domain.Ref) domain.Machine {
	t.Helper()
	r, err := env.Store.Load(ctx, ref)
	require.NoError(t, err)
	require.NotNil(t, r)
	raw, err := json.Marshal(r.State())
	require.NoError(t, err)
	var m domain.Machine
	require.NoError(t, json.Unmarshal(raw, &m))
	return m
}
