package identity

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
)

// CSRFToken is the anti-forgery token for forms of a browser bound to binding
// (the session cookie's value, or before sign-in a random pre-session cookie):
// an HMAC under a key derived from the session signing key. It needs no
// storage, and a token for one session is worthless for another.
func (s *Service) CSRFToken(binding string) string {
	m := hmac.New(sha256.New, s.csrfKey())
	m.Write([]byte(binding))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// CheckCSRF reports, in constant time, whether token is binding's CSRF token.
func (s *Service) CheckCSRF(binding, token string) bool {
	if binding == "" || token == "" {
		return false
	}
	return hmac.Equal([]byte(s.CSRFToken(binding)), []byte(token))
}

func (s *Service) csrfKey() []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("rezuscloud csrf v1"))
	return m.Sum(nil)
}
