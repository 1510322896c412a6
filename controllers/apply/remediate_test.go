package apply

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/projections"
)

// TestDecideReplacement: a run resumed after a crash replaces a machine at
// most once — the state written since the replacement began means the new
// machine is there.
func TestDecideReplacement(t *testing.T) {
	for _, tc := range []struct {
		name       string
		began, now int64
		inState    bool
		want       int
	}{
		{"first run", 0, 7, true, replaceNow},
		{"not in the state, never begun", 0, 7, false, replaceGone},
		{"resumed, nothing written since", 7, 7, true, replaceNow},
		{"resumed, the replacement written", 7, 9, true, replaceWritten},
		{"resumed, destroyed but not built", 7, 8, false, replaceDestroyed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, decideReplacement(tc.began, tc.now, tc.inState))
		})
	}
}

// TestRemediationStepsNameTheReplica: a step the apply worker records on a
// Remediation names the replica that ran it, also when another replica ran
// the step before (a replacement taken up after a failover).
func TestRemediationStepsNameTheReplica(t *testing.T) {
	env := eventstoretest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	cache := projections.NewCache(env.Store, nil)
	done := make(chan error, 1)
	go func() { done <- cache.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	w := NewWorker(Config{Store: env.Store, Cache: cache, Holder: "host-b-7"})

	ref := domain.ObjectRef(domain.RemediationKind, "acme", "w-1-1")
	spec := `{"nodeGroup":"workers","machine":"w-1","role":"worker","reason":"Unreachable","unhealthySince":"2026-05-01T10:00:00Z"}`
	for _, cmd := range []domain.Command{
		{Op: domain.OpCreate, Ref: ref, Object: &domain.Object{Metadata: domain.ObjectMeta{Name: "w-1-1", Tenant: "acme"}, Spec: json.RawMessage(spec)}},
		{Op: domain.OpUpdateStatus, Ref: ref, Object: &domain.Object{Status: json.RawMessage(`{"phase":"Replacing","replica":"host-a-42"}`)}},
	} {
		cmd.Actor, cmd.Now, cmd.NewUID = "test", time.Now(), "uid"
		res, err := env.Store.Execute(ctx, cmd, eventstore.UpdateOptions{})
		require.NoError(t, err)
		require.NoError(t, cache.WaitFor(ctx, res.Seq))
	}

	w.remediationStep(ctx, "acme", "w-1-1", domain.RemediationReplacing, "Drained", "")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		r, ok, err := projections.Get[domain.Remediation](cache, ref)
		require.NoError(ct, err)
		require.True(ct, ok)
		require.NotEmpty(ct, r.Status.Steps)
		assert.Equal(ct, "Drained", r.Status.Steps[len(r.Status.Steps)-1].Name)
		assert.Equal(ct, "host-b-7", r.Status.Replica)
	}, 10*time.Second, 5*time.Millisecond)
}
