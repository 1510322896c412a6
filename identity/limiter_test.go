package identity

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLoginLimiter(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type step struct {
		at      time.Duration // since t0
		op      string        // "fail", "succeed" or "blocked"
		keys    []string
		wantGap time.Duration // for "blocked": the wait it reports
	}
	tests := []struct {
		name  string
		max   int
		cap   int
		steps []step
	}{
		{name: "under the limit", max: 3, cap: 10, steps: []step{
			{at: 0, op: "fail", keys: []string{"user:a"}},
			{at: time.Second, op: "fail", keys: []string{"user:a"}},
			{at: 2 * time.Second, op: "blocked", keys: []string{"user:a"}, wantGap: 0},
		}},
		{name: "at the limit waits out the window from the first failure", max: 2, cap: 10, steps: []step{
			{at: 0, op: "fail", keys: []string{"user:a", "addr:x"}},
			{at: 10 * time.Second, op: "fail", keys: []string{"user:a", "addr:x"}},
			{at: 15 * time.Second, op: "blocked", keys: []string{"user:a"}, wantGap: 45 * time.Second},
			{at: 15 * time.Second, op: "blocked", keys: []string{"user:b", "addr:x"}, wantGap: 45 * time.Second},
			{at: 15 * time.Second, op: "blocked", keys: []string{"user:b", "addr:y"}, wantGap: 0},
		}},
		{name: "the window passes", max: 1, cap: 10, steps: []step{
			{at: 0, op: "fail", keys: []string{"user:a"}},
			{at: time.Minute, op: "blocked", keys: []string{"user:a"}, wantGap: 0},
			{at: time.Minute, op: "fail", keys: []string{"user:a"}},
			{at: time.Minute + time.Second, op: "blocked", keys: []string{"user:a"}, wantGap: 59 * time.Second},
		}},
		{name: "a success clears the user, not the address", max: 1, cap: 10, steps: []step{
			{at: 0, op: "fail", keys: []string{"user:a", "addr:x"}},
			{at: time.Second, op: "succeed", keys: []string{"user:a"}},
			{at: time.Second, op: "blocked", keys: []string{"user:a"}, wantGap: 0},
			{at: time.Second, op: "blocked", keys: []string{"addr:x"}, wantGap: 59 * time.Second},
		}},
		{name: "a full table evicts the oldest", max: 1, cap: 2, steps: []step{
			{at: 0, op: "fail", keys: []string{"user:a"}},
			{at: time.Second, op: "fail", keys: []string{"user:b"}},
			{at: 2 * time.Second, op: "fail", keys: []string{"user:c"}},
			{at: 3 * time.Second, op: "blocked", keys: []string{"user:a"}, wantGap: 0},
			{at: 3 * time.Second, op: "blocked", keys: []string{"user:b"}, wantGap: 58 * time.Second},
			{at: 3 * time.Second, op: "blocked", keys: []string{"user:c"}, wantGap: 59 * time.Second},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLoginLimiter(tc.max, time.Minute, tc.cap)
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				switch s.op {
				case "fail":
					l.fail(now, s.keys...)
				case "succeed":
					l.succeed(s.keys[0])
				case "blocked":
					require.Equal(t, s.wantGap, l.blocked(now, s.keys...), "step %d", i)
				}
				require.LessOrEqual(t, len(l.entries), tc.cap, "step %d", i)
			}
		})
	}
}
