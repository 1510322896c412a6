package projections_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/projections"
)

// TestPoisonRecordsDoNotStopTheReadModel: issue 27, finding 5. A forged
// record in the event stream ended the cache ("event N has no object"), the
// server with it, and every restart the same way. The running cache and
// projector skip it and go on; a cache started after it (a restart) gets
// ready; a projector started after it moves past it.
func TestPoisonRecordsDoNotStopTheReadModel(t *testing.T) {
	env := eventstoretest.Start(t)
	ctx := context.Background()
	env.Create(t, domain.TenantKind, "", "before", `{}`)
	running := startCache(t, env.Store)
	p := projections.NewProjector(env.Store, nil, "test")
	run(t, p.Run)

	_, err := env.Store.JetStream().Publish(ctx, domain.SubjectPrefix+".tenant._.forged", []byte("{}"))
	require.NoError(t, err)
	last := env.Create(t, domain.TenantKind, "", "after", `{}`)

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, running.WaitFor(wctx, last), "the running cache stopped at the poison record")
	_, ok := running.Get(domain.TenantRef("after"))
	require.True(t, ok, "the running cache went on past the poison record")
	require.Eventually(t, func() bool { return p.Checkpoint() >= last }, 10*time.Second, 5*time.Millisecond,
		"the projector went on past the poison record")

	restarted := startCache(t, env.Store)
	for _, name := range []string{"before", "after"} {
		_, ok := restarted.Get(domain.TenantRef(name))
		require.True(t, ok, name)
	}
	_, ok = restarted.Get(domain.TenantRef("forged"))
	require.False(t, ok)
	require.GreaterOrEqual(t, env.Store.PoisonRecords(), uint64(2))
}
