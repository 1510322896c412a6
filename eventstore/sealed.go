package eventstore

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Keys the sealer keeps beside the sealed values. Neither is secret: the salt
// only makes a passphrase's key unique to this install, and the check value
// lets a server with the wrong key refuse to start instead of reading garbage.
const (
	sealerSaltKey  = "sealer.salt"
	sealerCheckKey = "sealer.check"
)

// sealedPrefix marks a sealed value and its format version.
var sealedPrefix = []byte("rzs1:")

// sealerCheckText is sealed under sealerCheckKey by the first server and opened
// by every later one.
const sealerCheckText = "rezuscloud sealed secrets"

// ErrWrongSealKey says a sealed value does not open with this server's key:
// the passphrase or key file differs from the one it was sealed with.
var ErrWrongSealKey = errors.New("sealed secret does not open with this key: the secrets passphrase or key file differs from the one it was sealed with")

// DefaultPBKDF2Iterations follows OWASP's 2023 advice for PBKDF2-HMAC-SHA256.
const DefaultPBKDF2Iterations = 600_000

// SealerConfig says where the sealing key comes from.
type SealerConfig struct {
	// Passphrase, when set, derives the key with PBKDF2-SHA256 and a random
	// per-install salt kept in the secrets bucket, so every replica given the
	// same passphrase derives the same key.
	Passphrase string
	// KeyFile holds a random 32-byte key when no passphrase is given; it is
	// created with mode 0600 when missing, and refused when its mode is wider
	// than 0600 or it does not hold 32 bytes. Replicas sharing one NATS
	// cluster need the same file (or a passphrase). Required without a
	// passphrase.
	KeyFile string
	// MoveKeyFrom, when set and not KeyFile, is where the key was kept
	// before (the data dir): a key there is moved to KeyFile when KeyFile
	// does not exist yet, and refused when KeyFile holds another key.
	MoveKeyFrom string
	// Iterations of PBKDF2; default DefaultPBKDF2Iterations.
	Iterations int
}

// SealedSecrets stores values in the secrets bucket sealed with AES-256-GCM,
// so neither a raw read of the bucket nor a copy of the NATS data dir shows
// them. Each value is bound to its key (GCM additional data), so a sealed value
// copied under another key does not open.
type SealedSecrets struct {
	inner *Secrets
	aead  cipher.AEAD
}

// OpenSealedSecrets derives or loads the sealing key and checks it against the
// one the bucket was sealed with.
func OpenSealedSecrets(ctx context.Context, secrets *Secrets, cfg SealerConfig) (*SealedSecrets, error) {
	if cfg.Iterations == 0 {
		cfg.Iterations = DefaultPBKDF2Iterations
	}
	var key []byte
	var err error
	if cfg.Passphrase != "" {
		salt, serr := secrets.GetOrCreate(ctx, sealerSaltKey, func() ([]byte, error) { return random(16) })
		if serr != nil {
			return nil, fmt.Errorf("loading the sealing salt: %w", serr)
		}
		key, err = pbkdf2.Key(sha256.New, cfg.Passphrase, salt, cfg.Iterations, 32)
	} else {
		key, err = loadSealKey(cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("preparing the sealing key: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	s := &SealedSecrets{inner: secrets, aead: aead}
	sealedCheck, err := s.seal(sealerCheckKey, []byte(sealerCheckText))
	if err != nil {
		return nil, err
	}
	stored, err := secrets.GetOrCreate(ctx, sealerCheckKey, func() ([]byte, error) { return sealedCheck, nil })
	if err != nil {
		return nil, fmt.Errorf("checking the sealing key: %w", err)
	}
	if plain, err := s.open(sealerCheckKey, stored); err != nil || string(plain) != sealerCheckText {
		return nil, ErrWrongSealKey
	}
	return s, nil
}

func random(n int) ([]byte, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	return b, nil
}

func (s *SealedSecrets) seal(key string, plain []byte) ([]byte, error) {
	nonce, err := random(s.aead.NonceSize())
	if err != nil {
		return nil, err
	}
	out := append(append([]byte{}, sealedPrefix...), nonce...)
	return s.aead.Seal(out, nonce, plain, []byte(key)), nil
}

func (s *SealedSecrets) open(key string, sealed []byte) ([]byte, error) {
	if !bytes.HasPrefix(sealed, sealedPrefix) {
		return nil, fmt.Errorf("secret %s is not sealed", key)
	}
	body := sealed[len(sealedPrefix):]
	n := s.aead.NonceSize()
	if len(body) < n {
		return nil, fmt.Errorf("secret %s: %w", key, ErrWrongSealKey)
	}
	plain, err := s.aead.Open(nil, body[:n], body[n:], []byte(key))
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", key, ErrWrongSealKey)
	}
	return plain, nil
}

// Get returns the opened value of a secret, ErrSecretNotFound, or
// ErrWrongSealKey when it was sealed with another key.
func (s *SealedSecrets) Get(ctx context.Context, key string) ([]byte, error) {
	v, err := s.inner.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return s.open(key, v)
}

// Put seals and writes a secret.
func (s *SealedSecrets) Put(ctx context.Context, key string, value []byte) error {
	v, err := s.seal(key, value)
	if err != nil {
		return err
	}
	return s.inner.Put(ctx, key, v)
}

// Create seals and writes a secret only if it does not exist; it reports
// whether it did, so replicas racing to create one value agree on the winner.
func (s *SealedSecrets) Create(ctx context.Context, key string, value []byte) (bool, error) {
	v, err := s.seal(key, value)
	if err != nil {
		return false, err
	}
	return s.inner.Create(ctx, key, v)
}

// Delete removes a secret; removing a missing one is not an error.
func (s *SealedSecrets) Delete(ctx context.Context, key string) error {
	return s.inner.Delete(ctx, key)
}

// Keys lists the keys that start with prefix, which must end in a dot (a
// NATS subject token boundary), e.g. "tenant-pki.".
func (s *SealedSecrets) Keys(ctx context.Context, prefix string) ([]string, error) {
	if !strings.HasSuffix(prefix, ".") {
		return nil, fmt.Errorf("key prefix %q must end in a dot", prefix)
	}
	keys, err := WholeKeys(ctx, s.inner.js, SecretsBucket, prefix)
	if err != nil {
		return nil, fmt.Errorf("listing secrets: %w", err)
	}
	// Deleted secrets keep a delete marker under their key.
	live := keys[:0]
	for _, k := range keys {
		_, err := s.inner.kv.Get(ctx, k)
		switch {
		case err == nil:
			live = append(live, k)
		case !errors.Is(err, jetstream.ErrKeyNotFound):
			return nil, fmt.Errorf("listing secrets: %w", err)
		}
	}
	return live, nil
}
