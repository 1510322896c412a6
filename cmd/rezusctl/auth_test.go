package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
)

// fakeAuth implements the auth endpoints' contract: login answers a session
// token, whoami names its holder, logout revokes it.
type fakeAuth struct {
	mu       sync.Mutex
	sessions map[string]bool
	logins   []map[string]string
}

// login returns the i-th login request's body.
func (f *fakeAuth) login(i int) map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.logins[i]
}

func (f *fakeAuth) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	token := ""
	if h := r.Header.Get("Authorization"); len(h) > 7 {
		token = h[7:]
	}
	switch r.Method + " " + r.URL.Path {
	case "POST /api/v1/auth/login":
		var req map[string]string
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.logins = append(f.logins, req)
		if req["username"] != "alice" || req["password"] != "correct horse battery" {
			writeStatus(w, domain.NewUnauthorized("wrong user name or password"))
			return
		}
		f.sessions["jwt-1"] = true
		_ = json.NewEncoder(w).Encode(map[string]string{"token": "jwt-1", "expiresAt": "2026-05-02T00:00:00Z", "user": "alice", "role": "edit"})
	case "GET /api/v1/auth/whoami":
		if !f.sessions[token] {
			writeStatus(w, domain.NewUnauthorized("authentication required"))
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"user": "alice", "role": "edit", "authMethod": "session"})
	case "POST /api/v1/auth/logout":
		if !f.sessions[token] {
			writeStatus(w, domain.NewUnauthorized("authentication required"))
			return
		}
		delete(f.sessions, token)
		w.WriteHeader(http.StatusNoContent)
	default:
		writeStatus(w, domain.NewNotFound("route", r.URL.Path))
	}
}

func TestLoginWhoamiLogout(t *testing.T) {
	fa := &fakeAuth{sessions: map[string]bool{}}
	srv := httptest.NewServer(fa)
	defer srv.Close()
	tc := newTestCLI(t)

	tc.stdin = "wrong\n"
	r := tc.run("login", "--server", srv.URL, "-u", "alice", "--password-stdin")
	assert.Equal(t, 1, r.code)
	assert.Equal(t, "error: login failed: wrong user name or password\n", r.stderr)

	tc.stdin = "correct horse battery\n"
	out := tc.ok("login", "--server", srv.URL, "--username", "alice", "--password-stdin")
	host := srv.Listener.Addr().String()
	assert.Equal(t, "logged in to "+srv.URL+" as alice (edit); the session expires at 2026-05-02T00:00:00Z; context \""+host+"\"\n", out)
	assert.Equal(t, map[string]string{"username": "alice", "password": "correct horse battery"}, fa.login(1))

	cfg, err := loadConfig(tc.config)
	require.NoError(t, err)
	assert.Equal(t, host, cfg.CurrentContext)
	assert.Equal(t, &contextEntry{Name: host, Server: srv.URL, Token: "jwt-1"}, cfg.context(host))

	assert.Equal(t, "user:        alice\nrole:        edit\nauth method: session\n", tc.ok("whoami"))
	assert.JSONEq(t, `{"user":"alice","role":"edit","authMethod":"session"}`, tc.ok("whoami", "-o", "json"))

	assert.Equal(t, "logged out of "+srv.URL+" (context \""+host+"\")\n", tc.ok("logout"))
	cfg, _ = loadConfig(tc.config)
	assert.Empty(t, cfg.context(host).Token, "the token is gone locally")
	fa.mu.Lock()
	assert.Empty(t, fa.sessions, "and revoked on the server")
	fa.mu.Unlock()
	r = tc.run("whoami")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "Unauthorized")
	r = tc.run("logout")
	assert.Equal(t, "error: not logged in: the context has no token\n", r.stderr)

	// Logging in again reuses the context of that server.
	tc.stdin = "correct horse battery\n"
	tc.ok("login", "--server", srv.URL, "-u", "alice", "--password-stdin")
	cfg, _ = loadConfig(tc.config)
	assert.Len(t, cfg.Contexts, 1)
}

func TestLoginIntoNamedContext(t *testing.T) {
	fa := &fakeAuth{sessions: map[string]bool{}}
	srv := httptest.NewServer(fa)
	defer srv.Close()
	tc := newTestCLI(t)
	tc.ok("config", "set-context", "lab", "--server", srv.URL, "--tenant", "acme")
	tc.ok("config", "set-context", "other", "--server", "http://elsewhere")

	// The current context's server is used when --server is not given.
	tc.stdin = "correct horse battery\n"
	assert.Contains(t, tc.ok("login", "-u", "alice", "--password-stdin"), `context "lab"`)
	tc.stdin = "correct horse battery\n"
	tc.ok("login", "-u", "alice", "--password-stdin", "--context", "other", "--server", srv.URL)
	cfg, _ := loadConfig(tc.config)
	assert.Equal(t, "lab", cfg.CurrentContext, "--context does not switch the current context")
	assert.Equal(t, &contextEntry{Name: "lab", Server: srv.URL, Token: "jwt-1", Tenant: "acme"}, cfg.context("lab"))
	assert.Equal(t, srv.URL, cfg.context("other").Server)
}

func TestLoginPrompt(t *testing.T) {
	fa := &fakeAuth{sessions: map[string]bool{}}
	srv := httptest.NewServer(fa)
	defer srv.Close()
	tc := newTestCLI(t)

	r := tc.run("login", "--server", srv.URL)
	assert.Equal(t, "error: stdin is not a terminal to prompt for a password on: use --password-stdin\n", r.stderr)

	var stdout, stderr bytes.Buffer
	env := tc.cliEnv(&stdout, &stderr)
	env.StdinIsTerminal = func() bool { return true }
	env.ReadPassword = func() ([]byte, error) { return []byte("correct horse battery"), nil }
	code := newRezusctl(env).run(context.Background(), []string{"rezusctl", "login", "--server", srv.URL, "-u", "alice"})
	assert.Equal(t, 0, code, stderr.String())
	assert.Equal(t, "Password for alice: \n", stderr.String(), "the prompt goes to stderr; the password is not echoed")
}
