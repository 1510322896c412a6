package identity

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLoginLimiterDelays: the user's delay doubles with each failure past
// the limit, up to its bound, counted from the last failure.
func TestLoginLimiterDelays(t *testing.T) {
	l := newLoginLimiter(3, time.Minute, 5*time.Minute, 100)
	for _, tc := range []struct {
		failures int
		want     time.Duration
	}{
		{3, time.Minute},
		{4, 2 * time.Minute},
		{5, 4 * time.Minute},
		{6, 5 * time.Minute}, // bounded
		{20, 5 * time.Minute},
	} {
		t.Run(strconv.Itoa(tc.failures), func(t *testing.T) {
			require.Equal(t, tc.want, l.delay(tc.failures))
		})
	}
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for i := range 4 {
		l.fail(t0.Add(time.Duration(i)*time.Second), "ann", "192.0.2.1")
	}
	require.Equal(t, 2*time.Minute, l.userDelay(t0.Add(3*time.Second), "ann"), "from the last failure")
	require.Equal(t, time.Minute, l.userDelay(t0.Add(63*time.Second), "ann"))
	require.Zero(t, l.userDelay(t0.Add(3*time.Minute+3*time.Second), "ann"), "waited out")
	require.Zero(t, l.userDelay(t0, "bea"), "another user")
	l.succeed("ann")
	require.Zero(t, l.userDelay(t0.Add(4*time.Second), "ann"), "a success forgets the user's failures")
}

// TestLoginLimiterPairs: an address is held back as one user only, within
// the window from its first failure; other addresses stay clean.
func TestLoginLimiterPairs(t *testing.T) {
	l := newLoginLimiter(2, time.Minute, 5*time.Minute, 100)
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	l.fail(t0, "ann", "192.0.2.1")
	require.Zero(t, l.addrWait(t0, "192.0.2.1", "ann"), "under the limit")
	require.False(t, l.addrClean(t0, "192.0.2.1", "ann"))
	l.fail(t0.Add(10*time.Second), "ann", "192.0.2.1")
	for _, tc := range []struct {
		name       string
		at         time.Duration
		addr, user string
		wait       time.Duration
		clean      bool
	}{
		{"held back", 10 * time.Second, "192.0.2.1", "ann", 50 * time.Second, false},
		{"as another user, not", 10 * time.Second, "192.0.2.1", "bea", 0, true},
		{"another address, not", 10 * time.Second, "192.0.2.2", "ann", 0, true},
		{"the window from the first failure passed", time.Minute, "192.0.2.1", "ann", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.wait, l.addrWait(t0.Add(tc.at), tc.addr, tc.user))
			require.Equal(t, tc.clean, l.addrClean(t0.Add(tc.at), tc.addr, tc.user))
		})
	}
}

// TestLoginLimiterIsBounded: the maps never hold more than their capacity;
// expired entries go first, then the oldest.
func TestLoginLimiterIsBounded(t *testing.T) {
	l := newLoginLimiter(3, time.Minute, 5*time.Minute, 10)
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for i := range 100 {
		l.fail(t0.Add(time.Duration(i)*time.Millisecond), "user-"+strconv.Itoa(i), "192.0.2."+strconv.Itoa(i%250))
		require.LessOrEqual(t, len(l.users), 10)
		require.LessOrEqual(t, len(l.pairs), 10)
	}
	_, newest := l.users["user-99"]
	_, oldest := l.users["user-0"]
	require.True(t, newest, "the newest kept")
	require.False(t, oldest, "the oldest evicted")
}
