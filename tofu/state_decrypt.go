package tofu

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/pbkdf2"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
)

// stateKeyProviderMeta is where OpenTofu records the pbkdf2 key provider's
// parameters in encrypted state: "key_provider.<type>.<name>" of the key
// provider EncryptionConfig declares.
const stateKeyProviderMeta = "key_provider.pbkdf2.rezus"

// encryptedState is OpenTofu's envelope of encrypted state (1.7+,
// internal/encryption: meta, encrypted_data, encryption_version).
type encryptedState struct {
	Meta    map[string][]byte `json:"meta"`
	Data    []byte            `json:"encrypted_data"`
	Version string            `json:"encryption_version"`
}

// pbkdf2Meta is the pbkdf2 key provider's metadata.
type pbkdf2Meta struct {
	Salt         []byte `json:"salt"`
	Iterations   int    `json:"iterations"`
	HashFunction string `json:"hash_function"`
	KeyLength    int    `json:"key_length"`
}

// ErrStateNotDecryptable says a blob is encrypted in a way DecryptState
// does not read (another key provider or method than EncryptionConfig's).
var ErrStateNotDecryptable = errors.New("the state is not encrypted the way RezusCloud encrypts it")

// StateEncrypted says whether a state blob is in OpenTofu's encrypted
// envelope (a plain state, or what is not JSON, is not).
func StateEncrypted(blob []byte) bool {
	var env encryptedState
	return json.Unmarshal(blob, &env) == nil && env.Version != ""
}

// DecryptState reads state that tofu encrypted under EncryptionConfig(passphrase)
// (pbkdf2 key provider, aes_gcm method), as OpenTofu does: the key is pbkdf2
// of the passphrase with the salt, iterations, hash and length recorded in
// the blob, the data is nonce || AES-GCM ciphertext. Plain state is returned
// as it is. A wrong passphrase is an error, never garbage.
func DecryptState(blob []byte, passphrase string) ([]byte, error) {
	var env encryptedState
	if err := json.Unmarshal(blob, &env); err != nil {
		return nil, fmt.Errorf("the state is not JSON: %w", err)
	}
	if env.Version == "" {
		return blob, nil
	}
	if env.Version != "v0" {
		return nil, fmt.Errorf("%w: encryption version %q", ErrStateNotDecryptable, env.Version)
	}
	raw, ok := env.Meta[stateKeyProviderMeta]
	if !ok {
		return nil, fmt.Errorf("%w: no %s metadata", ErrStateNotDecryptable, stateKeyProviderMeta)
	}
	var m pbkdf2Meta
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%w: %s metadata: %v", ErrStateNotDecryptable, stateKeyProviderMeta, err)
	}
	var h func() hash.Hash
	switch m.HashFunction {
	case "sha512":
		h = sha512.New
	case "sha256":
		h = sha256.New
	default:
		return nil, fmt.Errorf("%w: hash function %q", ErrStateNotDecryptable, m.HashFunction)
	}
	if len(m.Salt) == 0 || m.Iterations <= 0 || m.Iterations > 10_000_000 || (m.KeyLength != 16 && m.KeyLength != 24 && m.KeyLength != 32) {
		return nil, fmt.Errorf("%w: pbkdf2 parameters out of range", ErrStateNotDecryptable)
	}
	key, err := pbkdf2.Key(h, passphrase, m.Salt, m.Iterations, m.KeyLength)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	if len(env.Data) < gcm.NonceSize() {
		return nil, fmt.Errorf("%w: the encrypted data is too short", ErrStateNotDecryptable)
	}
	plain, err := gcm.Open(nil, env.Data[:gcm.NonceSize()], env.Data[gcm.NonceSize():], nil)
	if err != nil {
		return nil, errors.New("decrypting the state: the key does not open it (another passphrase or state key)")
	}
	return plain, nil
}
