package projections

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// kvEntry is one update of a projection bucket's watch as NATS delivers it.
type kvEntry struct {
	key string
	rev uint64
	op  jetstream.KeyValueOp
}

func (e kvEntry) Bucket() string { return "test" }
func (e kvEntry) Key() string    { return e.key }
func (e kvEntry) Value() []byte {
	if e.op != jetstream.KeyValuePut {
		return nil
	}
	name := e.key[len("t01."):]
	return fmt.Appendf(nil, `{"kind":"Provider","metadata":{"name":%q,"tenant":"t01","resourceVersion":"%d"}}`, name, e.rev)
}
func (e kvEntry) Revision() uint64                { return e.rev }
func (e kvEntry) Created() time.Time              { return time.Time{} }
func (e kvEntry) Delta() uint64                   { return 0 }
func (e kvEntry) Operation() jetstream.KeyValueOp { return e.op }

func put(name string, rev uint64) jetstream.KeyValueEntry {
	return kvEntry{key: "t01." + name, rev: rev, op: jetstream.KeyValuePut}
}

func del(name string, rev uint64) jetstream.KeyValueEntry {
	return kvEntry{key: "t01." + name, rev: rev, op: jetstream.KeyValueDelete}
}

// A snapshot read served by a replica that is still catching up goes on past
// that replica's "initial values delivered" marker until it has the bucket's
// last sequence as the leader reported it; served by a replica that is
// current, it ends at the marker.
func TestSnapshotReadWaitsForTheBucketsEnd(t *testing.T) {
	cases := []struct {
		name string
		// updates as the watch delivers them; nil is the end of the
		// initial values.
		updates []jetstream.KeyValueEntry
		last    uint64
		want    map[string]uint64 // name → resourceVersion
		wantErr string
	}{
		{
			name:    "a current replica: the initial values are the bucket",
			updates: []jetstream.KeyValueEntry{put("a", 3), put("b", 5), nil},
			last:    5,
			want:    map[string]uint64{"a": 3, "b": 5},
		},
		{
			name:    "the bucket's last message is a delete",
			updates: []jetstream.KeyValueEntry{put("a", 2), del("b", 4), nil},
			last:    4,
			want:    map[string]uint64{"a": 2},
		},
		{
			name: "a lagging replica: creates, updates and deletes after its marker count",
			updates: []jetstream.KeyValueEntry{put("a", 3), put("c", 4), nil,
				put("b", 5), put("a", 6), del("c", 7), put("d", 8), del("d", 9), put("c", 10)},
			last: 10,
			want: map[string]uint64{"a": 6, "b": 5, "c": 10},
		},
		{
			name:    "a lagging replica that never catches up",
			updates: []jetstream.KeyValueEntry{put("a", 3), nil},
			last:    9,
			wantErr: "stayed behind its leader",
		},
		{
			name:    "a watch that ends early",
			updates: []jetstream.KeyValueEntry{put("a", 3)},
			last:    3,
			wantErr: "watch ended early",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ch := make(chan jetstream.KeyValueEntry, len(tc.updates))
			for _, u := range tc.updates {
				ch <- u
			}
			if tc.wantErr == "watch ended early" {
				close(ch)
			}
			// Nothing more comes: a read that waits past what it needs
			// fails on the lag limit, not on the wanted values.
			got, err := readUpdates(context.Background(), domain.MustKind("Provider"), ch, tc.last, 50*time.Millisecond)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			names := map[string]uint64{}
			for _, s := range got {
				require.Equal(t, "t01", s.ref.Tenant)
				names[s.ref.Name] = s.e.seq
			}
			require.Equal(t, tc.want, names)
			require.Len(t, got, len(names), "each key once")
		})
	}
}
