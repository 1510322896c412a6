package identity

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLoginLimiter(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type step struct {
		at   time.Duration // since t0
		op   string        // "fail" (user and addr), "succeed" (user), "addr" (addr as user), "user" or "clean" (addr as user)
		user string
		addr string
		want time.Duration // for "addr" and "user": the wait it reports
		// for "clean": whether the address has no failures
		clean bool
	}
	tests := []struct {
		name  string
		max   int
		cap   int
		steps []step
	}{
		{name: "under the limit", max: 3, cap: 10, steps: []step{
			{at: 0, op: "fail", user: "a", addr: "x"},
			{at: time.Second, op: "fail", user: "a", addr: "x"},
			{at: 2 * time.Second, op: "addr", user: "a", addr: "x", want: 0},
			{at: 2 * time.Second, op: "user", user: "a", want: 0},
			{at: 2 * time.Second, op: "clean", user: "a", addr: "x", clean: false},
			{at: 2 * time.Second, op: "clean", user: "a", addr: "y", clean: true},
			{at: 2 * time.Second, op: "clean", user: "b", addr: "x", clean: true},
		}},
		{name: "an address at the limit for a user waits out the window from its first failure", max: 2, cap: 10, steps: []step{
			{at: 0, op: "fail", user: "a", addr: "x"},
			{at: 10 * time.Second, op: "fail", user: "a", addr: "x"},
			{at: 15 * time.Second, op: "addr", user: "a", addr: "x", want: 45 * time.Second},
			{at: 15 * time.Second, op: "addr", user: "a", addr: "y", want: 0},
			{at: time.Minute, op: "addr", user: "a", addr: "x", want: 0},
			{at: time.Minute, op: "clean", user: "a", addr: "x", clean: true},
		}},
		// Issue 27: behind a reverse proxy every user shares one address;
		// failures for a user that does not exist must not block the admin.
		{name: "failures as one user do not block another from the same address", max: 5, cap: 10, steps: []step{
			{at: 0, op: "fail", user: "ghost", addr: "proxy"},
			{at: 0, op: "fail", user: "ghost", addr: "proxy"},
			{at: 0, op: "fail", user: "ghost", addr: "proxy"},
			{at: 0, op: "fail", user: "ghost", addr: "proxy"},
			{at: 0, op: "fail", user: "ghost", addr: "proxy"},
			{at: time.Second, op: "addr", user: "ghost", addr: "proxy", want: 59 * time.Second},
			{at: time.Second, op: "addr", user: "admin", addr: "proxy", want: 0},
			{at: time.Second, op: "user", user: "admin", want: 0},
		}},
		{name: "a user's delay grows with each failure and is capped", max: 2, cap: 10, steps: []step{
			{at: 0, op: "fail", user: "a", addr: "x"},
			{at: 0, op: "user", user: "a", want: 0},
			{at: time.Second, op: "fail", user: "a", addr: "y"},
			{at: 2 * time.Second, op: "user", user: "a", want: 59 * time.Second},
			{at: time.Minute + time.Second, op: "user", user: "a", want: 0},
			{at: time.Minute + time.Second, op: "fail", user: "a", addr: "z"},
			{at: time.Minute + time.Second, op: "user", user: "a", want: 2 * time.Minute},
			{at: 4 * time.Minute, op: "fail", user: "a", addr: "w"},
			{at: 4 * time.Minute, op: "user", user: "a", want: 4 * time.Minute},
			{at: 9 * time.Minute, op: "fail", user: "a", addr: "v"},
			{at: 9 * time.Minute, op: "fail", user: "a", addr: "u"},
			{at: 9 * time.Minute, op: "user", user: "a", want: 15 * time.Minute},
			// Quiet for twice the longest delay: forgotten.
			{at: 39 * time.Minute, op: "fail", user: "a", addr: "t"},
			{at: 39 * time.Minute, op: "user", user: "a", want: 0},
		}},
		{name: "a success clears the user, not the address", max: 1, cap: 10, steps: []step{
			{at: 0, op: "fail", user: "a", addr: "x"},
			{at: time.Second, op: "succeed", user: "a"},
			{at: time.Second, op: "user", user: "a", want: 0},
			{at: time.Second, op: "addr", user: "a", addr: "x", want: 59 * time.Second},
		}},
		{name: "a full table evicts the oldest", max: 1, cap: 2, steps: []step{
			{at: 0, op: "fail", user: "a", addr: "x"},
			{at: time.Second, op: "fail", user: "b", addr: "y"},
			{at: 2 * time.Second, op: "fail", user: "c", addr: "z"},
			{at: 3 * time.Second, op: "addr", user: "a", addr: "x", want: 0},
			{at: 3 * time.Second, op: "addr", user: "b", addr: "y", want: 58 * time.Second},
			{at: 3 * time.Second, op: "user", user: "a", want: 0},
			{at: 3 * time.Second, op: "user", user: "c", want: 59 * time.Second},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLoginLimiter(tc.max, time.Minute, 15*time.Minute, tc.cap)
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				switch s.op {
				case "fail":
					l.fail(now, s.user, s.addr)
				case "succeed":
					l.succeed(s.user)
				case "addr":
					require.Equal(t, s.want, l.addrWait(now, s.addr, s.user), "step %d", i)
				case "user":
					require.Equal(t, s.want, l.userDelay(now, s.user), "step %d", i)
				case "clean":
					require.Equal(t, s.clean, l.addrClean(now, s.addr, s.user), "step %d", i)
				}
				require.LessOrEqual(t, len(l.pairs), tc.cap, "step %d", i)
				require.LessOrEqual(t, len(l.users), tc.cap, "step %d", i)
			}
		})
	}
}
