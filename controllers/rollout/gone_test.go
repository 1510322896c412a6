package rollout

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/projections"
)

// TestGone: a tenant is gone when it is not in the read model or is being
// deleted; one whose annotation is named deletionTimestamp (decoded to
// see) is not.
func TestGone(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	es := eventstoretest.Start(t)
	cache := projections.NewCache(es.Store, nil)
	done := make(chan error, 1)
	go func() { done <- cache.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	execute := func(cmd domain.Command) {
		t.Helper()
		cmd.Actor, cmd.Now, cmd.NewUID = "test", time.Now(), uuid.NewString()
		res, err := es.Store.Execute(ctx, cmd, eventstore.UpdateOptions{Retries: 5})
		require.NoError(t, err)
		require.NoError(t, cache.WaitFor(ctx, res.Seq))
	}
	create := func(meta domain.ObjectMeta) {
		execute(domain.Command{Op: domain.OpCreate, Ref: domain.TenantRef(meta.Name),
			Object: &domain.Object{Metadata: meta, Spec: json.RawMessage(`{}`)}})
	}
	create(domain.ObjectMeta{Name: "live"})
	create(domain.ObjectMeta{Name: "wordy", Annotations: map[string]string{"deletionTimestamp": "soon"}})
	create(domain.ObjectMeta{Name: "leaving", Finalizers: []string{"test.rezuscloud.io/hold"}})
	execute(domain.Command{Op: domain.OpDelete, Ref: domain.TenantRef("leaving")})

	c := &Controller{cfg: Config{Cache: cache}}
	for tenant, want := range map[string]bool{"live": false, "wordy": false, "leaving": true, "missing": true} {
		require.Equal(t, want, c.gone(tenant), tenant)
	}
}
