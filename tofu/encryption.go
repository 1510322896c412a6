package tofu

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MinStatePassphraseLength is the shortest state passphrase accepted, in
// characters; OpenTofu's pbkdf2 key provider wants at least 16 bytes.
const MinStatePassphraseLength = 16

// EncryptionConfig returns the value of TF_ENCRYPTION that makes OpenTofu
// (1.10) encrypt state and plans with AES-GCM under a key derived from
// passphrase by PBKDF2. It must reach tofu by environment only, never a
// file or an argument.
//
// Plans are enforced: tofu refuses to write or read them unencrypted. State
// is always written encrypted (aes_gcm is its method) and reads unencrypted
// state through an `unencrypted` fallback, so a tenant whose state predates
// the passphrase migrates on its next apply. Tofu refuses `enforced = true`
// beside an unencrypted fallback, so for state the server enforces it instead:
// with handlers.Config.RequireEncryptedState the backend refuses plain state.
//
// The key provider and method names are recorded in encrypted state: changing
// them makes existing state unreadable, so they are fixed here.
func EncryptionConfig(passphrase string) (string, error) {
	if utf8.RuneCountInString(passphrase) < MinStatePassphraseLength {
		return "", fmt.Errorf("the state passphrase must be at least %d characters", MinStatePassphraseLength)
	}
	if !utf8.ValidString(passphrase) {
		return "", errors.New("the state passphrase must be UTF-8 text")
	}
	return encryptionConfig(hclString(passphrase), ""), nil
}

// encryptionConfig is TF_ENCRYPTION with the pbkdf2 key provider's
// passphrase (an HCL literal) and its further settings (HCL lines, "" for
// OpenTofu's defaults).
func encryptionConfig(passphrase, settings string) string {
	return `key_provider "pbkdf2" "rezus" {
  passphrase = ` + passphrase + `
` + settings + `}
method "aes_gcm" "rezus" {
  keys = key_provider.pbkdf2.rezus
}
method "unencrypted" "migrate" {}
state {
  method = method.aes_gcm.rezus
  fallback {
    method = method.unencrypted.migrate
  }
}
plan {
  method   = method.aes_gcm.rezus
  enforced = true
}
`
}

// keyDerivation is the pbkdf2 key provider's work for a generated state key:
// the fewest iterations OpenTofu accepts (200,000) of SHA-256. A random key
// of 32 bytes needs no stretching (PBKDF2 slows down guessing a passphrase;
// 256 random bits are not guessed), and each tofu command derives the key
// once or twice per state read and write: with OpenTofu's default (600,000
// of SHA-512, 0.41 s here) that was most of a tenant's tofu CPU; this is
// 0.06 s. Encrypted state records the settings it was written with, so state
// written before decrypts as it always did.
const keyDerivation = "  iterations    = 200000\n  hash_function = \"sha256\"\n"

// KeyEncryptionConfig is EncryptionConfig for a tenant's generated state key
// (eventstore.StateKeys) instead of a passphrase: the key's hex is the
// pbkdf2 passphrase, so the same key provider, method and unencrypted
// fallback apply, and state written before there was a key migrates on the
// next apply.
func KeyEncryptionConfig(key []byte) (string, error) {
	if len(key) < MinStatePassphraseLength {
		return "", fmt.Errorf("a state key must be at least %d bytes", MinStatePassphraseLength)
	}
	return encryptionConfig(hclString(hex.EncodeToString(key)), keyDerivation), nil
}

// hclString quotes s as an HCL native-syntax string literal that evaluates to
// s exactly: quotes, backslashes and control characters are escaped, and so
// are the template sequences "${" and "%{".
func hclString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04x`, r)
		case (r == '$' || r == '%') && strings.HasPrefix(s[i+1:], "{"):
			b.WriteRune(r)
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
