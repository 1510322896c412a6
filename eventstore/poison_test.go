package eventstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
)

// deadLetters reads the dead-letter stream's messages.
func deadLetters(t *testing.T, js jetstream.JetStream) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, eventstore.DeadLetterStream)
	require.NoError(t, err)
	var out []*jetstream.RawStreamMsg
	require.Eventually(t, func() bool {
		info, err := s.Info(ctx)
		return err == nil && info.State.Msgs > 0
	}, 10*time.Second, 20*time.Millisecond)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		require.NoError(t, err)
		out = append(out, m)
	}
	return out
}

// TestPoisonEventsAreSkippedAndKept: issue 27, finding 5. One forged record
// in REZUS_EVENTS ("{}" on a tenant subject, as with leaked credentials)
// stopped every replica at every restart. Every reader of the stream skips
// it, it is counted and kept once in the dead-letter stream, and the events
// around it are read as before.
func TestPoisonEventsAreSkippedAndKept(t *testing.T) {
	env := eventstoretest.Start(t)
	ctx := context.Background()
	env.Create(t, domain.TenantKind, "", "before", `{}`)
	js := env.Store.JetStream()
	ack, err := js.Publish(ctx, domain.SubjectPrefix+".tenant._.forged", []byte("{}"))
	require.NoError(t, err)
	poison := ack.Sequence
	_, err = js.Publish(ctx, domain.SubjectPrefix+".tenant._.garbage", []byte("not json at all"))
	require.NoError(t, err)
	after := env.Create(t, domain.TenantKind, "", "after", `{}`)

	// Following: the cache and every watch.
	cur, err := env.Store.Follow(ctx, 1, nil)
	require.NoError(t, err)
	defer cur.Stop()
	var names []string
	for {
		rec, err := cur.Next(ctx)
		require.NoError(t, err)
		names = append(names, rec.Event.Object.Metadata.Name)
		if rec.Seq == after {
			break
		}
	}
	require.Equal(t, []string{"before", "after"}, names)

	// Replaying, oldest first and newest first (the events API).
	recs, _, err := env.Store.Replay(ctx, eventstore.ReplayOptions{Limit: 10})
	require.NoError(t, err)
	require.Len(t, recs, 2)
	recs, _, err = env.Store.Replay(ctx, eventstore.ReplayOptions{Newest: 10})
	require.NoError(t, err)
	require.Len(t, recs, 2)

	// The controllers' shared decoding says it cannot, and keeps it.
	_, err = env.Store.SharedEvent(poison, []byte("{}"))
	require.Error(t, err)

	// Loading the forged aggregate says why, rather than a decode error.
	_, err = env.Store.Load(ctx, domain.TenantRef("forged"))
	require.ErrorContains(t, err, "cannot be decoded (kept in "+eventstore.DeadLetterStream+")")

	require.GreaterOrEqual(t, env.Store.PoisonRecords(), uint64(2))
	// Kept once each, however many readers met them.
	require.Eventually(t, func() bool { return len(deadLetters(t, js)) == 2 }, 10*time.Second, 50*time.Millisecond)
	dl := deadLetters(t, js)
	require.Equal(t, eventstore.StreamName, dl[0].Header.Get(eventstore.HeaderDeadStream))
	require.Equal(t, "{}", string(dl[0].Data))
	require.NotEmpty(t, dl[0].Header.Get(eventstore.HeaderDeadError))
}

// TestPoisonAuditRecordsAreSkipped: the audit stream's readers skip a
// record that cannot be decoded, and keep it.
func TestPoisonAuditRecordsAreSkipped(t *testing.T) {
	env := eventstoretest.Start(t)
	ctx := context.Background()
	l := openAudit(t, ctx, env, eventstore.AuditConfig{})
	l.Append(eventstore.AuditRecord{Actor: "admin", Method: "POST", Path: "/api/v1/tenants", Code: 201})
	_, err := env.Store.JetStream().Publish(ctx, eventstore.AuditSubjectPrefix+".forged", []byte("{{{"))
	require.NoError(t, err)
	l.Append(eventstore.AuditRecord{Actor: "admin", Method: "DELETE", Path: "/api/v1/tenants/a", Code: 202})
	require.Eventually(t, func() bool {
		recs, _, err := l.Query(ctx, eventstore.AuditQuery{Limit: 10})
		return err == nil && len(recs) == 2
	}, 10*time.Second, 20*time.Millisecond)
	recs, _, err := l.Query(ctx, eventstore.AuditQuery{Newest: 10})
	require.NoError(t, err)
	require.Len(t, recs, 2)
	cur, err := l.Follow(ctx, eventstore.AuditQuery{})
	require.NoError(t, err)
	defer cur.Stop()
	for _, want := range []string{"POST", "DELETE"} {
		rec, err := cur.Next(ctx)
		require.NoError(t, err)
		require.Equal(t, want, rec.Method)
	}
	dl := deadLetters(t, env.Store.JetStream())
	require.Equal(t, eventstore.AuditStreamName, dl[0].Header.Get(eventstore.HeaderDeadStream))
}
