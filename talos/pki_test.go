package talos_test

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
)

// countingSecrets counts the bundles stored through it.
type countingSecrets struct {
	talos.SecretStore
	creates atomic.Int32
}

func (c *countingSecrets) Create(ctx context.Context, key string, value []byte) (bool, error) {
	c.creates.Add(1)
	return c.SecretStore.Create(ctx, key, value)
}

// The controllers that need a tenant's missing bundle at once (the pass, the
// config controller, the apply worker) share one generation: its RSA keys
// are made once, and every caller gets the bundle that was stored.
func TestBundleIsGeneratedOnceForConcurrentCallers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	env := eventstoretest.Start(t)
	cache := projections.NewCache(env.Store, nil)
	cacheDone := make(chan error, 1)
	go func() { cacheDone <- cache.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-cacheDone })
	plain, err := eventstore.OpenSecrets(ctx, env.Store)
	require.NoError(t, err)
	sealed, err := eventstore.OpenSealedSecrets(ctx, plain, eventstore.SealerConfig{KeyFile: filepath.Join(t.TempDir(), "secrets.key")})
	require.NoError(t, err)
	store := &countingSecrets{SecretStore: sealed}
	pki := talos.NewPKI(talos.PKIConfig{Cache: cache, Secrets: store})

	for _, name := range []string{"acme", "beta"} {
		_, err := env.Store.Execute(ctx, domain.Command{Op: domain.OpCreate, Ref: domain.TenantRef(name),
			Object: &domain.Object{Metadata: domain.ObjectMeta{Name: name}, Spec: []byte(`{}`)},
			Actor:  "test", Now: time.Now(), NewUID: uuid.NewString()}, eventstore.UpdateOptions{})
		require.NoError(t, err)
	}
	require.NoError(t, cache.Sync(ctx))

	const callers = 6
	keys := make([]string, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tenant := []string{"acme", "beta"}[i%2]
			b, err := pki.Bundle(ctx, tenant)
			if err != nil {
				t.Error(err)
				return
			}
			keys[i] = string(b.Certs.OS.Key)
		}()
	}
	wg.Wait()
	require.EqualValues(t, 2, store.creates.Load(), "one generation per tenant")
	for i := 2; i < callers; i++ {
		require.Equal(t, keys[i%2], keys[i], "every caller of a tenant has the bundle stored")
	}
	require.NotEqual(t, keys[0], keys[1], "tenants have bundles of their own")
	again, err := pki.Bundle(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, keys[0], string(again.Certs.OS.Key))
}
