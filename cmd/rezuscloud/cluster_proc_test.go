//go:build !e2e && !browser

// The cluster tests run once, in the process suite: the e2e and browser
// suites compile every untagged test of this package, and a three-replica
// cluster beside theirs only slows them down.

package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestClusterFlagsRefuseBadInput(t *testing.T) {
	t.Parallel()
	key := writeClusterKey(t)
	// Never bound: every case is refused before the route listener opens.
	route := "127.0.0.1:6222"
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"peers without a route listener", []string{"--peers", "h1:6222"}, "--peers needs --cluster-listen"},
		{"no shared key", []string{"--cluster-listen", route, "--peers", "h1:6222"}, "--secrets-key-file"},
		{"no peers", []string{"--cluster-listen", route, "--secrets-key-file", key}, "--peers is required"},
		{"own address", []string{"--cluster-listen", route, "--peers", route + ",h2:6222", "--secrets-key-file", key}, "own --cluster-listen"},
		{"bad peer", []string{"--cluster-listen", route, "--peers", "h1", "--secrets-key-file", key}, `--peers: "h1" is not host:port`},
		{"bad route listener", []string{"--cluster-listen", "6222", "--peers", "h1:6222", "--secrets-key-file", key}, "--cluster-listen"},
		{"external nats too", []string{"--cluster-listen", route, "--peers", "h1:6222", "--secrets-key-file", key, "--nats-url", "nats://x:4222"}, "--nats-url"},
		{"more replicas than nodes", []string{"--cluster-listen", route, "--peers", "h1:6222,h2:6222", "--secrets-key-file", key, "--replicas", "5"}, "--replicas 5"},
		{"missing key file", []string{"--cluster-listen", route, "--peers", "h1:6222", "--secrets-key-file", filepath.Join(t.TempDir(), "nope")}, "give every replica a copy"},
		{"image factory not a URL", []string{"--image-factory", "factory.talos.dev"}, `--image-factory "factory.talos.dev" must be the factory's http(s) URL`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"serve", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir()}, tc.args...)
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = append(os.Environ(), "REZUS_TEST_MAIN=1")
			out, err := cmd.CombinedOutput()
			require.Error(t, err, "%s", out)
			require.Contains(t, string(out), tc.want)
		})
	}
}

// TestReplicasWaitForTheirCluster starts one replica of three alone: it
// listens, says on /readyz and in its log what it waits for, and becomes
// ready once the others start. A session issued by one replica then works
// on another, and a write through one is read through the others.
func TestReplicasWaitForTheirCluster(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t)
	first := c.launch(t, 0)
	var msg string
	require.Eventually(t, func() bool {
		resp, err := http.Get(first.url + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var st struct{ Message string }
		_ = json.NewDecoder(resp.Body).Decode(&st)
		msg = st.Message
		return resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(msg, "meta leader")
	}, startWithin, 50*time.Millisecond)
	require.Contains(t, msg, "waiting for the JetStream cluster to elect a meta leader (1 of 3 peers connected)")
	require.Eventually(t, func() bool {
		return strings.Contains(first.log(), `"msg":"waiting for the JetStream cluster to elect a meta leader (1 of 3 peers connected)"`)
	}, startWithin, 50*time.Millisecond, "the log says what the replica waits for")
	resp, err := http.Get(first.url + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "alive while it waits")

	ps := []*proc{first, c.launch(t, 1), c.launch(t, 2)}
	for i, p := range ps {
		p.waitReady(c.dirs[i])
	}
	code, body := ps[1].do(http.MethodPost, "/api/v1/tenants", `{"metadata":{"name":"acme"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	for _, p := range []*proc{ps[0], ps[2]} {
		// A replica whose read model is still catching up answers 503 with
		// Retry-After, as a client is told to retry; on a loaded machine it
		// can (CI): the read is retried as a client would, never a 404.
		deadline := time.Now().Add(time.Minute)
		for {
			code, body := p.do(http.MethodGet, "/api/v1/tenants/acme", "")
			if code == http.StatusOK {
				break
			}
			require.Equal(t, http.StatusServiceUnavailable, code, "a write through one replica is read through another: %v", body)
			require.True(t, time.Now().Before(deadline), "a write through one replica is read through another within a minute: %v", body)
			time.Sleep(200 * time.Millisecond)
		}
	}

	// The first admin's password and the session signing key are shared:
	// a login on one replica is a session on the others.
	var password []byte
	for _, d := range c.dirs {
		if b, err := os.ReadFile(filepath.Join(d, "initial-admin-password")); err == nil {
			password = bytes.TrimSpace(b)
		}
	}
	require.NotEmpty(t, password, "one replica created the first admin")
	login, _ := json.Marshal(map[string]string{"username": "admin", "password": string(password)})
	resp, err = http.Post(ps[2].url+"/api/v1/auth/login", "application/json", bytes.NewReader(login))
	require.NoError(t, err)
	var session struct{ Token string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&session))
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	for _, p := range ps {
		// A replica still catching up with the session's login answers 503
		// (as above); a client retries. Never 401.
		deadline := time.Now().Add(time.Minute)
		for {
			req, _ := http.NewRequest(http.MethodGet, p.url+"/api/v1/tenants/acme", nil)
			req.Header.Set("Authorization", "Bearer "+session.Token)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
			require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "the session from %s works on %s", ps[2].url, p.url)
			require.True(t, time.Now().Before(deadline), "the session from %s works on %s within a minute", ps[2].url, p.url)
			time.Sleep(200 * time.Millisecond) // a client's retry; nothing to wait on
		}
	}
	for _, p := range ps {
		require.NotContains(t, p.log(), "rezuscloud-route:", "the route password is never logged")
	}
}
