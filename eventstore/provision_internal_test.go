package eventstore

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// covers decides whether a stream or bucket read back after an unanswered
// create is the one asked for: the server's filled-in defaults must not
// count as a difference, a field the request sets must.
func TestCoversComparesOnlyTheFieldsAsked(t *testing.T) {
	asked := jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Replicas: 3, MaxAge: time.Hour,
		Metadata: map[string]string{"owner": "rz"}, Mirror: &jetstream.StreamSource{Name: "M"}}
	stored := asked
	stored.MaxBytes, stored.MaxMsgs, stored.Duplicates = -1, -1, 2*time.Minute
	stored.Metadata = map[string]string{"owner": "rz", "_nats.level": "1"}
	stored.Mirror = &jetstream.StreamSource{Name: "M", FilterSubject: ">"}
	for _, tc := range []struct {
		name string
		have func(c *jetstream.StreamConfig)
		want bool
	}{
		{"server defaults filled in", func(*jetstream.StreamConfig) {}, true},
		{"other replicas", func(c *jetstream.StreamConfig) { c.Replicas = 1 }, false},
		{"other subjects", func(c *jetstream.StreamConfig) { c.Subjects = []string{"t.>"} }, false},
		{"other max age", func(c *jetstream.StreamConfig) { c.MaxAge = time.Minute }, false},
		{"metadata missing", func(c *jetstream.StreamConfig) { c.Metadata = nil }, false},
		{"no mirror", func(c *jetstream.StreamConfig) { c.Mirror = nil }, false},
		{"other mirror", func(c *jetstream.StreamConfig) { c.Mirror = &jetstream.StreamSource{Name: "N"} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			have := stored
			tc.have(&have)
			require.Equal(t, tc.want, covers(asked, have))
		})
	}
	require.True(t, covers(jetstream.KeyValueConfig{Bucket: "b", Replicas: 3},
		jetstream.KeyValueConfig{Bucket: "b", Replicas: 3, History: 1, MaxBytes: -1}), "a bucket's defaults")
	require.False(t, covers(jetstream.KeyValueConfig{Bucket: "b", History: 5},
		jetstream.KeyValueConfig{Bucket: "b", History: 1}), "a bucket's history")
}
