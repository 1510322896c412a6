package emulator

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/rezuscloud/rezuscloud/domain"
)

// APITokenFile is where, under Config.StateDir, the HTTP API's bearer
// token is kept (mode 0600), so it outlives restarts and the Provider
// credentials made from it stay good.
const APITokenFile = "api-token"

// apiToken is cfg.APIToken, else the one kept in the state dir, else a new
// random one (kept there when there is a state dir).
func apiToken(cfg Config) (string, error) {
	if cfg.APIToken != "" {
		return cfg.APIToken, nil
	}
	path := filepath.Join(cfg.StateDir, APITokenFile)
	if cfg.StateDir != "" {
		b, err := os.ReadFile(path)
		if tok := strings.TrimSpace(string(b)); err == nil && tok != "" {
			return tok, nil
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("reading the API token: %w", err)
		}
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	tok := hex.EncodeToString(b)
	if cfg.StateDir == "" {
		return tok, nil
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("keeping the API token: %w", err)
	}
	return tok, nil
}

// APIToken is the bearer token every request to Handler's /v1 routes
// must carry (Authorization: Bearer <token>).
func (e *Emulator) APIToken() string { return e.token }

// requireToken answers 401 to a request without the API token: the API
// creates and deletes nodes and injects faults that make remediation
// replace machines, and any local process can reach its port.
func (e *Emulator) requireToken(next http.Handler) http.Handler {
	want := []byte(e.token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, got, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="talos-emulator"`)
			writeError(w, domain.NewUnauthorized("the emulator API needs its bearer token (Authorization: Bearer <token>; "+
				"the token is in the emulator's state dir, file "+APITokenFile+")"))
			return
		}
		next.ServeHTTP(w, r)
	})
}
