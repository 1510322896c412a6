package eventstore_test

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
)

func openStateStore(t *testing.T, env *eventstoretest.Env) *eventstore.StateStore {
	t.Helper()
	st, err := eventstore.OpenStateStore(testCtx(t), env.Store)
	require.NoError(t, err)
	return st
}

func stateJSON(serial int, lineage, body string) []byte {
	return fmt.Appendf(nil, `{"version":4,"serial":%d,"lineage":%q,"resources":[],"outputs":{"x":{"value":%q}}}`, serial, lineage, body)
}

func lockInfo(id string) eventstore.LockInfo {
	return eventstore.LockInfo{ID: id, Operation: "OperationTypeApply", Who: "runner@host", Version: "1.10.10",
		Created: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Path: ""}
}

// own is the lock owner of the credentials of apply.
func own(apply string) eventstore.LockOwner {
	return eventstore.LockOwner{ApplyID: apply, Credential: "cred-of-" + apply}
}

func requireLockedBy(t *testing.T, err error, id, applyID string) {
	t.Helper()
	var le *eventstore.LockedError
	require.ErrorAs(t, err, &le)
	require.Equal(t, id, le.Holder.Info.ID)
	require.Equal(t, applyID, le.Holder.ApplyID)
	require.True(t, domain.IsConflict(err), "a LockedError is a Conflict")
}

func TestStateStorePutGetVersions(t *testing.T) {
	env := eventstoretest.Start(t)
	st := openStateStore(t, env)
	ctx := testCtx(t)

	_, err := st.Get(ctx, "acme")
	require.ErrorIs(t, err, eventstore.ErrStateNotFound)
	vs, err := st.Versions(ctx, "acme")
	require.NoError(t, err)
	require.Empty(t, vs)

	var written []eventstore.StateVersion
	for i := 1; i <= eventstore.TFStateHistory+4; i++ {
		v, err := st.Put(ctx, "acme", "", own("apply-a"), stateJSON(i, "lin-1", strings.Repeat("x", i)))
		require.NoError(t, err)
		require.Equal(t, uint64(i), v.Serial)
		written = append(written, v)
	}
	// Another tenant's writes are not its versions.
	_, err = st.Put(ctx, "other", "", own("apply-a"), stateJSON(99, "lin-2", "y"))
	require.NoError(t, err)

	cur, err := st.Get(ctx, "acme")
	require.NoError(t, err)
	want := stateJSON(eventstore.TFStateHistory+4, "lin-1", strings.Repeat("x", eventstore.TFStateHistory+4))
	require.Equal(t, want, cur.Data)
	sum := md5.Sum(want)
	require.Equal(t, hex.EncodeToString(sum[:]), cur.Version.MD5)
	require.Equal(t, uint64(eventstore.TFStateHistory+4), cur.Version.Serial)
	require.Equal(t, "lin-1", cur.Version.Lineage)
	require.Equal(t, len(want), cur.Version.Size)
	require.False(t, cur.Version.Encrypted)

	vs, err = st.Versions(ctx, "acme")
	require.NoError(t, err)
	require.Len(t, vs, eventstore.TFStateHistory, "history is capped")
	for i, v := range vs {
		w := written[len(written)-1-i] // newest first
		require.Equal(t, w.Revision, v.Revision)
		require.Equal(t, w.Serial, v.Serial)
		require.Equal(t, w.MD5, v.MD5)
		require.Equal(t, w.Size, v.Size)
		require.Equal(t, "lin-1", v.Lineage)
		require.WithinDuration(t, time.Now(), v.Time, time.Minute)
	}

	old, err := st.GetRevision(ctx, "acme", vs[3].Revision)
	require.NoError(t, err)
	require.Equal(t, vs[3].Serial, old.Version.Serial)
	_, err = st.GetRevision(ctx, "acme", written[0].Revision)
	require.ErrorIs(t, err, eventstore.ErrStateNotFound, "beyond the history")
	otherVs, err := st.Versions(ctx, "other")
	require.NoError(t, err)
	require.Len(t, otherVs, 1)
	_, err = st.GetRevision(ctx, "acme", otherVs[0].Revision)
	require.ErrorIs(t, err, eventstore.ErrStateNotFound, "another tenant's revision")

	// Delete leaves the history; Purge removes it.
	require.NoError(t, st.Delete(ctx, "acme", "", own("apply-a")))
	_, err = st.Get(ctx, "acme")
	require.ErrorIs(t, err, eventstore.ErrStateNotFound)
	vs, err = st.Versions(ctx, "acme")
	require.NoError(t, err)
	require.True(t, vs[0].Deleted)
	require.False(t, vs[1].Deleted)
	require.NoError(t, st.Purge(ctx, "acme"))
	vs, err = st.Versions(ctx, "acme")
	require.NoError(t, err)
	require.Empty(t, vs)
	_, err = st.Get(ctx, "other")
	require.NoError(t, err, "purging one tenant leaves the others")
}

func TestStateStoreRefusesBadInput(t *testing.T) {
	env := eventstoretest.Start(t)
	st := openStateStore(t, env)
	ctx := testCtx(t)
	for _, tc := range []struct {
		name   string
		tenant string
		data   []byte
		reason domain.Reason
	}{
		{"not json", "acme", []byte("plain text"), domain.ReasonBadRequest},
		{"json array", "acme", []byte(`[1]`), domain.ReasonBadRequest},
		{"broken json", "acme", []byte(`{"serial": `), domain.ReasonBadRequest},
		{"bad tenant", "Not.A.Name", stateJSON(1, "l", ""), domain.ReasonBadRequest},
		{"too large", "acme", make([]byte, eventstore.MaxStateSize+1), domain.ReasonRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := st.Put(ctx, tc.tenant, "", own("apply-a"), tc.data)
			require.Error(t, err)
			require.Equal(t, tc.reason, domain.ReasonOf(err), err.Error())
		})
	}
}

func TestInspectState(t *testing.T) {
	for _, tc := range []struct {
		name      string
		data      string
		serial    uint64
		lineage   string
		encrypted bool
	}{
		{"plain", `{"version":4,"serial":7,"lineage":"abc","resources":[]}`, 7, "abc", false},
		{"encrypted", `{"serial":8,"lineage":"abc","meta":{"key_provider.pbkdf2.k":"e30="},"encrypted_data":"AAAA","encryption_version":"v0"}`, 8, "abc", true},
		{"no serial", ` {"lineage":"x"}`, 0, "x", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			serial, lineage, enc, err := eventstore.InspectState([]byte(tc.data))
			require.NoError(t, err)
			require.Equal(t, tc.serial, serial)
			require.Equal(t, tc.lineage, lineage)
			require.Equal(t, tc.encrypted, enc)
		})
	}
}

func TestStateStoreLocking(t *testing.T) {
	env := eventstoretest.Start(t)
	st := openStateStore(t, env)
	ctx := testCtx(t)

	_, _, ok, err := st.LockHolder(ctx, "acme")
	require.NoError(t, err)
	require.False(t, ok)

	held, err := st.Lock(ctx, "acme", lockInfo("lock-a"), own("apply-a"))
	require.NoError(t, err)
	require.Equal(t, "lock-a", held.Info.ID)
	again, err := st.Lock(ctx, "acme", lockInfo("lock-a"), own("apply-a"))
	require.NoError(t, err, "re-taking one's own lock")
	require.Equal(t, held.Revision, again.Revision)

	_, err = st.Lock(ctx, "acme", lockInfo("lock-b"), own("apply-b"))
	requireLockedBy(t, err, "lock-a", "apply-a")
	var le *eventstore.LockedError
	require.ErrorAs(t, err, &le)
	require.Equal(t, lockInfo("lock-a"), le.Holder.Info, "the holder's info comes back whole")

	// Writes: only the holder's, while locked.
	_, err = st.Put(ctx, "acme", "", own("apply-a"), stateJSON(1, "l", ""))
	requireLockedBy(t, err, "lock-a", "apply-a")
	_, err = st.Put(ctx, "acme", "lock-b", own("apply-a"), stateJSON(1, "l", ""))
	requireLockedBy(t, err, "lock-a", "apply-a")
	requireLockedBy(t, st.Delete(ctx, "acme", "lock-b", own("apply-a")), "lock-a", "apply-a")
	_, err = st.Put(ctx, "acme", "lock-a", own("apply-a"), stateJSON(1, "l", ""))
	require.NoError(t, err)

	// The lock is bound to the credentials that took it: others, even of
	// the same apply and with the lock's ID, neither write, re-take nor
	// release it, and are not told its ID.
	for _, other := range []eventstore.LockOwner{own("apply-b"), {ApplyID: "apply-a", Credential: "another-credential"}} {
		_, err = st.Put(ctx, "acme", "lock-a", other, stateJSON(9, "l", ""))
		requireLockedBy(t, err, "lock-a", "apply-a")
		require.NotContains(t, err.Error(), "lock-a", "the error does not reveal the lock ID")
		requireLockedBy(t, st.Delete(ctx, "acme", "lock-a", other), "lock-a", "apply-a")
		_, err = st.Lock(ctx, "acme", lockInfo("lock-a"), other)
		requireLockedBy(t, err, "lock-a", "apply-a")
		requireLockedBy(t, st.Unlock(ctx, "acme", "lock-a", other), "lock-a", "apply-a")
	}

	// Another tenant is not locked.
	_, err = st.Lock(ctx, "other", lockInfo("lock-b"), own("apply-b"))
	require.NoError(t, err)

	applyID, info, ok, err := st.LockHolder(ctx, "acme")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "apply-a", applyID)
	require.Equal(t, "lock-a", info.ID)

	requireLockedBy(t, st.Unlock(ctx, "acme", "lock-b", own("apply-a")), "lock-a", "apply-a")
	require.NoError(t, st.Unlock(ctx, "acme", "lock-a", own("apply-a")))
	require.NoError(t, st.Unlock(ctx, "acme", "lock-a", own("apply-a")), "releasing a released lock")
	_, _, ok, err = st.LockHolder(ctx, "acme")
	require.NoError(t, err)
	require.False(t, ok)

	// Unlocked: anyone may write, and anyone may lock.
	_, err = st.Put(ctx, "acme", "stale-id", own("apply-a"), stateJSON(2, "l", ""))
	require.NoError(t, err)
	_, err = st.Lock(ctx, "acme", lockInfo("lock-c"), own("apply-c"))
	require.NoError(t, err)

	prev, ok, err := st.ForceUnlock(ctx, "acme")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "lock-c", prev.Info.ID)
	require.Equal(t, "apply-c", prev.ApplyID)
	_, ok, err = st.ForceUnlock(ctx, "acme")
	require.NoError(t, err)
	require.False(t, ok)
	_, err = st.Lock(ctx, "acme", lockInfo("lock-d"), own("apply-d"))
	require.NoError(t, err, "a force-unlocked state can be locked again")

	_, err = st.Lock(ctx, "acme", eventstore.LockInfo{}, own("x"))
	require.Equal(t, domain.ReasonBadRequest, domain.ReasonOf(err))
}

// Replicas share NATS: many lockers on separate connections race for one
// tenant's lock and exactly one wins; every loser is told who holds it.
func TestStateStoreLockRaceAcrossReplicas(t *testing.T) {
	env := eventstoretest.Start(t)
	const replicas = 3
	const perReplica = 8
	var stores []*eventstore.StateStore
	for i := range replicas {
		nc, err := env.Embedded.Connect(fmt.Sprintf("replica-%d", i))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		store, err := eventstore.Open(testCtx(t), nc, eventstore.Config{})
		require.NoError(t, err)
		stores = append(stores, openStateStore(t, &eventstoretest.Env{Store: store}))
	}
	ctx := testCtx(t)
	for round := range 5 {
		tenant := fmt.Sprintf("t%d", round)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var winners []string
		var holders []string
		start := make(chan struct{})
		for r, st := range stores {
			for i := range perReplica {
				id := fmt.Sprintf("r%d-%d", r, i)
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					_, err := st.Lock(ctx, tenant, lockInfo(id), own("apply-"+id))
					mu.Lock()
					defer mu.Unlock()
					var le *eventstore.LockedError
					switch {
					case err == nil:
						winners = append(winners, id)
					case errors.As(err, &le):
						holders = append(holders, le.Holder.Info.ID)
					default:
						t.Errorf("lock %s: %v", id, err)
					}
				}()
			}
		}
		close(start)
		wg.Wait()
		require.Len(t, winners, 1, "exactly one locker wins")
		require.Len(t, holders, replicas*perReplica-1)
		for _, h := range holders {
			require.Equal(t, winners[0], h, "losers are told the winner")
		}
	}
}

// A 32 MiB state (the most a tenant may have) round-trips through NATS.
func TestStateStoreLargeBlob(t *testing.T) {
	env := eventstoretest.Start(t)
	st := openStateStore(t, env)
	// Deflating 32 MiB takes well under a second, but ten times that under -race.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	head := stateJSON(5, "big", "")
	// Random, so compression does not make the test easy.
	raw := make([]byte, (eventstore.MaxStateSize-len(head)-64)*3/4)
	_, err := rand.Read(raw)
	require.NoError(t, err)
	pad := base64.StdEncoding.EncodeToString(raw)
	blob := stateJSON(5, "big", pad)
	blob = append(blob, strings.Repeat(" ", eventstore.MaxStateSize-len(blob))...)
	require.Len(t, blob, eventstore.MaxStateSize)

	v, err := st.Put(ctx, "acme", "", own("apply-a"), blob)
	require.NoError(t, err)
	require.Equal(t, eventstore.MaxStateSize, v.Size)
	got, err := st.Get(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, len(blob), len(got.Data))
	require.True(t, string(blob) == string(got.Data), "the blob comes back byte for byte")
	require.Equal(t, v.MD5, got.Version.MD5)
	vs, err := st.Versions(ctx, "acme")
	require.NoError(t, err)
	require.Len(t, vs, 1)
	require.Equal(t, eventstore.MaxStateSize, vs[0].Size)
}
