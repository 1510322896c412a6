package eventstore_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
)

const pemText = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIG...\n-----END EC PRIVATE KEY-----\n"

// rawValues reads every value of the secrets bucket as stored, bypassing sealing.
func rawValues(t *testing.T, env *eventstoretest.Env) map[string]string {
	t.Helper()
	ctx := testCtx(t)
	js, err := jetstream.New(env.Conn)
	require.NoError(t, err)
	kv, err := js.KeyValue(ctx, eventstore.SecretsBucket)
	require.NoError(t, err)
	keys, err := kv.Keys(ctx)
	require.NoError(t, err)
	out := map[string]string{}
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		require.NoError(t, err)
		out[k] = string(e.Value())
	}
	return out
}

func TestSealedSecrets(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   func(dir string) eventstore.SealerConfig
		wrong func(dir string) eventstore.SealerConfig
	}{
		{
			name: "passphrase",
			cfg: func(string) eventstore.SealerConfig {
				return eventstore.SealerConfig{Passphrase: "correct horse", Iterations: 1000}
			},
			wrong: func(string) eventstore.SealerConfig {
				return eventstore.SealerConfig{Passphrase: "wrong horse", Iterations: 1000}
			},
		},
		{
			name: "key file",
			cfg: func(dir string) eventstore.SealerConfig {
				return eventstore.SealerConfig{KeyFile: filepath.Join(dir, "secrets.key")}
			},
			wrong: func(dir string) eventstore.SealerConfig {
				return eventstore.SealerConfig{KeyFile: filepath.Join(dir, "other.key")}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			env := eventstoretest.Start(t)
			dir := t.TempDir()
			plain, err := eventstore.OpenSecrets(ctx, env.Store)
			require.NoError(t, err)
			sealed, err := eventstore.OpenSealedSecrets(ctx, plain, tc.cfg(dir))
			require.NoError(t, err)

			require.NoError(t, sealed.Put(ctx, "tenant-pki.acme", []byte(pemText)))
			created, err := sealed.Create(ctx, "tenant-pki.beta", []byte("plaintext-token-value"))
			require.NoError(t, err)
			require.True(t, created)
			created, err = sealed.Create(ctx, "tenant-pki.beta", []byte("other"))
			require.NoError(t, err)
			require.False(t, created)

			got, err := sealed.Get(ctx, "tenant-pki.acme")
			require.NoError(t, err)
			require.Equal(t, pemText, string(got))
			got, err = sealed.Get(ctx, "tenant-pki.beta")
			require.NoError(t, err)
			require.Equal(t, "plaintext-token-value", string(got))
			_, err = sealed.Get(ctx, "tenant-pki.none")
			require.ErrorIs(t, err, eventstore.ErrSecretNotFound)

			keys, err := sealed.Keys(ctx, "tenant-pki.")
			require.NoError(t, err)
			require.ElementsMatch(t, []string{"tenant-pki.acme", "tenant-pki.beta"}, keys)
			// A deleted secret is not listed; another prefix is not either.
			require.NoError(t, sealed.Put(ctx, "tenant-pki.gone", []byte("x")))
			require.NoError(t, sealed.Put(ctx, "tenant-pkiother.x", []byte("x")))
			require.NoError(t, sealed.Delete(ctx, "tenant-pki.gone"))
			keys, err = sealed.Keys(ctx, "tenant-pki.")
			require.NoError(t, err)
			require.ElementsMatch(t, []string{"tenant-pki.acme", "tenant-pki.beta"}, keys)
			_, err = sealed.Keys(ctx, "tenant-pki")
			require.ErrorContains(t, err, "must end in a dot")

			for k, v := range rawValues(t, env) {
				require.NotContains(t, v, "-----BEGIN", k)
				require.NotContains(t, v, "plaintext-token-value", k)
				require.NotContains(t, v, "BEGIN", k)
			}

			// A value moved under another key does not open.
			raw := rawValues(t, env)["tenant-pki.acme"]
			require.NoError(t, plain.Put(ctx, "tenant-pki.moved", []byte(raw)))
			_, err = sealed.Get(ctx, "tenant-pki.moved")
			require.ErrorIs(t, err, eventstore.ErrWrongSealKey)

			// The wrong key refuses to start rather than read garbage.
			_, err = eventstore.OpenSealedSecrets(ctx, plain, tc.wrong(dir))
			require.ErrorIs(t, err, eventstore.ErrWrongSealKey)

			// The right key opens again after a restart.
			again, err := eventstore.OpenSealedSecrets(ctx, plain, tc.cfg(dir))
			require.NoError(t, err)
			got, err = again.Get(ctx, "tenant-pki.acme")
			require.NoError(t, err)
			require.Equal(t, pemText, string(got))

			require.NoError(t, sealed.Delete(ctx, "tenant-pki.acme"))
			_, err = sealed.Get(ctx, "tenant-pki.acme")
			require.ErrorIs(t, err, eventstore.ErrSecretNotFound)

			if tc.name == "key file" {
				fi, err := os.Stat(filepath.Join(dir, "secrets.key"))
				require.NoError(t, err)
				require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
				require.EqualValues(t, 32, fi.Size())
			}
		})
	}
}

func TestSealedSecretsNeedsAKey(t *testing.T) {
	ctx := testCtx(t)
	env := eventstoretest.Start(t)
	plain, err := eventstore.OpenSecrets(ctx, env.Store)
	require.NoError(t, err)
	_, err = eventstore.OpenSealedSecrets(ctx, plain, eventstore.SealerConfig{})
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "passphrase or a key file"), err.Error())
}

// TestSealKeyFile covers the key file outside the data dir
// (--secrets-key-file): a file others may read, or one not holding a key, is
// refused; a key left in the data dir is moved to the key file, and a key
// file holding another key is refused rather than chosen between.
func TestSealKeyFile(t *testing.T) {
	ctx := testCtx(t)
	env := eventstoretest.Start(t)
	plain, err := eventstore.OpenSecrets(ctx, env.Store)
	require.NoError(t, err)
	dataDir, keyDir := t.TempDir(), t.TempDir()
	inDataDir, outside := filepath.Join(dataDir, "secrets.key"), filepath.Join(keyDir, "rezus.key")

	// A server that kept its key in the data dir seals a secret.
	sealed, err := eventstore.OpenSealedSecrets(ctx, plain, eventstore.SealerConfig{KeyFile: inDataDir})
	require.NoError(t, err)
	require.NoError(t, sealed.Put(ctx, "tenant-pki.acme", []byte(pemText)))
	key, err := os.ReadFile(inDataDir)
	require.NoError(t, err)

	for _, tc := range []struct {
		name    string
		content []byte
		mode    os.FileMode
		want    string
	}{
		{"readable by the group", key, 0o640, "mode 0640"},
		{"readable by anyone", key, 0o644, "mode 0644"},
		{"executable", key, 0o700, "mode 0700"},
		{"not a key", []byte("short"), 0o600, "holds 5 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := filepath.Join(t.TempDir(), "bad.key")
			require.NoError(t, os.WriteFile(bad, tc.content, 0o600))
			require.NoError(t, os.Chmod(bad, tc.mode))
			_, err := eventstore.OpenSealedSecrets(ctx, plain, eventstore.SealerConfig{KeyFile: bad, MoveKeyFrom: inDataDir})
			require.ErrorContains(t, err, tc.want)
			_, err = os.Stat(inDataDir)
			require.NoError(t, err, "nothing moved onto a refused key file")
		})
	}

	t.Run("another key in the key file", func(t *testing.T) {
		other := filepath.Join(t.TempDir(), "other.key")
		require.NoError(t, os.WriteFile(other, []byte(strings.Repeat("k", 32)), 0o600))
		_, err := eventstore.OpenSealedSecrets(ctx, plain, eventstore.SealerConfig{KeyFile: other, MoveKeyFrom: inDataDir})
		require.ErrorContains(t, err, "hold a sealing key and they differ")
		_, err = os.Stat(inDataDir)
		require.NoError(t, err, "the data dir's key is kept when refused")
	})

	t.Run("moved out of the data dir", func(t *testing.T) {
		moved, err := eventstore.OpenSealedSecrets(ctx, plain, eventstore.SealerConfig{KeyFile: outside, MoveKeyFrom: inDataDir})
		require.NoError(t, err)
		got, err := moved.Get(ctx, "tenant-pki.acme")
		require.NoError(t, err)
		require.Equal(t, pemText, string(got))
		_, err = os.Stat(inDataDir)
		require.ErrorIs(t, err, os.ErrNotExist, "the data dir no longer holds the key")
		fi, err := os.Stat(outside)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
		moved2, err := os.ReadFile(outside)
		require.NoError(t, err)
		require.Equal(t, key, moved2)
		// The next start reads it there and writes nothing in the data dir.
		_, err = eventstore.OpenSealedSecrets(ctx, plain, eventstore.SealerConfig{KeyFile: outside, MoveKeyFrom: inDataDir})
		require.NoError(t, err)
		_, err = os.Stat(inDataDir)
		require.ErrorIs(t, err, os.ErrNotExist)
	})
}
