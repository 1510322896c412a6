package handlers

import (
	"fmt"
	"sync"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
)

// DefaultMaxWatchesPerUser is how many watches and follows one user may hold
// open at once unless configured.
const DefaultMaxWatchesPerUser = 32

// DefaultMaxWatches is how many watches and follows the server holds open at
// once unless configured. It is also what cmd gives the event store
// (eventstore.Config.MaxWatches), so the stream's consumer limit leaves the
// internal consumers their reserve.
const DefaultMaxWatches = eventstore.DefaultMaxWatches

// streamRetryAfter is the Retry-After of a refused stream: streams end when
// their clients leave, which is soon for a reconnecting client's old one.
const streamRetryAfter = 5

// streamLimiter counts open streams (watches, follows, followed logs) per
// user and in all, so that one user cannot hold every consumer of the event
// stream and the server as a whole stays under the stream's consumer limit.
type streamLimiter struct {
	maxTotal, maxPerUser int

	mu      sync.Mutex
	total   int
	perUser map[string]int
}

func newStreamLimiter(maxTotal, maxPerUser int) *streamLimiter {
	return &streamLimiter{maxTotal: maxTotal, maxPerUser: maxPerUser, perUser: map[string]int{}}
}

// acquire takes a slot for user, or fails with TooManyRequests (429 with
// Retry-After) when the user or the server is at its limit. release gives
// the slot back; calling it again does nothing.
func (l *streamLimiter) acquire(user string) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.perUser[user] >= l.maxPerUser:
		return nil, &domain.Error{Reason: domain.ReasonTooManyRequests, RetryAfterSeconds: streamRetryAfter,
			Message: fmt.Sprintf("too many open watches and follows for this user (limit %d); close one or retry later", l.maxPerUser)}
	case l.total >= l.maxTotal:
		return nil, &domain.Error{Reason: domain.ReasonTooManyRequests, RetryAfterSeconds: streamRetryAfter,
			Message: fmt.Sprintf("too many open watches (limit %d); retry later", l.maxTotal)}
	}
	l.perUser[user]++
	l.total++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.total--
			if l.perUser[user]--; l.perUser[user] <= 0 {
				delete(l.perUser, user)
			}
		})
	}, nil
}

// AcquireStream takes a stream slot for the user with uid (or, without a
// user object, name) under the limits of the API's watches and follows: the
// web UI's live pages count with them. It fails with TooManyRequests.
func (a *API) AcquireStream(uid, name string) (release func(), err error) {
	user := "name:" + name
	if uid != "" {
		user = "uid:" + uid
	}
	return a.streams.acquire(user)
}

// streamUser is whom a request's streams are counted for: the user's uid, so
// every token and session of one user share the count; the name for
// identities without a user object (the static token).
func streamUser(c echo.Context) string {
	id := identityOf(c)
	if id.UID != "" {
		return "uid:" + id.UID
	}
	return "name:" + id.Name
}

// acquireStream counts an open watch or follow against MaxWatchesPerUser and
// MaxWatches; the caller defers release. Beyond either limit it fails with
// TooManyRequests (429 with Retry-After), before any stream starts.
func (a *API) acquireStream(c echo.Context) (release func(), err error) {
	return a.streams.acquire(streamUser(c))
}
