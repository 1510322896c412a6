package eventstore

import (
	"bytes"
	"compress/flate"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rezuscloud/rezuscloud/domain"
)

// Get returns the tenant's current state, or ErrStateNotFound.
func (s *StateStore) Get(ctx context.Context, tenant string) (*State, error) {
	if err := checkTenant(tenant); err != nil {
		return nil, err
	}
	var msg *jetstream.RawStreamMsg
	err := retryUnavailable(ctx, func() error {
		var err error
		msg, err = leaderLastMsg(ctx, s.nc, "KV_"+TFStateBucket, stateSubject(tenant))
		return err
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, ErrStateNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("reading the state of %s: %w", tenant, err)
	}
	return decodeState(tenant, msg)
}

// GetRevision returns one kept version of the tenant's state, or ErrStateNotFound.
func (s *StateStore) GetRevision(ctx context.Context, tenant string, revision uint64) (*State, error) {
	if err := checkTenant(tenant); err != nil {
		return nil, err
	}
	if revision == 0 {
		return nil, ErrStateNotFound
	}
	msg, err := s.stream.GetMsg(ctx, revision)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, ErrStateNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("reading revision %d of the state of %s: %w", revision, tenant, err)
	}
	if msg.Subject != stateSubject(tenant) {
		return nil, ErrStateNotFound
	}
	return decodeState(tenant, msg)
}

// decodeState opens a stored version.
func decodeState(tenant string, msg *jetstream.RawStreamMsg) (*State, error) {
	v := versionOf(msg.Sequence, msg.Time, msg.Header)
	if v.Deleted {
		return nil, ErrStateNotFound
	}
	data := msg.Data
	if msg.Header.Get(headerStateEncoding) == encodingDeflate {
		if v.Size < 0 || v.Size > MaxStateSize {
			return nil, fmt.Errorf("revision %d of the state of %s claims %d bytes", msg.Sequence, tenant, v.Size)
		}
		r := flate.NewReader(bytes.NewReader(msg.Data))
		data = make([]byte, v.Size)
		_, err := io.ReadFull(r, data)
		if err == nil {
			if n, _ := r.Read(make([]byte, 1)); n > 0 {
				err = errors.New("longer than its recorded size")
			}
		}
		if err != nil {
			return nil, fmt.Errorf("inflating revision %d of the state of %s: %w", msg.Sequence, tenant, err)
		}
	}
	if len(data) != v.Size {
		return nil, fmt.Errorf("revision %d of the state of %s is %d bytes, want %d", msg.Sequence, tenant, len(data), v.Size)
	}
	return &State{Data: data, Version: v}, nil
}

// stateHeader is what the store reads from a blob: tofu writes serial and
// lineage at the top level of both plain and encrypted state, and
// encryption_version only on encrypted state.
type stateHeader struct {
	Serial            *uint64 `json:"serial"`
	Lineage           string  `json:"lineage"`
	EncryptionVersion string  `json:"encryption_version"`
}

// InspectState reads a blob's serial, lineage and whether it is encrypted; a
// blob that is not a JSON object is refused as Invalid.
func InspectState(data []byte) (serial uint64, lineage string, encrypted bool, err error) {
	var h stateHeader
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return 0, "", false, domain.NewBadRequest("the state must be a JSON object")
	}
	if err := json.Unmarshal(trimmed, &h); err != nil {
		return 0, "", false, domain.NewBadRequest("the state is not valid JSON: " + err.Error())
	}
	if h.Serial != nil {
		serial = *h.Serial
	}
	return serial, h.Lineage, h.EncryptionVersion != "", nil
}

// Put stores a new version of the tenant's state. It is accepted when the
// state is unlocked, or locked under lockID by owner (the same credential);
// otherwise it fails with a *LockedError. The lock is checked before the write, and the two are separate
// keys: a lock taken between the check and the write does not stop it. Tofu
// takes the lock before it reads the state, so with locking on (the runner
// always sets it) the writer is the holder.
func (s *StateStore) Put(ctx context.Context, tenant, lockID string, owner LockOwner, data []byte) (StateVersion, error) {
	if err := checkTenant(tenant); err != nil {
		return StateVersion{}, err
	}
	if len(data) > MaxStateSize {
		return StateVersion{}, &domain.Error{Reason: domain.ReasonRequestEntityTooLarge,
			Message: fmt.Sprintf("the state is %d bytes; at most %d are stored", len(data), MaxStateSize)}
	}
	serial, lineage, encrypted, err := InspectState(data)
	if err != nil {
		return StateVersion{}, err
	}
	stored, err := deflate(data)
	if err != nil {
		return StateVersion{}, err
	}
	if len(stored) > maxStoredSize {
		return StateVersion{}, &domain.Error{Reason: domain.ReasonRequestEntityTooLarge,
			Message: fmt.Sprintf("the state deflates to %d bytes; at most %d are stored", len(stored), maxStoredSize)}
	}
	if limit := s.nc.MaxPayload(); int64(len(stored))+64<<10 > limit {
		return StateVersion{}, &domain.Error{Reason: domain.ReasonRequestEntityTooLarge,
			Message: fmt.Sprintf("the state takes %d bytes stored; the NATS server's max_payload (%d bytes) is too small: raise it to 40 MiB", len(stored), limit)}
	}
	if err := s.checkLock(ctx, tenant, lockID, owner); err != nil {
		return StateVersion{}, err
	}
	sum := md5.Sum(data)
	msg := &nats.Msg{Subject: stateSubject(tenant), Data: stored, Header: nats.Header{}}
	msg.Header.Set(headerStateEncoding, encodingDeflate)
	msg.Header.Set(headerStateSize, strconv.Itoa(len(data)))
	msg.Header.Set(headerStateSerial, strconv.FormatUint(serial, 10))
	msg.Header.Set(headerStateLineage, lineage)
	msg.Header.Set(headerStateMD5, hex.EncodeToString(sum[:]))
	msg.Header.Set(headerStateEncrypted, strconv.FormatBool(encrypted))
	var ack *jetstream.PubAck
	err = retryWrite(ctx, func() error {
		var err error
		ack, err = s.js.PublishMsg(ctx, msg)
		return err
	})
	if err != nil {
		return StateVersion{}, fmt.Errorf("writing the state of %s: %w", tenant, err)
	}
	return StateVersion{Revision: ack.Sequence, Serial: serial, Lineage: lineage, Size: len(data),
		MD5: hex.EncodeToString(sum[:]), Encrypted: encrypted, Time: time.Now().UTC()}, nil
}

// deflate compresses a blob at the fastest level: it still entropy-codes,
// which is what makes a 32 MiB state fit (see maxStoredSize).
func deflate(data []byte) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(len(data)/2 + 1024)
	w, err := flate.NewWriter(&buf, flate.BestSpeed)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(data); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Delete removes the tenant's current state (tofu's DELETE), under the same
// lock rule as Put. Earlier versions stay in the history.
func (s *StateStore) Delete(ctx context.Context, tenant, lockID string, owner LockOwner) error {
	if err := checkTenant(tenant); err != nil {
		return err
	}
	if err := s.checkLock(ctx, tenant, lockID, owner); err != nil {
		return err
	}
	if err := s.states.Delete(ctx, tenant); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("deleting the state of %s: %w", tenant, err)
	}
	return nil
}

// Purge removes the tenant's state with its whole history and its lock: for a
// tenant that is gone.
func (s *StateStore) Purge(ctx context.Context, tenant string) error {
	if err := checkTenant(tenant); err != nil {
		return err
	}
	if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(stateSubject(tenant))); err != nil {
		return fmt.Errorf("purging the state of %s: %w", tenant, err)
	}
	if err := s.locks.Purge(ctx, tenant); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("purging the state lock of %s: %w", tenant, err)
	}
	return nil
}
