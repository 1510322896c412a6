package identity

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/rezuscloud/rezuscloud/domain"
)

// StaticToken authenticates one bearer token as one identity: the bootstrap
// admin credential until users and API tokens exist. Tokens are compared as
// SHA-256 digests in constant time, so neither content nor length leaks.
type StaticToken struct {
	digest   [32]byte
	identity Identity
}

// NewStaticToken returns an authenticator accepting token as identity.
func NewStaticToken(token string, identity Identity) *StaticToken {
	return &StaticToken{digest: sha256.Sum256([]byte(token)), identity: identity}
}

// Authenticate checks the Authorization: Bearer header.
func (s *StaticToken) Authenticate(r *http.Request) (Identity, error) {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || tok == "" {
		return Identity{}, domain.NewUnauthorized("a bearer token is required (Authorization: Bearer <token>)")
	}
	d := sha256.Sum256([]byte(tok))
	if subtle.ConstantTimeCompare(d[:], s.digest[:]) != 1 {
		return Identity{}, domain.NewUnauthorized("the bearer token is not valid")
	}
	return s.identity, nil
}
