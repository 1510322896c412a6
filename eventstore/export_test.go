package eventstore

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ReplayNewestRounds is Replay with opts.Newest, also saying how many
// backwards rounds it took.
func (s *Store) ReplayNewestRounds(ctx context.Context, opts ReplayOptions) ([]*Record, int, error) {
	return s.replayNewest(ctx, opts)
}

// QueryNewestRounds is Query with q.Newest, also saying how many backwards
// rounds it took.
func (l *AuditLog) QueryNewestRounds(ctx context.Context, q AuditQuery) ([]AuditRecord, int, error) {
	return l.queryNewest(ctx, q)
}

// SetRestoreBeforeSend makes f run before each chunk of a stream's first
// restore attempt is sent, until the test ends.
func SetRestoreBeforeSend(t interface{ Cleanup(func()) }, f func(stream string)) {
	restoreBeforeSend = f
	t.Cleanup(func() { restoreBeforeSend = nil })
}

// LeaderLastMsg is leaderLastMsg.
func LeaderLastMsg(ctx context.Context, nc *nats.Conn, stream, subject string) (*jetstream.RawStreamMsg, error) {
	return leaderLastMsg(ctx, nc, stream, subject)
}

// SetLeaderGetTimeout sets leaderGetTimeout for t.
func SetLeaderGetTimeout(t *testing.T, d time.Duration) {
	old := leaderGetTimeout
	leaderGetTimeout = d
	t.Cleanup(func() { leaderGetTimeout = old })
}

// RoutePassword is the route credential derived from secret: what the
// attack of issue 27 captured from a replica.
func RoutePassword(secret []byte) (string, error) { return routePassword(secret) }

// RouteUser is the route credential's user name.
const RouteUser = routeUser

// DisableJetStream turns the embedded server's JetStream off: its API stops
// answering, as while a stream's leader is elected or a quorum is lost.
func (e *Embedded) DisableJetStream() error { return e.srv.DisableJetStream() }
