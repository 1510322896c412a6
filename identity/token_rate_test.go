package identity

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTokenWriteBuckets(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type step struct {
		at   time.Duration // since t0
		user string
		want time.Duration // the wait take reports (0: the write passes)
	}
	tests := []struct {
		name  string
		cap   int
		steps []step
	}{
		{name: "the burst, then one per interval", cap: 10, steps: []step{
			{0, "a", 0}, {0, "a", 0}, {0, "a", 10 * time.Second},
			{4 * time.Second, "a", 6 * time.Second},
			{10 * time.Second, "a", 0}, {10 * time.Second, "a", 10 * time.Second},
		}},
		{name: "users have their own buckets", cap: 10, steps: []step{
			{0, "a", 0}, {0, "a", 0}, {0, "b", 0}, {0, "a", 10 * time.Second},
		}},
		{name: "a long pause refills only up to the burst", cap: 10, steps: []step{
			{0, "a", 0}, {0, "a", 0}, {time.Hour, "a", 0}, {time.Hour, "a", 0}, {time.Hour, "a", 10 * time.Second},
		}},
		{name: "a full table stays bounded", cap: 2, steps: []step{
			{0, "a", 0}, {0, "b", 0}, {0, "c", 0}, {0, "d", 0},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newTokenWriteBuckets(2, 10*time.Second, tc.cap)
			for i, s := range tc.steps {
				require.Equal(t, s.want, b.take(t0.Add(s.at), s.user), "step %d", i)
				require.LessOrEqual(t, len(b.buckets), tc.cap, "step %d", i)
			}
		})
	}
}
