package identity

import (
	"fmt"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/domain"
)

// tokenWriteBuckets rate-limits self-service writes of API tokens: a token
// bucket per user of burst writes, refilled by one every interval. It is per
// replica, like the login limiter, and bounded: a full table forgets the
// fullest buckets (those nobody is draining).
type tokenWriteBuckets struct {
	mu       sync.Mutex
	burst    int
	interval time.Duration
	cap      int
	buckets  map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newTokenWriteBuckets(burst int, interval time.Duration, capacity int) *tokenWriteBuckets {
	return &tokenWriteBuckets{burst: burst, interval: interval, cap: capacity, buckets: map[string]*bucket{}}
}

// take spends one write of user's bucket, or says how long until one is there.
func (b *tokenWriteBuckets) take(now time.Time, user string) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.buckets[user]
	if k == nil {
		if len(b.buckets) >= b.cap {
			b.evict(now)
		}
		k = &bucket{tokens: float64(b.burst), at: now}
		b.buckets[user] = k
	}
	if now.After(k.at) {
		k.tokens = min(float64(b.burst), k.tokens+float64(now.Sub(k.at))/float64(b.interval))
		k.at = now
	}
	if k.tokens < 1 {
		return time.Duration((1 - k.tokens) * float64(b.interval))
	}
	k.tokens--
	return 0
}

// evict drops the buckets that are full again (they would start full anyway),
// or an arbitrary one when none is.
func (b *tokenWriteBuckets) evict(now time.Time) {
	for user, k := range b.buckets {
		if k.tokens+float64(now.Sub(k.at))/float64(b.interval) >= float64(b.burst) {
			delete(b.buckets, user)
		}
	}
	for user := range b.buckets {
		if len(b.buckets) < b.cap {
			return
		}
		delete(b.buckets, user)
	}
}

// AllowTokenWrite spends one of user's self-service token writes; beyond the
// bucket it answers 429 with Retry-After.
func (s *Service) AllowTokenWrite(user string) error {
	wait := s.tokenWrites.take(s.cfg.Now(), user)
	if wait <= 0 {
		return nil
	}
	secs := int((wait + time.Second - 1) / time.Second)
	return &domain.Error{Reason: domain.ReasonTooManyRequests, RetryAfterSeconds: secs,
		Message: fmt.Sprintf("too many changes to your API tokens; retry in %d seconds", secs)}
}
