package eventstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// SecretsBucket holds secrets: password hashes, API-token hashes, the session
// signing key. It is never projected, never evented and never readable by
// automation credentials.
const SecretsBucket = "rezus-secrets"

// SessionsBucket holds live login sessions; a session's key disappears on
// logout or when the bucket's TTL passes.
const SessionsBucket = "rezus-sessions"

// ErrSecretNotFound says a secret does not exist.
var ErrSecretNotFound = errors.New("secret not found")

// Secrets is a key-value store for secrets.
type Secrets struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	leader leaderReader
}

// OpenSecrets provisions the secrets bucket.
func OpenSecrets(ctx context.Context, s *Store) (*Secrets, error) {
	kv, err := s.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: SecretsBucket, Description: "secrets: never in events, never readable by automation", History: 1,
		Storage: jetstream.FileStorage, Replicas: s.cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("provisioning bucket %s: %w", SecretsBucket, err)
	}
	leader, err := newLeaderReader(s.nc, SecretsBucket)
	if err != nil {
		return nil, err
	}
	return &Secrets{js: s.js, kv: kv, leader: leader}, nil
}

// Get returns a secret.
func (s *Secrets) Get(ctx context.Context, key string) ([]byte, error) {
	// Secrets are read rarely (a login, a token check) and must not be
	// stale: a password changed or a token minted through another replica
	// counts at once, so they are read from the stream's leader.
	v, found, err := s.leader.get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("reading secret: %w", err)
	}
	if !found {
		return nil, ErrSecretNotFound
	}
	return v, nil
}

// Put writes a secret.
func (s *Secrets) Put(ctx context.Context, key string, value []byte) error {
	if _, err := s.kv.Put(ctx, key, value); err != nil {
		return fmt.Errorf("writing secret: %w", err)
	}
	return nil
}

// GetOrCreate returns the secret under key, creating it with generate() when it does
// not exist. Replicas racing here all end up with the one value that won.
func (s *Secrets) GetOrCreate(ctx context.Context, key string, generate func() ([]byte, error)) ([]byte, error) {
	if v, err := s.Get(ctx, key); err == nil {
		return v, nil
	} else if !errors.Is(err, ErrSecretNotFound) {
		return nil, err
	}
	v, err := generate()
	if err != nil {
		return nil, err
	}
	if _, err := s.kv.Create(ctx, key, v); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return s.Get(ctx, key)
		}
		return nil, fmt.Errorf("creating secret: %w", err)
	}
	return v, nil
}

// Create writes a secret only if it does not exist; it reports whether it did.
func (s *Secrets) Create(ctx context.Context, key string, value []byte) (bool, error) {
	if _, err := s.kv.Create(ctx, key, value); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return false, nil
		}
		return false, fmt.Errorf("creating secret: %w", err)
	}
	return true, nil
}

// Delete removes a secret; removing a missing one is not an error.
func (s *Secrets) Delete(ctx context.Context, key string) error {
	if err := s.kv.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("deleting secret: %w", err)
	}
	return nil
}

// Sessions records which login sessions are live.
type Sessions struct {
	kv     jetstream.KeyValue
	leader leaderReader
}

// OpenSessions provisions the sessions bucket; keys live at most ttl.
func OpenSessions(ctx context.Context, s *Store, ttl time.Duration) (*Sessions, error) {
	kv, err := s.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: SessionsBucket, Description: "live login sessions", History: 1, TTL: ttl,
		Storage: jetstream.FileStorage, Replicas: s.cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("provisioning bucket %s: %w", SessionsBucket, err)
	}
	leader, err := newLeaderReader(s.nc, SessionsBucket)
	if err != nil {
		return nil, err
	}
	return &Sessions{kv: kv, leader: leader}, nil
}

// Start records a live session of user.
func (s *Sessions) Start(ctx context.Context, id, user string) error {
	if _, err := s.kv.Create(ctx, id, []byte(user)); err != nil {
		return fmt.Errorf("starting session: %w", err)
	}
	return nil
}

// Live reports whether the session exists (not logged out, not expired).
// It is read from the leader of the bucket's stream, not by a direct get
// that any follower answers: a follower can lag, and then a login through
// another replica would fail here for a moment (a 401 seen in CI) and,
// worse, a logout or a password change through another replica would not
// yet end the session here.
func (s *Sessions) Live(ctx context.Context, id string) (bool, error) {
	_, found, err := s.leader.get(ctx, id)
	if err != nil {
		return false, fmt.Errorf("reading session: %w", err)
	}
	return found, nil
}

// End revokes a session.
func (s *Sessions) End(ctx context.Context, id string) error {
	if err := s.kv.Purge(ctx, id); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("ending session: %w", err)
	}
	return nil
}

// leaderReader reads the latest value of a key of a bucket from the leader
// of the bucket's stream (the stream message get API, not a direct get), so
// it sees every write acknowledged before it: read-after-write across
// replicas.
type leaderReader struct {
	js     nats.JetStreamContext
	bucket string
}

func newLeaderReader(nc *nats.Conn, bucket string) (leaderReader, error) {
	js, err := nc.JetStream()
	if err != nil {
		return leaderReader{}, fmt.Errorf("opening jetstream: %w", err)
	}
	return leaderReader{js: js, bucket: bucket}, nil
}

func (l leaderReader) get(ctx context.Context, key string) ([]byte, bool, error) {
	m, err := l.js.GetLastMsg("KV_"+l.bucket, "$KV."+l.bucket+"."+key, nats.Context(ctx))
	if errors.Is(err, nats.ErrMsgNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return nil, false, nil
	}
	return m.Data, true, nil
}
