package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rezuscloud/rezuscloud/domain"
)

// LockInfo is OpenTofu's lock description (statemgr.LockInfo), field for
// field and with its JSON names, as the HTTP backend sends it.
type LockInfo struct {
	ID        string    `json:"ID"`
	Operation string    `json:"Operation"`
	Info      string    `json:"Info"`
	Who       string    `json:"Who"`
	Version   string    `json:"Version"`
	Created   time.Time `json:"Created"`
	Path      string    `json:"Path"`
}

// LockOwner is the apply credential that takes, holds or writes under a
// lock: the apply it was issued to and its own id (identity.StateCredential).
type LockOwner struct {
	ApplyID    string
	Credential string
}

// StateLock is a held lock: tofu's lock info, the apply whose credentials
// took it (so a stale lock can be traced to a run that is no longer going)
// and the id of those credentials: only they write under it or release it.
type StateLock struct {
	Info    LockInfo `json:"info"`
	ApplyID string   `json:"applyID,omitempty"`
	// Credential is the id of the apply credential that took the lock; a
	// lock without one (taken before locks were bound) is released only by
	// force.
	Credential string `json:"credential,omitempty"`
	// Revision is the lock key's revision; a release is conditional on it.
	Revision uint64 `json:"-"`
}

// heldBy reports whether owner is the credential that took the lock.
func (l StateLock) heldBy(owner LockOwner) bool {
	return l.Credential != "" && l.Credential == owner.Credential
}

// LockedError says a tenant's state is locked by someone else. Its message
// names the holder's apply and tofu's account of the lock, never the lock
// ID: the ID alone must not let anyone act under the lock, and it is not
// shown to those who do not hold it.
type LockedError struct {
	Tenant string
	Holder StateLock
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("the terraform state of tenant %q is locked by apply %s (%s by %s)",
		e.Tenant, e.Holder.ApplyID, e.Holder.Info.Operation, e.Holder.Info.Who)
}

// Unwrap makes a LockedError a domain Conflict for callers that do not care who holds the lock.
func (e *LockedError) Unwrap() error {
	return domain.NewConflict(stateKind, e.Tenant, "the state is locked by another apply")
}

// checkLock fails with a *LockedError unless the state is unlocked, or held
// under lockID by owner.
func (s *StateStore) checkLock(ctx context.Context, tenant, lockID string, owner LockOwner) error {
	held, ok, err := s.lock(ctx, tenant)
	if err != nil || !ok || (held.Info.ID == lockID && held.heldBy(owner)) {
		return err
	}
	return &LockedError{Tenant: tenant, Holder: held}
}

// Lock takes the tenant's lock for info.ID on behalf of owner. When someone
// else holds it, it fails with a *LockedError naming the holder. Taking a lock
// one already holds (same ID, same credential) succeeds; the same ID from
// other credentials does not.
func (s *StateStore) Lock(ctx context.Context, tenant string, info LockInfo, owner LockOwner) (StateLock, error) {
	if err := checkTenant(tenant); err != nil {
		return StateLock{}, err
	}
	if info.ID == "" {
		return StateLock{}, domain.NewBadRequest("the lock info has no ID", domain.Cause{Field: "ID", Type: domain.CauseRequired, Message: "required"})
	}
	if owner.Credential == "" {
		return StateLock{}, errors.New("a state lock needs the credential that takes it")
	}
	val, err := json.Marshal(StateLock{Info: info, ApplyID: owner.ApplyID, Credential: owner.Credential})
	if err != nil {
		return StateLock{}, err
	}
	for attempt := 0; ; attempt++ {
		rev, err := s.locks.Create(ctx, tenant, val)
		if err == nil {
			return StateLock{Info: info, ApplyID: owner.ApplyID, Credential: owner.Credential, Revision: rev}, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return StateLock{}, fmt.Errorf("locking the state of %s: %w", tenant, err)
		}
		held, ok, err := s.lock(ctx, tenant)
		if err != nil {
			return StateLock{}, err
		}
		if !ok {
			// Released between our create and our read: try again.
			if attempt < 10 {
				continue
			}
			return StateLock{}, fmt.Errorf("locking the state of %s: the lock keeps changing", tenant)
		}
		if held.Info.ID == info.ID && held.heldBy(owner) {
			return held, nil
		}
		return StateLock{}, &LockedError{Tenant: tenant, Holder: held}
	}
}

// Unlock releases the lock id that owner holds. Releasing a state nobody
// holds succeeds (a retried release); one held under another id, or by other
// credentials, fails with a *LockedError.
func (s *StateStore) Unlock(ctx context.Context, tenant, id string, owner LockOwner) error {
	if err := checkTenant(tenant); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		held, ok, err := s.lock(ctx, tenant)
		if err != nil || !ok {
			return err
		}
		if held.Info.ID != id || !held.heldBy(owner) {
			return &LockedError{Tenant: tenant, Holder: held}
		}
		err = s.locks.Delete(ctx, tenant, jetstream.LastRevision(held.Revision))
		if err == nil {
			return nil
		}
		if !isWrongLastSequence(err) || attempt >= 10 {
			return fmt.Errorf("unlocking the state of %s: %w", tenant, err)
		}
	}
}

// ForceUnlock releases the tenant's lock whoever holds it, and returns the
// lock it released (ok false when there was none).
func (s *StateStore) ForceUnlock(ctx context.Context, tenant string) (previous StateLock, ok bool, err error) {
	if err := checkTenant(tenant); err != nil {
		return StateLock{}, false, err
	}
	for attempt := 0; ; attempt++ {
		held, ok, err := s.lock(ctx, tenant)
		if err != nil || !ok {
			return StateLock{}, false, err
		}
		err = s.locks.Delete(ctx, tenant, jetstream.LastRevision(held.Revision))
		if err == nil {
			return held, true, nil
		}
		if !isWrongLastSequence(err) || attempt >= 10 {
			return StateLock{}, false, fmt.Errorf("force-unlocking the state of %s: %w", tenant, err)
		}
	}
}

// LockHolder reports who holds the tenant's lock: the apply whose credentials
// took it and tofu's lock info.
func (s *StateStore) LockHolder(ctx context.Context, tenant string) (applyID string, info LockInfo, ok bool, err error) {
	if err := checkTenant(tenant); err != nil {
		return "", LockInfo{}, false, err
	}
	held, ok, err := s.lock(ctx, tenant)
	return held.ApplyID, held.Info, ok, err
}

// lock reads the tenant's lock.
func (s *StateStore) lock(ctx context.Context, tenant string) (StateLock, bool, error) {
	// From the leader (see leaderLastMsg): a follower's older answer could
	// show the lock free while it is held, or held by the run before.
	msg, err := leaderLastMsg(ctx, s.nc, "KV_"+TFStateLockBucket, "$KV."+TFStateLockBucket+"."+tenant)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return StateLock{}, false, nil
	}
	if err != nil {
		return StateLock{}, false, fmt.Errorf("reading the state lock of %s: %w", tenant, err)
	}
	if op := msg.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return StateLock{}, false, nil
	}
	var held StateLock
	if err := json.Unmarshal(msg.Data, &held); err != nil {
		return StateLock{}, false, fmt.Errorf("decoding the state lock of %s: %w", tenant, err)
	}
	held.Revision = msg.Sequence
	return held, true, nil
}

// isWrongLastSequence reports whether a conditional write lost to another writer.
func isWrongLastSequence(err error) bool { return errors.Is(err, jetstream.ErrKeyRevisionMismatch) }
