package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// emulatorAPI is the URL and bearer token of the server's emulator API,
// from the file serve --with-emulator writes for its owner (the Provider
// keeps them in sealed credentials). Read at every call: a restarted server
// listens on a new port.
func (p *proc) emulatorAPI() (url, token string) {
	p.t.Helper()
	b, err := os.ReadFile(filepath.Join(p.dataDir, EmulatorAPIFile))
	require.NoError(p.t, err)
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, "=")
		switch k {
		case "EMULATOR_ENDPOINT":
			url = v
		case "EMULATOR_TOKEN":
			token = v
		}
	}
	require.NotEmpty(p.t, url, "%s", b)
	require.NotEmpty(p.t, token, "%s", b)
	return url, token
}

// emulatorRequest is a request to the server's emulator API, with its token.
func (p *proc) emulatorRequest(method, path string, body io.Reader) *http.Request {
	p.t.Helper()
	url, token := p.emulatorAPI()
	req, err := http.NewRequest(method, url+path, body)
	require.NoError(p.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	return req
}

// TestEmulatorAPINeedsItsToken replays issue 42's finding 12 against a
// real server with --with-emulator: every role read the emulator API's URL
// in the Provider `emulated` (spec.config.endpoint), and any local process
// could put a node unreachable through it (PUT /v1/nodes/{n}/faults), so
// that remediation replaced the machine. The API now answers 401 without
// its token and injects nothing; the Provider names sealed credentials
// instead of the URL, and neither a viewer nor an editor (nor an admin,
// through the API) sees the URL or the token.
func TestEmulatorAPINeedsItsToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startServer(t, dir, "--with-emulator", "--emulator-kube", "off", "--tofu", "/nonexistent/tofu")
	require.Eventually(t, func() bool {
		code, prov := p.do(http.MethodGet, "/api/v1/providers/emulated", "")
		return code == http.StatusOK && prov["spec"].(map[string]any)["credentialsRef"] != nil
	}, time.Minute, 100*time.Millisecond, "the emulated provider is registered")
	url, tok := p.emulatorAPI()
	fi, err := os.Stat(filepath.Join(dir, EmulatorAPIFile))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	resp, err := http.DefaultClient.Do(p.emulatorRequest(http.MethodPost, "/v1/nodes", strings.NewReader(`{"name":"n1","cluster":"c"}`)))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	// The attack: a local process that found the port.
	for _, auth := range []string{"", "Bearer wrong", "Bearer " + token} { // the server's admin token is not the emulator's
		req, err := http.NewRequest(http.MethodPut, url+"/v1/nodes/n1/faults", strings.NewReader(`{"unreachable":true}`))
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%q: %s", auth, b)
	}
	resp, err = http.DefaultClient.Do(p.emulatorRequest(http.MethodGet, "/v1/nodes/n1", nil))
	require.NoError(t, err)
	var node struct {
		Phase  string
		Faults map[string]any
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&node))
	resp.Body.Close()
	require.Equal(t, "maintenance", node.Phase, "no fault was injected")
	require.Empty(t, node.Faults)

	// What every role reads: no URL, no token.
	const password = "a password long enough for the policy"
	sessions := map[string]string{"admin": token}
	for _, u := range []struct{ name, role string }{{"vic", "view"}, {"ed", "edit"}} {
		code, body := p.do(http.MethodPost, "/api/v1/users", `{"metadata":{"name":"`+u.name+`"},"spec":{"role":"`+u.role+`","password":"`+password+`"}}`)
		require.Equal(t, http.StatusCreated, code, body)
		resp, err := http.Post(p.url+"/api/v1/auth/login", "application/json", strings.NewReader(`{"username":"`+u.name+`","password":"`+password+`"}`))
		require.NoError(t, err)
		var login struct{ Token string }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&login))
		resp.Body.Close()
		require.NotEmpty(t, login.Token)
		sessions[u.name] = login.Token
	}
	host := strings.TrimPrefix(url, "http://")
	for user, session := range sessions {
		for _, path := range []string{"/api/v1/providers/emulated", "/api/v1/providers", "/api/v1/events?kind=Provider", "/api/v1/events", "/api/v1/credentials/emulated"} {
			req, err := http.NewRequest(http.MethodGet, p.url+path, nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+session)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.NotContains(t, string(b), host, "%s GET %s", user, path)
			require.NotContains(t, string(b), tok, "%s GET %s", user, path)
			if path == "/api/v1/credentials/emulated" && user != "admin" {
				require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s GET %s: %s", user, path, b)
			} else {
				require.Equal(t, http.StatusOK, resp.StatusCode, "%s GET %s: %s", user, path, b)
			}
		}
	}
	code, prov := p.do(http.MethodGet, "/api/v1/providers/emulated", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, map[string]any{"name": "emulated"}, prov["spec"].(map[string]any)["credentialsRef"])
}
