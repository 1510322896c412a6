package identity_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/identity"
	"github.com/rezuscloud/rezuscloud/projections"
)

// TestIdentitySecretsAreSealed gives the identity service a sealing store, as
// the server does, and checks the raw bucket holds neither a bcrypt hash nor
// the signing key in the clear.
func TestIdentitySecretsAreSealed(t *testing.T) {
	env := eventstoretest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cache := projections.NewCache(env.Store, nil)
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cache.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })

	plain, err := eventstore.OpenSecrets(ctx, env.Store)
	require.NoError(t, err)
	sealed, err := eventstore.OpenSealedSecrets(ctx, plain, eventstore.SealerConfig{KeyFile: filepath.Join(t.TempDir(), "secrets.key")})
	require.NoError(t, err)
	id, err := identity.NewService(ctx, identity.Config{Secrets: sealed, PasswordCost: bcrypt.MinCost}, env.Store, cache)
	require.NoError(t, err)
	for !cache.Ready() {
		time.Sleep(5 * time.Millisecond) // the read model replays an empty stream; nothing to wait on
	}
	created, err := id.Bootstrap(ctx, "a long enough admin password", "")
	require.NoError(t, err)
	require.True(t, created)
	ok, err := id.CheckPassword(ctx, "admin", "a long enough admin password")
	require.NoError(t, err)
	require.True(t, ok)

	key, err := sealed.Get(ctx, "session-signing-key")
	require.NoError(t, err)
	kv, err := env.Store.JetStream().KeyValue(ctx, eventstore.SecretsBucket)
	require.NoError(t, err)
	for _, k := range []string{"session-signing-key", "user-password.admin"} {
		e, err := kv.Get(ctx, k)
		require.NoError(t, err, k)
		require.NotContains(t, string(e.Value()), "$2a$", k)
		require.False(t, strings.Contains(string(e.Value()), string(key)), k)
	}
}
