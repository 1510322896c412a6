package eventstore_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
)

func TestUpdateStatus(t *testing.T) {
	env := eventstoretest.Start(t)
	ctx := testCtx(t)
	ref := domain.TenantRef("acme")
	mustExecute(t, ctx, env.Store, createCmd(ref, "uid-acme"))
	w := eventstore.StatusWriter{Store: env.Store, Actor: domain.ActorApplyWorker, Now: func() time.Time { return now }}

	res, err := eventstore.UpdateStatus(ctx, w, ref, func(obj *domain.Object, st *domain.TenantStatus) (bool, error) {
		require.Equal(t, int64(1), obj.Metadata.Generation)
		st.Phase = "Ready"
		return true, nil
	})
	require.NoError(t, err)
	require.Len(t, res.Events, 1)
	require.Equal(t, domain.ActorApplyWorker, res.Events[0].Actor)
	var got domain.TenantStatus
	require.NoError(t, json.Unmarshal(res.Object.Status, &got))
	require.Equal(t, "Ready", got.Phase)

	// Unchanged: no event; the mutation starts from the stored status.
	res, err = eventstore.UpdateStatus(ctx, w, ref, func(_ *domain.Object, st *domain.TenantStatus) (bool, error) {
		require.Equal(t, "Ready", st.Phase)
		return false, nil
	})
	require.NoError(t, err)
	require.Empty(t, res.Events)

	_, err = eventstore.UpdateStatus(ctx, w, domain.TenantRef("nope"), func(*domain.Object, *domain.TenantStatus) (bool, error) {
		t.Fatal("mutate runs only on an existing object")
		return false, nil
	})
	require.True(t, domain.IsNotFound(err), "%v", err)
}

// A controller that changes a part of a status another owns is refused,
// naming the part and its owner, and nothing is appended.
func TestUpdateStatusRefusesAnotherOwnersField(t *testing.T) {
	env := eventstoretest.Start(t)
	ctx := testCtx(t)
	ref := domain.TenantRef("acme")
	mustExecute(t, ctx, env.Store, createCmd(ref, "uid-acme"))
	w := eventstore.StatusWriter{Store: env.Store, Actor: domain.ActorHealth, Now: func() time.Time { return now }}

	_, err := eventstore.UpdateStatus(ctx, w, ref, func(_ *domain.Object, st *domain.TenantStatus) (bool, error) {
		st.Machines.Total = 3
		st.EndpointAddress = "10.0.0.1"
		return true, nil
	})
	require.Equal(t, domain.ReasonForbidden, domain.ReasonOf(err), "%v", err)
	var se *domain.Error
	require.ErrorAs(t, err, &se)
	require.Equal(t, []domain.Cause{{Field: "status.endpointAddress", Type: domain.CauseForbidden,
		Message: "is written by " + domain.ActorApplyWorker + ", not " + domain.ActorHealth}}, se.Causes)

	rec, err := env.Store.Load(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, "TenantCreated", rec.Event.Type, "nothing was appended")
}
