package identity

import (
	"sync"
	"time"
)

// loginLimiter counts failed logins per key in a fixed window. It is per
// replica: a determined attacker spreading over replicas gets replicas × the
// limit, which is still a hard bound.
type loginLimiter struct {
	mu      sync.Mutex
	max     int
	window  time.Duration
	cap     int
	entries map[string]*failures
}

type failures struct {
	n     int
	since time.Time
}

func newLoginLimiter(max int, window time.Duration, capacity int) *loginLimiter {
	return &loginLimiter{max: max, window: window, cap: capacity, entries: map[string]*failures{}}
}

// blocked returns how long any of keys must still wait, or 0.
func (l *loginLimiter) blocked(now time.Time, keys ...string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var wait time.Duration
	for _, k := range keys {
		f := l.entries[k]
		if f == nil || now.Sub(f.since) >= l.window {
			continue
		}
		if f.n >= l.max {
			wait = max(wait, l.window-now.Sub(f.since))
		}
	}
	return wait
}

func (l *loginLimiter) fail(now time.Time, keys ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		f := l.entries[k]
		if f == nil || now.Sub(f.since) >= l.window {
			if f == nil && len(l.entries) >= l.cap {
				l.evict(now)
			}
			f = &failures{since: now}
			l.entries[k] = f
		}
		f.n++
	}
}

func (l *loginLimiter) succeed(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.entries, key)
}

// evict drops expired entries, or the oldest when none expired, so the map stays bounded.
func (l *loginLimiter) evict(now time.Time) {
	var oldest string
	for k, f := range l.entries {
		if now.Sub(f.since) >= l.window {
			delete(l.entries, k)
		} else if oldest == "" || f.since.Before(l.entries[oldest].since) {
			oldest = k
		}
	}
	if len(l.entries) >= l.cap && oldest != "" {
		delete(l.entries, oldest)
	}
}
