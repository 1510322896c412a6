package emulator

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func snapshotBytes(t *testing.T, s *etcdState) []byte {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, writeSnapshot(&buf, s))
	size, err := s.snapshotSize()
	require.NoError(t, err)
	require.EqualValues(t, size, buf.Len(), "snapshotSize agrees with what is written")
	require.Equal(t, sha256.Size, buf.Len()%snapshotBlock, "sized like a bolt database and its hash, as talosctl checks")
	return buf.Bytes()
}

// TestSnapshotRoundTrip: a snapshot reads back as the state it was made of,
// the same state always gives the same bytes, and the last 32 bytes are the
// SHA-256 of the rest, as with real etcd.
func TestSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		s    etcdState
	}{
		{"fresh", etcdState{Cluster: "c", Revision: 1}},
		{"keys", etcdState{Cluster: "c", Revision: 7, Keys: map[string]string{"/registry/a": "1", "b": "ünïcode\n\"quoted\""}}},
		// Padding past several filler runs and not a multiple of the filler period.
		{"padded", etcdState{Cluster: "c", Revision: 3, Keys: map[string]string{"k": "v"}, Padding: 3*maxFillerRun + 1000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := snapshotBytes(t, &tc.s)
			require.Equal(t, b, snapshotBytes(t, &tc.s), "deterministic")
			sum := sha256.Sum256(b[:len(b)-sha256.Size])
			require.Equal(t, sum[:], b[len(b)-sha256.Size:])

			got, err := readSnapshot(bytes.NewReader(b))
			require.NoError(t, err)
			want := tc.s
			if want.Keys == nil {
				want.Keys = map[string]string{}
			}
			require.Equal(t, &want, got)
		})
	}
}

// TestSnapshotRefused: every kind of damage is refused as errSnapshot, never a panic.
func TestSnapshotRefused(t *testing.T) {
	t.Parallel()
	good := snapshotBytes(t, &etcdState{Cluster: "c", Revision: 5, Keys: map[string]string{"k": "v"}, Padding: 100_000})
	metaEnd := bytes.IndexByte(good, '\n') + 1
	metaEnd += bytes.IndexByte(good[metaEnd:], '\n') + 1
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 0x01
		return b
	}
	resealed := func(b []byte) []byte {
		sum := sha256.Sum256(b)
		return append(b, sum[:]...)
	}
	for name, b := range map[string][]byte{
		"empty":               nil,
		"truncated header":    good[:10],
		"truncated meta":      good[:metaEnd-5],
		"truncated padding":   good[:metaEnd+50_000],
		"truncated checksum":  good[:len(good)-1],
		"no checksum":         good[:len(good)-sha256.Size],
		"altered value":       flip(bytes.Index(good, []byte(`"v"`)) + 1),
		"altered padding":     flip(metaEnd + 1234),
		"altered checksum":    flip(len(good) - 1),
		"trailing bytes":      append(bytes.Clone(good), 0),
		"not a snapshot":      []byte("SQLite format 3\x00 and more bytes than the header"),
		"bad json, resealed":  resealed([]byte(snapshotMagic + "{nope\n")),
		"revision 0":          resealed([]byte(snapshotMagic + `{"cluster":"c","revision":0,"keys":{}}` + "\n")),
		"negative padding":    resealed([]byte(snapshotMagic + `{"cluster":"c","revision":1,"keys":{},"padding":-1}` + "\n")),
		"padding over limit":  resealed([]byte(snapshotMagic + `{"cluster":"c","revision":1,"keys":{},"padding":9999999999999}` + "\n")),
		"unknown field":       resealed([]byte(snapshotMagic + `{"cluster":"c","revision":1,"keys":{},"extra":1}` + "\n")),
		"padding not filler":  resealed([]byte(snapshotMagic + `{"cluster":"c","revision":1,"keys":{},"padding":3}` + "\nabc")),
		"meta without a line": []byte(snapshotMagic + strings.Repeat("x", 100)),
		"empty key":           resealed([]byte(snapshotMagic + `{"cluster":"c","revision":1,"keys":{"":"v"}}` + "\n")),
		"keyspace over limit": resealed([]byte(snapshotMagic + `{"cluster":"c","revision":1,"keys":{"k":"` + strings.Repeat("v", maxKeyspaceBytes) + `"}}` + "\n")),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := readSnapshot(bytes.NewReader(b))
			require.ErrorIs(t, err, errSnapshot)
		})
	}
}

// TestSnapshotMetaLimit: a header line longer than the bound is refused
// without reading it whole.
func TestSnapshotMetaLimit(t *testing.T) {
	t.Parallel()
	line := strings.Repeat("x", 200_000) + "\n"
	_, err := readLine(bufio.NewReaderSize(strings.NewReader(line), 16), sha256.New(), 1000)
	require.ErrorIs(t, err, errSnapshot)
	got, err := readLine(bufio.NewReaderSize(strings.NewReader("abc\nrest"), 16), sha256.New(), 1000)
	require.NoError(t, err)
	require.Equal(t, "abc", string(got))
}
