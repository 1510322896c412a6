package eventstore_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/eventstore"
)

// TestMintedCredentialsReachTheServer: issue 27. The server's full-access
// credentials lay on disk in plain (`rezuscloud.creds`), rewritten at every
// start. A start now removes that file, and an operator mints short-lived
// ones when a tool needs them; they reach the application account's streams.
func TestMintedCredentialsReachTheServer(t *testing.T) {
	dir := t.TempDir()
	legacy := filepath.Join(dir, eventstore.KeysDir, "rezuscloud.creds")
	require.NoError(t, os.MkdirAll(filepath.Dir(legacy), 0o700))
	require.NoError(t, os.WriteFile(legacy, []byte("old"), 0o600))
	emb, err := eventstore.StartEmbedded(eventstore.EmbeddedConfig{DataDir: dir, Listen: "127.0.0.1:0"})
	require.NoError(t, err)
	defer emb.Shutdown(context.Background())
	_, err = os.Stat(legacy)
	require.ErrorIs(t, err, os.ErrNotExist, "the plain credentials of an earlier version are removed")
	nc, err := emb.Connect("test")
	require.NoError(t, err)
	_, err = eventstore.Open(context.Background(), nc, eventstore.Config{})
	require.NoError(t, err)
	nc.Close()

	creds, err := eventstore.MintCredentials(dir, "operator", time.Hour)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "op.creds")
	require.NoError(t, os.WriteFile(file, creds, 0o600))
	op, err := nats.Connect(emb.ClientURL(), nats.UserCredentials(file))
	require.NoError(t, err)
	defer op.Close()
	js, err := jetstream.New(op)
	require.NoError(t, err)
	_, err = js.Stream(context.Background(), eventstore.StreamName)
	require.NoError(t, err, "the minted user reads the application account's streams")

	_, err = eventstore.MintCredentials(dir, "operator", 0)
	require.Error(t, err)
	_, err = eventstore.MintCredentials(t.TempDir(), "operator", time.Hour)
	require.ErrorContains(t, err, "reading the account seed")
}
