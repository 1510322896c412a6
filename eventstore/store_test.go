package eventstore_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
)

func TestCreateStoresOnTheAggregateSubject(t *testing.T) {
	t.Parallel()
	env := eventstoretest.Start(t)
	ctx := testCtx(t)

	// The tenant of the node group is created first, as the API would.
	mustExecute(t, ctx, env.Store, createCmd(tenantRef("acme"), "uid-acme"))

	tests := []struct {
		name        string
		ref         domain.Ref
		wantSubject string
	}{
		{name: "cluster-scoped", ref: tenantRef("globex"), wantSubject: "rezus.evt.tenant._.globex"},
		{name: "tenant-scoped", ref: nodeGroupRef("acme", "workers"), wantSubject: "rezus.evt.nodegroup.acme.workers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.wantSubject, tt.ref.Subject())

			before := lastSeq(t, ctx, env.Store)
			res, err := env.Store.Execute(ctx, createCmd(tt.ref, "uid-"+tt.ref.Name), eventstore.UpdateOptions{})
			require.NoError(t, err)
			require.False(t, res.Duplicate)
			require.Equal(t, before+1, res.Seq, "a create is the next event of the stream")
			require.NotNil(t, res.Object)
			require.Equal(t, strconv.FormatUint(res.Seq, 10), res.Object.Metadata.ResourceVersion, "resourceVersion is the stream sequence")
			require.Equal(t, "uid-"+tt.ref.Name, res.Object.Metadata.UID)
			require.Equal(t, res.Object, res.Last)
			require.Len(t, res.Events, 1)
			require.Equal(t, domain.ActionCreated, res.Events[0].Action)
			require.Equal(t, tt.ref.Kind+"Created", res.Events[0].Type)

			rec, err := env.Store.Load(ctx, tt.ref)
			require.NoError(t, err)
			require.NotNil(t, rec)
			require.Equal(t, res.Seq, rec.Seq)
			require.Equal(t, tt.wantSubject, rec.Subject)
			require.Equal(t, tt.ref, rec.Event.Ref())
			require.Equal(t, res.Object, rec.State(), "the loaded state is what Execute returned")

			got, err := env.Store.Get(ctx, res.Seq)
			require.NoError(t, err)
			require.Equal(t, tt.wantSubject, got.Subject)
			require.Equal(t, res.Seq, got.Seq)
		})
	}

	t.Run("never existed", func(t *testing.T) {
		rec, err := env.Store.Load(ctx, tenantRef("nobody"))
		require.NoError(t, err)
		require.Nil(t, rec)
	})
}

func TestCreateDeleteCreate(t *testing.T) {
	t.Parallel()
	env := eventstoretest.Start(t)
	ctx := testCtx(t)
	ref := tenantRef("phoenix")

	first := mustExecute(t, ctx, env.Store, createCmd(ref, "uid-1"))

	_, err := env.Store.Execute(ctx, createCmd(ref, "uid-other"), eventstore.UpdateOptions{})
	require.True(t, domain.IsAlreadyExists(err), "create of an existing object: %v", err)

	del := mustExecute(t, ctx, env.Store, deleteCmd(ref))
	require.Nil(t, del.Object, "a deletion leaves no object")
	require.NotNil(t, del.Last)
	require.Equal(t, strconv.FormatUint(del.Seq, 10), del.Last.Metadata.ResourceVersion)
	require.Equal(t, "uid-1", del.Last.Metadata.UID)

	rec, err := env.Store.Load(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, del.Seq, rec.Seq)
	require.Equal(t, domain.ActionDeleted, rec.Event.Action)
	require.Nil(t, rec.State())

	// The aggregate's subject is not empty any more: a create expecting 0 is stale.
	ev := domain.Event{Type: "TenantCreated", Action: domain.ActionCreated, Time: now, Object: first.Object.DeepCopy()}
	_, _, err = env.Store.Append(ctx, ref, 0, "", ev)
	require.True(t, domain.IsConflict(err), "append expecting an empty subject after a deletion: %v", err)

	again, err := env.Store.Execute(ctx, createCmd(ref, "uid-2"), eventstore.UpdateOptions{})
	require.NoError(t, err)
	require.Equal(t, del.Seq+1, again.Seq, "the create expected the Deleted event's sequence")
	require.Equal(t, "uid-2", again.Object.Metadata.UID)
	require.NotEqual(t, first.Object.Metadata.UID, again.Object.Metadata.UID)
	require.Equal(t, strconv.FormatUint(again.Seq, 10), again.Object.Metadata.ResourceVersion)

	rec, err = env.Store.Load(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, again.Object, rec.State())

	_, err = env.Store.Execute(ctx, createCmd(ref, "uid-3"), eventstore.UpdateOptions{})
	require.True(t, domain.IsAlreadyExists(err), "create of the re-created object: %v", err)
}

func TestGetMissingSequenceIsGone(t *testing.T) {
	t.Parallel()
	env := eventstoretest.Start(t)
	ctx := testCtx(t)
	for i := range 3 {
		mustExecute(t, ctx, env.Store, createCmd(tenantRef(fmt.Sprintf("t%d", i)), "u"))
	}
	stream, err := env.Store.JetStream().Stream(ctx, eventstore.StreamName)
	require.NoError(t, err)
	require.NoError(t, stream.DeleteMsg(ctx, 2))

	tests := []struct {
		name string
		seq  uint64
	}{
		{name: "removed from the middle", seq: 2},
		{name: "just past the end", seq: 4},
		{name: "far past the end", seq: 1 << 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, err := env.Store.Get(ctx, tt.seq)
			require.Nil(t, rec)
			require.True(t, domain.IsGone(err), "Get(%d): %v", tt.seq, err)
		})
	}

	rec, err := env.Store.Get(ctx, 3)
	require.NoError(t, err)
	require.Equal(t, "t2", rec.Event.Object.Metadata.Name)
}

func TestEventsSurviveARestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := eventstoretest.Start(t, dir)
	ctx := testCtx(t)

	type stored struct {
		ref     domain.Ref
		subject string
		typ     string
		uid     string
	}
	bySeq := map[uint64]stored{}
	lastOf := map[domain.Ref]uint64{}
	record := func(cmd domain.Command) {
		res := mustExecute(t, ctx, env.Store, cmd)
		bySeq[res.Seq] = stored{ref: cmd.Ref, subject: cmd.Ref.Subject(), typ: res.Events[0].Type, uid: res.Last.Metadata.UID}
		lastOf[cmd.Ref] = res.Seq
	}
	const n = 12
	for i := range n / 2 {
		record(createCmd(tenantRef(fmt.Sprintf("t%d", i)), fmt.Sprintf("uid-t%d", i)))
	}
	for i := range n / 4 {
		record(createCmd(nodeGroupRef("t0", fmt.Sprintf("ng%d", i)), fmt.Sprintf("uid-ng%d", i)))
	}
	rec, err := env.Store.Load(ctx, tenantRef("t1"))
	require.NoError(t, err)
	for i := range n / 4 {
		res := mustExecute(t, ctx, env.Store, labelCmd(rec.State(), fmt.Sprintf("k%d", i), "v", ""))
		bySeq[res.Seq] = stored{ref: tenantRef("t1"), subject: tenantRef("t1").Subject(), typ: res.Events[0].Type, uid: "uid-t1"}
		lastOf[tenantRef("t1")] = res.Seq
		rec, err = env.Store.Load(ctx, tenantRef("t1"))
		require.NoError(t, err)
	}
	require.Len(t, bySeq, n)
	first, last, err := env.Store.Bounds(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), first)
	require.Equal(t, uint64(n), last)

	env.Stop()
	env = eventstoretest.Start(t, dir)

	gotFirst, gotLast, err := env.Store.Bounds(ctx)
	require.NoError(t, err)
	require.Equal(t, first, gotFirst)
	require.Equal(t, last, gotLast)
	for seq, want := range bySeq {
		got, err := env.Store.Get(ctx, seq)
		require.NoError(t, err, "seq %d", seq)
		require.Equal(t, seq, got.Seq)
		require.Equal(t, want.subject, got.Subject, "seq %d", seq)
		require.Equal(t, want.typ, got.Event.Type, "seq %d", seq)
		require.Equal(t, want.uid, got.Event.Object.Metadata.UID, "seq %d", seq)
	}
	for ref, seq := range lastOf {
		got, err := env.Store.Load(ctx, ref)
		require.NoError(t, err, "%s", ref)
		require.Equal(t, seq, got.Seq, "%s", ref)
		require.Equal(t, strconv.FormatUint(seq, 10), got.State().Metadata.ResourceVersion)
	}
	t1, err := env.Store.Load(ctx, tenantRef("t1"))
	require.NoError(t, err)
	require.Len(t, t1.State().Metadata.Labels, n/4)

	// Concurrency control carries on from the stored sequences.
	res, err := env.Store.Execute(ctx, labelCmd(t1.State(), "after", "restart", t1.State().Metadata.ResourceVersion), eventstore.UpdateOptions{})
	require.NoError(t, err)
	require.Equal(t, last+1, res.Seq)
	_, err = env.Store.Execute(ctx, labelCmd(t1.State(), "stale", "write", t1.State().Metadata.ResourceVersion), eventstore.UpdateOptions{})
	require.True(t, domain.IsConflict(err), "stale write after restart: %v", err)
	_, err = env.Store.Execute(ctx, createCmd(tenantRef("t0"), "again"), eventstore.UpdateOptions{})
	require.True(t, domain.IsAlreadyExists(err), "create of a restored object: %v", err)
}

func TestAppendTooLarge(t *testing.T) {
	t.Parallel()
	env := eventstoretest.Start(t)
	ctx := testCtx(t)
	ref := tenantRef("big")
	res := mustExecute(t, ctx, env.Store, createCmd(ref, "uid"))

	tests := []struct {
		name string
		size int
	}{
		{name: "over the stream's max message size", size: 3 << 20},
		{name: "over the server's max payload", size: eventstore.DefaultMaxPayload + 1<<20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := lastSeq(t, ctx, env.Store)
			obj := res.Object.DeepCopy()
			obj.Metadata.ResourceVersion = ""
			// Append does not validate: this is what a buggy caller could hand it.
			obj.Metadata.Annotations = map[string]string{"blob": strings.Repeat("x", tt.size)}
			ev := domain.Event{Type: "TenantUpdated", Action: domain.ActionUpdated, Time: now, Object: obj}

			var err error
			require.NotPanics(t, func() {
				_, _, err = env.Store.Append(ctx, ref, res.Seq, "big-"+tt.name, ev)
			})
			require.Error(t, err)
			require.False(t, domain.IsConflict(err), "too large is not a conflict: %v", err)
			require.Equal(t, before, lastSeq(t, ctx, env.Store), "nothing was stored")

			// The connection is still usable.
			rec, err := env.Store.Load(ctx, ref)
			require.NoError(t, err)
			require.Equal(t, res.Seq, rec.Seq)
		})
	}

	upd := mustExecute(t, ctx, env.Store, labelCmd(res.Object, "still", "works", res.Object.Metadata.ResourceVersion))
	require.Equal(t, res.Seq+1, upd.Seq)
}
