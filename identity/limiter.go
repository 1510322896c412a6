package identity

import (
	"sync"
	"time"
)

// loginLimiter bounds password guessing. It is per replica: an attacker
// spreading over replicas gets replicas × the limits, still a hard bound.
//
//   - Per client address and user name, a hard limit: max failures within
//     window block that address's logins as that user until the window
//     (counted from the first failure) passes. Keyed on the pair, not the
//     address alone: behind a reverse proxy every user shares one address,
//     and five bad logins for a user that does not exist blocked every
//     login of everyone for a minute (issue 27). --trusted-proxies gives
//     the real client address back.
//   - Per user, a growing delay rather than a lock: from the max-th failure on,
//     the user's logins wait window, then twice that after the next failure,
//     and so on up to maxDelay, counted from the last failure. The delay does
//     not hold back an address with no failures of its own for the user (the
//     slow path: its password is checked), so failures from elsewhere cannot
//     lock the user out; a failure on the slow path marks that address, which
//     then waits too.
type loginLimiter struct {
	mu       sync.Mutex
	max      int
	window   time.Duration
	maxDelay time.Duration
	cap      int
	pairs    map[string]*failures // by pairKey(addr, user)
	users    map[string]*failures
}

// failures counts failures since the first one, remembering the last.
type failures struct {
	n           int
	since, last time.Time
}

func newLoginLimiter(maxFailures int, window, maxDelay time.Duration, capacity int) *loginLimiter {
	return &loginLimiter{max: maxFailures, window: window, maxDelay: max(maxDelay, window), cap: capacity,
		pairs: map[string]*failures{}, users: map[string]*failures{}}
}

// pairKey is the key of an address's failures as a user; the NUL cannot be
// in either.
func pairKey(addr, user string) string { return addr + "\x00" + user }

// addrWait is how long the address must still wait to log in as user, or 0.
func (l *loginLimiter) addrWait(now time.Time, addr, user string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.pairs[pairKey(addr, user)]
	if f == nil || now.Sub(f.since) >= l.window || f.n < l.max {
		return 0
	}
	return l.window - now.Sub(f.since)
}

// addrClean reports whether the address has no failures as user in the window.
func (l *loginLimiter) addrClean(now time.Time, addr, user string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.pairs[pairKey(addr, user)]
	return f == nil || now.Sub(f.since) >= l.window
}

// userDelay is how long the user's logins must still wait, or 0.
func (l *loginLimiter) userDelay(now time.Time, user string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.users[user]
	if f == nil || f.n < l.max {
		return 0
	}
	return max(0, l.delay(f.n)-now.Sub(f.last))
}

// delay is the user's delay after n failures (n ≥ max).
func (l *loginLimiter) delay(n int) time.Duration {
	d := l.window
	for i := l.max; i < n && d < l.maxDelay; i++ {
		d *= 2
	}
	return min(d, l.maxDelay)
}

// fail records a failed login of user from addr.
func (l *loginLimiter) fail(now time.Time, user, addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// An address counts within its window from the first failure; a user's
	// count lives until it has been quiet for twice its longest delay.
	record(l.pairs, pairKey(addr, user), now, l.cap, func(f *failures) bool { return now.Sub(f.since) >= l.window })
	record(l.users, user, now, l.cap, func(f *failures) bool { return now.Sub(f.last) >= 2*l.maxDelay })
}

func record(m map[string]*failures, key string, now time.Time, capacity int, expired func(*failures) bool) {
	f := m[key]
	if f == nil || expired(f) {
		if f == nil && len(m) >= capacity {
			evict(m, capacity, expired)
		}
		f = &failures{since: now}
		m[key] = f
	}
	f.n++
	f.last = now
}

// succeed forgets the user's failures (not the address's as the user).
func (l *loginLimiter) succeed(user string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.users, user)
}

// evict drops expired entries, or the oldest when none expired, so the map
// stays bounded.
func evict(m map[string]*failures, capacity int, expired func(*failures) bool) {
	var oldest string
	for k, f := range m {
		if expired(f) {
			delete(m, k)
		} else if oldest == "" || f.since.Before(m[oldest].since) {
			oldest = k
		}
	}
	if len(m) >= capacity && oldest != "" {
		delete(m, oldest)
	}
}
