package eventstore_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
)

// Issue 13, defect 5: the audit stream is bounded in size as well as in age
// (the oldest records go first), and a changed bound is applied to the
// existing stream on start.
func TestAuditStreamMaxBytes(t *testing.T) {
	ctx := testCtx(t)
	env := eventstoretest.Start(t)
	config := func() jetstream.StreamConfig {
		t.Helper()
		st, err := env.Store.JetStream().Stream(ctx, eventstore.AuditStreamName)
		require.NoError(t, err)
		info, err := st.Info(ctx)
		require.NoError(t, err)
		return info.Config
	}
	openAudit(t, ctx, env, eventstore.AuditConfig{})
	cfg := config()
	require.Equal(t, int64(eventstore.DefaultAuditMaxBytes), cfg.MaxBytes)
	require.Equal(t, int64(1<<30), cfg.MaxBytes, "1 GiB by default")
	require.Equal(t, jetstream.DiscardOld, cfg.Discard)
	require.Equal(t, eventstore.DefaultAuditRetention, cfg.MaxAge)

	openAudit(t, ctx, env, eventstore.AuditConfig{MaxBytes: 8 << 20})
	require.Equal(t, int64(8<<20), config().MaxBytes, "applied to the existing stream")

	for _, bad := range []int64{-1, 1000} {
		_, err := eventstore.OpenAudit(ctx, env.Store, eventstore.AuditConfig{MaxBytes: bad})
		require.Error(t, err, "%d", bad)
	}
}
