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

// Terraform state lives in two buckets: TFStateBucket holds each tenant's
// state blob under the tenant's name, with its last TFStateHistory versions
// kept; TFStateLockBucket holds each tenant's lock, taken with a create that
// fails when the key exists and released with a delete conditional on the
// revision that took it, so two replicas on one NATS cannot both hold it.
const (
	TFStateBucket     = "rezus-tfstate"
	TFStateLockBucket = "rezus-tfstate-locks"
	// TFStateHistory is how many versions of a tenant's state are kept.
	TFStateHistory = 16
	// MaxStateSize is the largest state blob stored.
	MaxStateSize = 32 << 20
	// maxStoredSize bounds a stored (compressed) blob: JetStream's file store
	// refuses records over 32 MiB, subject and headers included, so blobs are
	// kept deflated. Tofu state is JSON text, which never fills 8 bits a byte,
	// so every state up to MaxStateSize deflates below this (random base64,
	// what encrypted state holds, to about 75%).
	maxStoredSize = MaxStateSize - 64<<10
)

// Headers each stored state version carries, so versions can be listed
// without reading the blobs.
const (
	headerStateSerial    = "Rezus-State-Serial"
	headerStateLineage   = "Rezus-State-Lineage"
	headerStateMD5       = "Rezus-State-Md5"
	headerStateEncrypted = "Rezus-State-Encrypted"
	headerStateSize      = "Rezus-State-Size"
	headerStateEncoding  = "Rezus-State-Encoding"
	headerKVOperation    = "KV-Operation"
	encodingDeflate      = "deflate"
)

// stateKind names the state in errors.
const stateKind = "TerraformState"

// ErrStateNotFound says a tenant has no state (never written, or deleted).
var ErrStateNotFound = errors.New("terraform state not found")

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

// StateLock is a held lock: tofu's lock info and the apply whose credentials
// took it, so a stale lock can be traced to a run that is no longer going.
type StateLock struct {
	Info    LockInfo `json:"info"`
	ApplyID string   `json:"applyID,omitempty"`
	// Revision is the lock key's revision; a release is conditional on it.
	Revision uint64 `json:"-"`
}

// LockedError says a tenant's state is locked by someone else.
type LockedError struct {
	Tenant string
	Holder StateLock
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("the terraform state of tenant %q is locked by lock %s (%s by %s)",
		e.Tenant, e.Holder.Info.ID, e.Holder.Info.Operation, e.Holder.Info.Who)
}

// Unwrap makes a LockedError a domain Conflict for callers that do not care who holds the lock.
func (e *LockedError) Unwrap() error {
	return domain.NewConflict(stateKind, e.Tenant, "the state is locked by lock "+e.Holder.Info.ID)
}

// StateVersion describes one stored version of a tenant's state.
type StateVersion struct {
	// Revision is the version's position in the bucket (its stream sequence).
	Revision uint64 `json:"revision"`
	// Serial and Lineage are tofu's, read from the blob (also present on encrypted state).
	Serial  uint64 `json:"serial"`
	Lineage string `json:"lineage"`
	// Size is the blob's length in bytes; MD5 its digest in hex.
	Size int    `json:"size"`
	MD5  string `json:"md5"`
	// Encrypted is set when tofu encrypted the state (TF_ENCRYPTION).
	Encrypted bool      `json:"encrypted"`
	Time      time.Time `json:"time"`
	// Deleted marks the version a DELETE left: no blob.
	Deleted bool `json:"deleted,omitempty"`
}

// State is a state blob and its version.
type State struct {
	Data    []byte
	Version StateVersion
}

// StateStore keeps Terraform state blobs and their locks.
type StateStore struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	states jetstream.KeyValue
	stream jetstream.Stream
	locks  jetstream.KeyValue
}

// OpenStateStore provisions the state and lock buckets.
func OpenStateStore(ctx context.Context, s *Store) (*StateStore, error) {
	states, err := s.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: TFStateBucket, Description: "terraform state blobs, one key per tenant",
		History: TFStateHistory, MaxValueSize: MaxStateSize,
		Storage: jetstream.FileStorage, Replicas: s.cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("provisioning bucket %s: %w", TFStateBucket, err)
	}
	stream, err := s.js.Stream(ctx, "KV_"+TFStateBucket)
	if err != nil {
		return nil, fmt.Errorf("opening bucket %s: %w", TFStateBucket, err)
	}
	locks, err := s.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: TFStateLockBucket, Description: "terraform state locks, one key per tenant", History: 1,
		Storage: jetstream.FileStorage, Replicas: s.cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("provisioning bucket %s: %w", TFStateLockBucket, err)
	}
	return &StateStore{nc: s.nc, js: s.js, states: states, stream: stream, locks: locks}, nil
}

func stateSubject(tenant string) string { return "$KV." + TFStateBucket + "." + tenant }

func checkTenant(tenant string) error {
	if causes := domain.ValidateName(tenant, "tenant"); causes != nil {
		return domain.NewBadRequest("bad tenant name: "+causes[0].Message, causes...)
	}
	return nil
}

// Get returns the tenant's current state, or ErrStateNotFound.
func (s *StateStore) Get(ctx context.Context, tenant string) (*State, error) {
	if err := checkTenant(tenant); err != nil {
		return nil, err
	}
	var msg *jetstream.RawStreamMsg
	err := retryUnavailable(ctx, func() error {
		var err error
		msg, err = s.stream.GetLastMsgForSubject(ctx, stateSubject(tenant))
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

// versionOf reads a version from a stored message's headers.
func versionOf(seq uint64, t time.Time, h nats.Header) StateVersion {
	v := StateVersion{Revision: seq, Time: t.UTC(), Lineage: h.Get(headerStateLineage), MD5: h.Get(headerStateMD5),
		Encrypted: h.Get(headerStateEncrypted) == "true"}
	v.Serial, _ = strconv.ParseUint(h.Get(headerStateSerial), 10, 64)
	v.Size, _ = strconv.Atoi(h.Get(headerStateSize))
	if op := h.Get(headerKVOperation); op == "DEL" || op == "PURGE" {
		v.Deleted = true
	}
	return v
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
// state is unlocked or lockID is the holder's; otherwise it fails with a
// *LockedError. The lock is checked before the write, and the two are separate
// keys: a lock taken between the check and the write does not stop it. Tofu
// takes the lock before it reads the state, so with locking on (the runner
// always sets it) the writer is the holder.
func (s *StateStore) Put(ctx context.Context, tenant, lockID string, data []byte) (StateVersion, error) {
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
	if err := s.checkLock(ctx, tenant, lockID); err != nil {
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

// checkLock fails with a *LockedError unless the state is unlocked or held by lockID.
func (s *StateStore) checkLock(ctx context.Context, tenant, lockID string) error {
	held, ok, err := s.lock(ctx, tenant)
	if err != nil || !ok || held.Info.ID == lockID {
		return err
	}
	return &LockedError{Tenant: tenant, Holder: held}
}

// Delete removes the tenant's current state (tofu's DELETE), under the same
// lock rule as Put. Earlier versions stay in the history.
func (s *StateStore) Delete(ctx context.Context, tenant, lockID string) error {
	if err := checkTenant(tenant); err != nil {
		return err
	}
	if err := s.checkLock(ctx, tenant, lockID); err != nil {
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

// versionsFetchWait bounds one fetch of state versions that are known to exist.
const versionsFetchWait = 10 * time.Second

// Versions lists the kept versions of the tenant's state, newest first,
// without reading the blobs.
func (s *StateStore) Versions(ctx context.Context, tenant string) ([]StateVersion, error) {
	if err := checkTenant(tenant); err != nil {
		return nil, err
	}
	// A fetch waits for a first message; make sure there is one.
	if _, err := s.stream.GetLastMsgForSubject(ctx, stateSubject(tenant)); errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("listing the state versions of %s: %w", tenant, err)
	}
	cons, err := s.stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		FilterSubject: stateSubject(tenant), HeadersOnly: true, DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true, InactiveThreshold: time.Minute,
	})
	if err != nil {
		return nil, fmt.Errorf("listing the state versions of %s: %w", tenant, err)
	}
	defer func() { _ = s.stream.DeleteConsumer(context.WithoutCancel(ctx), cons.CachedInfo().Name) }()
	var out []StateVersion
	// Fetch exactly what the consumer has pending, waiting for it: a fetch that
	// does not wait can come back empty from a consumer created a moment ago on
	// a busy server, and an empty answer would claim the state has no versions.
	// The bucket keeps TFStateHistory versions; a few more may land while we read.
	for pending := cons.CachedInfo().NumPending; pending > 0 && len(out) <= 2*TFStateHistory; {
		batch, err := cons.Fetch(int(min(pending, TFStateHistory)), jetstream.FetchMaxWait(versionsFetchWait))
		if err != nil {
			return nil, fmt.Errorf("listing the state versions of %s: %w", tenant, err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			meta, err := msg.Metadata()
			if err != nil {
				return nil, fmt.Errorf("listing the state versions of %s: %w", tenant, err)
			}
			out = append(out, versionOf(meta.Sequence.Stream, meta.Timestamp, msg.Headers()))
			pending = meta.NumPending
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, fmt.Errorf("listing the state versions of %s: %w", tenant, err)
		}
		if n == 0 {
			return nil, fmt.Errorf("listing the state versions of %s: no answer within %s", tenant, versionsFetchWait)
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

// Lock takes the tenant's lock for info.ID on behalf of applyID. When someone
// else holds it, it fails with a *LockedError naming the holder. Taking a lock
// one already holds (same ID) succeeds.
func (s *StateStore) Lock(ctx context.Context, tenant string, info LockInfo, applyID string) (StateLock, error) {
	if err := checkTenant(tenant); err != nil {
		return StateLock{}, err
	}
	if info.ID == "" {
		return StateLock{}, domain.NewBadRequest("the lock info has no ID", domain.Cause{Field: "ID", Type: domain.CauseRequired, Message: "required"})
	}
	val, err := json.Marshal(StateLock{Info: info, ApplyID: applyID})
	if err != nil {
		return StateLock{}, err
	}
	for attempt := 0; ; attempt++ {
		rev, err := s.locks.Create(ctx, tenant, val)
		if err == nil {
			return StateLock{Info: info, ApplyID: applyID, Revision: rev}, nil
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
		if held.Info.ID == info.ID {
			return held, nil
		}
		return StateLock{}, &LockedError{Tenant: tenant, Holder: held}
	}
}

// Unlock releases the lock id holds. Releasing a state nobody holds succeeds
// (a retried release); one held by another id fails with a *LockedError.
func (s *StateStore) Unlock(ctx context.Context, tenant, id string) error {
	if err := checkTenant(tenant); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		held, ok, err := s.lock(ctx, tenant)
		if err != nil || !ok {
			return err
		}
		if held.Info.ID != id {
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
	e, err := s.locks.Get(ctx, tenant)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return StateLock{}, false, nil
	}
	if err != nil {
		return StateLock{}, false, fmt.Errorf("reading the state lock of %s: %w", tenant, err)
	}
	var held StateLock
	if err := json.Unmarshal(e.Value(), &held); err != nil {
		return StateLock{}, false, fmt.Errorf("decoding the state lock of %s: %w", tenant, err)
	}
	held.Revision = e.Revision()
	return held, true, nil
}

// isWrongLastSequence reports whether a conditional write lost to another writer.
func isWrongLastSequence(err error) bool { return errors.Is(err, jetstream.ErrKeyRevisionMismatch) }
