package eventstore_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/eventstore"
)

func sealAll(t *testing.T, key []byte, context string, plain []byte) []byte {
	t.Helper()
	r, err := eventstore.SealStream(key, context, iotest.HalfReader(bytes.NewReader(plain)))
	require.NoError(t, err)
	out, err := io.ReadAll(r)
	require.NoError(t, err)
	return out
}

func openAll(key []byte, context string, sealed []byte) ([]byte, error) {
	return io.ReadAll(iotest.OneByteReader(eventstore.OpenStream(key, context, bytes.NewReader(sealed))))
}

// TestSealedStreamRoundTrip: content of every length around the chunk size
// comes back as it went in, and the sealed form is as long as
// SealedStreamOverhead says.
func TestSealedStreamRoundTrip(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	const chunk = 64 << 10
	for _, n := range []int{0, 1, chunk - 1, chunk, chunk + 1, 3 * chunk, 3*chunk + 5} {
		plain := make([]byte, n)
		_, _ = rand.Read(plain)
		sealed := sealAll(t, key, "acme/b/1", plain)
		require.Equal(t, int64(n)+eventstore.SealedStreamOverhead(int64(n)), int64(len(sealed)), "length %d", n)
		got, err := openAll(key, "acme/b/1", sealed)
		require.NoError(t, err, "length %d", n)
		require.True(t, bytes.Equal(plain, got), "length %d", n)
	}
}

// TestSealedStreamRefusesDamage: an altered byte, reordered chunks, a stream
// cut at a chunk boundary or within a chunk, another key and another
// context all fail with ErrSealedStreamDamaged, and no content of a chunk
// that fails is handed out.
func TestSealedStreamRefusesDamage(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	const chunk = 64 << 10
	const head = 23 + 32
	const sealedChunk = chunk + 16
	plain := make([]byte, 3*chunk+100)
	_, _ = rand.Read(plain)
	sealed := sealAll(t, key, "acme/b/1", plain)

	flip := bytes.Clone(sealed)
	flip[head+sealedChunk+10] ^= 1
	swap := bytes.Clone(sealed)
	copy(swap[head:], sealed[head+sealedChunk:head+2*sealedChunk])
	copy(swap[head+sealedChunk:], sealed[head:head+sealedChunk])
	badMagic := bytes.Clone(sealed)
	badMagic[0] = 'x'

	cases := []struct {
		name    string
		key     []byte
		context string
		sealed  []byte
		want    string
		// good is how much content comes out before the failure.
		good int
	}{
		{"altered byte", key, "acme/b/1", flip, "chunk 1 fails authentication", chunk},
		{"reordered chunks", key, "acme/b/1", swap, "chunk 0 fails authentication", 0},
		{"cut at a chunk boundary", key, "acme/b/1", sealed[:head+3*sealedChunk], "truncated: chunk 2 was not sealed as the final one", 2 * chunk},
		{"cut after a whole chunk, at EOF", key, "acme/b/1", sealed[:head+sealedChunk], "truncated", 0},
		{"cut within a chunk", key, "acme/b/1", sealed[:head+sealedChunk+100], "chunk 1 fails authentication", chunk},
		{"cut within the header", key, "acme/b/1", sealed[:10], "ends within its header", 0},
		{"cut after the header", key, "acme/b/1", sealed[:head], "truncated", 0},
		{"not a sealed stream", key, "acme/b/1", badMagic, "not a sealed stream", 0},
		{"another key", bytes.Repeat([]byte{8}, 32), "acme/b/1", sealed, "chunk 0 fails authentication", 0},
		{"another object", key, "acme/b/2", sealed, "chunk 0 fails authentication", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := openAll(tc.key, tc.context, tc.sealed)
			require.Error(t, err)
			require.True(t, errors.Is(err, eventstore.ErrSealedStreamDamaged), "%v", err)
			require.Contains(t, err.Error(), tc.want)
			require.Len(t, got, tc.good)
			require.True(t, bytes.Equal(plain[:tc.good], got))
		})
	}
}

// TestSealStreamPassesReadErrors: a source that fails makes the sealed stream fail.
func TestSealStreamPassesReadErrors(t *testing.T) {
	boom := errors.New("boom")
	r, err := eventstore.SealStream(bytes.Repeat([]byte{7}, 32), "x", io.MultiReader(bytes.NewReader(make([]byte, 100<<10)), iotest.ErrReader(boom)))
	require.NoError(t, err)
	_, err = io.ReadAll(r)
	require.ErrorIs(t, err, boom)
}
