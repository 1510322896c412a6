package main

// The server the end-to-end tests run: built once, started on port 0.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/internal/leaktest"
)

// The end-to-end test runs the real server as a child process (its package
// main cannot be imported), built once per test binary.
var (
	serverBuild    sync.Once
	serverBin      string
	serverBuildErr error
	serverBuildDir string
)

// TestMain fails the tests when a goroutine or a process (a server they
// started) outlives them, and removes the server built for them.
func TestMain(m *testing.M) {
	leaktest.VerifyTestMainAfter(m, func() {
		if serverBuildDir != "" {
			os.RemoveAll(serverBuildDir)
		}
	})
}

func buildServer(t *testing.T) string {
	t.Helper()
	serverBuild.Do(func() {
		serverBuildDir, serverBuildErr = os.MkdirTemp("", "rezusctl-e2e-")
		if serverBuildErr != nil {
			return
		}
		root, err := filepath.Abs(filepath.Join("..", ".."))
		if err != nil {
			serverBuildErr = err
			return
		}
		serverBin = filepath.Join(serverBuildDir, "rezuscloud")
		cmd := exec.Command("go", "build", "-o", serverBin, "./cmd/rezuscloud")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			serverBuildErr = fmt.Errorf("go build ./cmd/rezuscloud: %v\n%s", err, out)
		}
	})
	require.NoError(t, serverBuildErr)
	return serverBin
}

// e2eServer is a running rezuscloud.
type e2eServer struct {
	url, token, adminPassword string
	log                       *syncBuffer
}

const e2eAdminPassword = "e2e-admin-password-123"

// startServer starts a server; extra are more flags of serve.
func startServer(t *testing.T, extra ...string) *e2eServer {
	bin := buildServer(t)
	s := &e2eServer{token: "e2e-admin-token-0123456789", adminPassword: e2eAdminPassword, log: &syncBuffer{}}
	exited := runServer(t, bin, s.log, append([]string{"serve", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--admin-token", s.token, "--log-level", "info",
		// The CLI's tests write module providers without a provider mirror.
		"--allow-provider-downloads"}, extra...)...)
	s.url = "http://" + listening(t, s.log, exited)

	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-exited:
			t.Fatalf("the server exited: %v\n%s", err, s.log.String())
		default:
		}
		resp, err := http.Get(s.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		require.True(t, time.Now().Before(deadline), "the server did not become ready:\n%s", s.log.String())
		time.Sleep(50 * time.Millisecond) // polling a child process; there is nothing to wait on
	}
}

// listening waits until the server, started on port 0, says in its log
// which address it got, and answers it: a port picked free beforehand can be
// taken by another process before the server binds it.
func listening(t *testing.T, log *syncBuffer, exited <-chan error) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, line := range strings.Split(log.String(), "\n") {
			var l struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "listening" && l.Addr != "" {
				return l.Addr
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("the server exited: %v\n%s", err, log.String())
		default:
		}
		require.True(t, time.Now().Before(deadline), "the server did not say where it listens:\n%s", log.String())
		time.Sleep(20 * time.Millisecond) // polling a child process's log; there is nothing to wait on
	}
}

// runServer starts the server binary with the e2e admin password, stops it with
// SIGTERM when the test ends, and returns a channel that receives its exit.
func runServer(t *testing.T, bin string, log *syncBuffer, args ...string) <-chan error {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "REZUSCLOUD_ADMIN_PASSWORD="+e2eAdminPassword)
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("server log:\n%s", log.String())
		}
	})
	return exited
}

// api calls the server directly, standing in for another user.
func (s *e2eServer) api(t *testing.T, method, path, contentType, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}
