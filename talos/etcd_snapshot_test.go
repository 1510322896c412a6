package talos_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rezuscloud/rezuscloud/emulator/talostest"
	"github.com/rezuscloud/rezuscloud/talos"
)

// sealed is content followed by its SHA-256, as etcd ends a snapshot.
func sealed(content []byte) []byte {
	sum := sha256.Sum256(content)
	return append(bytes.Clone(content), sum[:]...)
}

func TestSnapshotReader(t *testing.T) {
	t.Parallel()
	good := sealed(bytes.Repeat([]byte("etcd bolt page "), 5000))
	altered := bytes.Clone(good)
	altered[100] ^= 1
	for _, tc := range []struct {
		name string
		in   []byte
		ok   bool
	}{
		{"whole", good, true},
		{"empty content", sealed(nil), true},
		{"cut short", good[:len(good)-1], false},
		{"cut in the content", good[:1000], false},
		{"altered", altered, false},
		{"shorter than a hash", good[:10], false},
		{"nothing", []byte{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// One byte at a time and in big reads: the hash must not depend on how reads fall.
			for _, r := range []io.Reader{bytes.NewReader(tc.in), iotest.OneByteReader(bytes.NewReader(tc.in))} {
				got, err := io.ReadAll(talos.NewSnapshotReader(r))
				require.Equal(t, tc.in, got, "passed through unchanged")
				if tc.ok {
					require.NoError(t, err)
				} else {
					require.ErrorIs(t, err, talos.ErrSnapshotDamaged)
				}
			}
		})
	}
}

// TestEtcdSnapshotAndRecover backs up an emulated cluster's etcd through
// NodeAPI, wipes it, and recovers it: keys and revision are back.
func TestEtcdSnapshotAndRecover(t *testing.T) {
	c := talostest.Start(t, 2, 0)
	b, err := c.PKI.Bundle(c.Ctx, c.Tenant)
	require.NoError(t, err)
	cp1, err := c.Em.Get("cp-1")
	require.NoError(t, err)
	cp2, err := c.Em.Get("cp-2")
	require.NoError(t, err)
	_, err = c.Em.PutEtcdKey(cp1.ClusterID, "/registry/a", "1")
	require.NoError(t, err)
	before, err := c.Em.EtcdData(cp1.ClusterID)
	require.NoError(t, err)

	api := talos.NodeAPI{}
	rc, err := api.EtcdSnapshot(c.Ctx, b, cp2.Address)
	require.NoError(t, err)
	snap, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	require.EqualValues(t, before.SnapshotSize, len(snap))

	require.NoError(t, c.Em.WipeEtcd(cp1.ClusterID))
	rc, err = api.EtcdSnapshot(c.Ctx, b, cp2.Address)
	require.NoError(t, err)
	_, err = io.ReadAll(rc)
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "etcd is down: %v", err)
	require.NoError(t, rc.Close())

	require.NoError(t, api.EtcdRecover(c.Ctx, b, cp1.Address, bytes.NewReader(snap)))
	after, err := c.Em.EtcdData(cp1.ClusterID)
	require.NoError(t, err)
	require.Equal(t, before, after)
	ms, err := api.EtcdMembers(c.Ctx, b, cp2.Address)
	require.NoError(t, err)
	require.Len(t, ms, 2)

	err = api.EtcdRecover(c.Ctx, b, cp1.Address, bytes.NewReader(snap))
	require.Equal(t, codes.AlreadyExists, status.Code(err), "a healthy cluster is not recovered over: %v", err)
	ctx, cancel := context.WithCancel(c.Ctx)
	cancel()
	require.Error(t, api.EtcdRecover(ctx, b, cp1.Address, bytes.NewReader(snap)))
}
