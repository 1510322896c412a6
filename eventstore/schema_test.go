package eventstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
)

// fixedLevel is a SchemaLevels that always says the same.
type fixedLevel int

func (l fixedLevel) WriteLevel() int { return int(l) }

const (
	upgradeSpec   = `{"talosVersion":"v1.13.1","maxParallelism":1,"deadlines":{"reboot":"30m"}}`
	upgradeStatus = `{"phase":"Running","machines":[{"name":"cp-1","nodeGroup":"cp","role":"controlplane","to":"v1.13.1","phase":"Rebooting",` +
		`"wait":{"for":"cp-1 to answer v1.13.1","since":"2026-01-02T03:04:05Z","deadline":"2026-01-02T03:24:05Z"}}]}`
)

// rawLast is the stored bytes of the aggregate's last event.
func rawLast(t *testing.T, ctx context.Context, s *eventstore.Store, ref domain.Ref) string {
	t.Helper()
	stream, err := s.JetStream().Stream(ctx, eventstore.StreamName)
	require.NoError(t, err)
	msg, err := stream.GetLastMsgForSubject(ctx, ref.Subject())
	require.NoError(t, err)
	return string(msg.Data)
}

// An append is written at the store's level: at level 1 an Upgrade's
// deadlines and its machines' waits are not stored and no level is
// stamped (the event is what 0.1.0 writes); at level 2 both are, stamped.
// The result says what was stored.
func TestAppendWritesTheStoreLevel(t *testing.T) {
	env := eventstoretest.Start(t)
	ctx := testCtx(t)
	for _, tt := range []struct {
		level    int
		stored   bool
		schema   string
		wantSpec string
	}{
		{1, false, "", `{"talosVersion":"v1.13.1","maxParallelism":1}`},
		{2, true, `"schema":2`, upgradeSpec},
	} {
		t.Run(fmt.Sprintf("level %d", tt.level), func(t *testing.T) {
			s, err := eventstore.Open(ctx, env.Conn, eventstore.Config{Schema: fixedLevel(tt.level)})
			require.NoError(t, err)
			ref := domain.Ref{Kind: "Upgrade", Tenant: "acme", Name: fmt.Sprintf("up-%d", tt.level)}
			obj := &domain.Object{Metadata: domain.ObjectMeta{Name: ref.Name, Tenant: ref.Tenant}, Spec: json.RawMessage(upgradeSpec)}
			res := mustExecute(t, ctx, s, domain.Command{Op: domain.OpCreate, Ref: ref, Object: obj, Actor: "test", Now: now, NewUID: "u"})
			require.Equal(t, tt.wantSpec, string(res.Object.Spec), "the result is what was stored")

			st := res.Object.DeepCopy()
			st.Status = json.RawMessage(upgradeStatus)
			res = mustExecute(t, ctx, s, domain.Command{Op: domain.OpUpdateStatus, Ref: ref, Object: st, Actor: "test", Now: now})
			raw := rawLast(t, ctx, s, ref)
			require.Equal(t, tt.stored, strings.Contains(raw, `"wait":`), raw)
			require.Equal(t, tt.stored, strings.Contains(raw, `"deadlines":`), raw)
			require.Equal(t, tt.stored, strings.Contains(string(res.Object.Status), `"wait":`))
			if tt.schema == "" {
				require.NotContains(t, raw, `"schema"`)
			} else {
				require.Contains(t, raw, tt.schema)
			}
			rec, err := s.Load(ctx, ref)
			require.NoError(t, err)
			require.Equal(t, tt.level, rec.Event.Level())
			require.Equal(t, string(res.Object.Status), string(rec.State().Status))

			// The same status again appends nothing, at level 1 too:
			// Decide sees a change (the wait the record lacks), but what
			// would be stored is the record, and a wait a lower level
			// cannot hold must not append on every write.
			before := lastSeq(t, ctx, s)
			again, err := s.Execute(ctx, domain.Command{Op: domain.OpUpdateStatus, Ref: ref, Object: st, Actor: "test", Now: now}, eventstore.UpdateOptions{})
			require.NoError(t, err)
			require.Empty(t, again.Events)
			require.Equal(t, before, lastSeq(t, ctx, s))
			require.Equal(t, rec.Seq, again.Seq)
		})
	}
}

// stateHint is a cache of one state, as projections.Cache would answer.
type stateHint struct {
	obj *domain.Object
	seq uint64
}

func (h stateHint) Peek(domain.Ref) (*domain.Object, uint64) { return h.obj.DeepCopy(), h.seq }

// A record written by a newer release (schema 3, with a field this build
// does not know) is read as it is, and every write on top of it is
// refused with a Conflict that says why, whether the store loads the
// record or was handed a cached state once it knows a newer replica runs.
// Another object goes on being written.
func TestUpdateRefusesANewerRecord(t *testing.T) {
	env := eventstoretest.Start(t)
	ctx := testCtx(t)
	ref := domain.Ref{Kind: "Upgrade", Tenant: "acme", Name: "from-the-future"}
	future := `{"type":"UpgradeStatusUpdated","action":"Created","time":"2026-01-02T03:04:05Z","schema":3,` +
		`"object":{"apiVersion":"rezuscloud.io/v1","kind":"Upgrade","metadata":{"name":"from-the-future","tenant":"acme","uid":"u3","generation":1},` +
		`"spec":{"talosVersion":"v1.13.1","maxParallelism":1,"canaryPercent":10},"status":{"phase":"Running","hologram":true}}}`
	_, err := env.Store.JetStream().Publish(ctx, ref.Subject(), []byte(future))
	require.NoError(t, err)

	s, err := eventstore.Open(ctx, env.Conn, eventstore.Config{Release: "0.2.0"})
	require.NoError(t, err)
	rec, err := s.Load(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, 3, rec.Event.Level())
	require.JSONEq(t, `{"talosVersion":"v1.13.1","maxParallelism":1,"canaryPercent":10}`, string(rec.State().Spec), "read as written")
	require.JSONEq(t, `{"phase":"Running","hologram":true}`, string(rec.State().Status))

	status := rec.State()
	status.Status = json.RawMessage(`{"phase":"Failed","reason":"an old replica"}`)
	for name, opts := range map[string]eventstore.UpdateOptions{"loaded": {}, "with an idempotency key": {MsgID: "k1"}} {
		t.Run(name, func(t *testing.T) {
			_, err := s.Execute(ctx, domain.Command{Op: domain.OpUpdateStatus, Ref: ref, Object: status, Actor: "test", Now: now}, opts)
			require.True(t, domain.IsNewerSchema(err), "%v", err)
			require.True(t, domain.IsConflict(err))
			require.EqualError(t, err, `operation cannot be fulfilled on upgrade "from-the-future": written by a newer RezusCloud (schema 3); `+
				`this replica runs 0.2.0 (schema 2): the work waits for a replica that reads it`)
		})
	}

	// A store that has not decoded the record itself, handed a cached
	// state: a newer replica's heartbeat is enough to stop trusting it.
	fresh, err := eventstore.Open(ctx, env.Conn, eventstore.Config{})
	require.NoError(t, err)
	fresh.NoteSchemaLevel(domain.SchemaLevel)
	fresh.NoteSchemaLevel(3)
	hint := stateHint{obj: rec.State(), seq: rec.Seq}
	_, err = fresh.Execute(ctx, domain.Command{Op: domain.OpUpdateStatus, Ref: ref, Object: status, Actor: "test", Now: now}, eventstore.UpdateOptions{Hint: hint})
	require.True(t, domain.IsNewerSchema(err), "%v", err)

	require.JSONEq(t, future, rawLast(t, ctx, s, ref), "the newer record is still the last")
	mustExecute(t, ctx, s, createCmd(tenantRef("acme"), "t1"))
}
