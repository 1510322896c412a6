package eventstore_test

import (
	"encoding/hex"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
)

// TestStateKeysAreSealedAndStable: a tenant's generated state key is stored
// sealed (the raw bucket shows neither the key nor its hex), is the same on
// every later use and after a restart, differs between tenants, and is gone
// with DeleteStateKey (a new one is generated after).
func TestStateKeysAreSealedAndStable(t *testing.T) {
	env := eventstoretest.Start(t)
	ctx := testCtx(t)
	keyFile := filepath.Join(t.TempDir(), "secrets.key")
	open := func() *eventstore.StateKeys {
		plain, err := eventstore.OpenSecrets(ctx, env.Store)
		require.NoError(t, err)
		sealed, err := eventstore.OpenSealedSecrets(ctx, plain, eventstore.SealerConfig{KeyFile: keyFile})
		require.NoError(t, err)
		return eventstore.NewStateKeys(sealed)
	}
	keys := open()

	acme, err := keys.StateKey(ctx, "acme")
	require.NoError(t, err)
	require.Len(t, acme, 32)
	again, err := keys.StateKey(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, acme, again, "stable across applies")
	globex, err := keys.StateKey(ctx, "globex")
	require.NoError(t, err)
	require.NotEqual(t, acme, globex, "one key per tenant")

	raw := rawValues(t, env)
	stored, ok := raw["tfstate-key.acme"]
	require.True(t, ok, "the key is in the secrets bucket: %v", raw)
	require.True(t, strings.HasPrefix(stored, "rzs1:"), "stored sealed")
	require.NotContains(t, stored, string(acme), "not the key in clear")
	require.NotContains(t, stored, hex.EncodeToString(acme), "nor its hex")

	restarted, err := open().StateKey(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, acme, restarted, "stable across restarts")

	require.NoError(t, keys.DeleteStateKey(ctx, "acme"))
	require.NoError(t, keys.DeleteStateKey(ctx, "acme"), "deleting a missing key is not an error")
	_, ok = rawValues(t, env)["tfstate-key.acme"]
	require.False(t, ok, "the key is gone with the state")
	fresh, err := keys.StateKey(ctx, "acme")
	require.NoError(t, err)
	require.NotEqual(t, acme, fresh, "a tenant made again gets a new key")
	still, err := keys.StateKey(ctx, "globex")
	require.NoError(t, err)
	require.Equal(t, globex, still, "other tenants keep theirs")

	_, err = keys.StateKey(ctx, "Not_A_Tenant")
	require.Error(t, err)
}
