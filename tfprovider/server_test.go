//go:build e2e

package tfprovider

// The real server and the real tofu the acceptance tests drive.

import (
	"bytes"
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
	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

func TestMain(m *testing.M) {
	leaktest.VerifyTestMainAfter(m, func() {
		if buildDir != "" {
			os.RemoveAll(buildDir)
		}
	})
}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// binaries builds the server and this provider once per test binary; the
// provider goes in a directory of its own (tofu's dev_overrides).
func binaries(t *testing.T) (server, pluginDir string) {
	t.Helper()
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "tfprovider-test-"); buildErr != nil {
			return
		}
		root, err := tofutest.RepoRoot()
		if err != nil {
			buildErr = err
			return
		}
		for pkg, out := range map[string]string{"./cmd/rezuscloud": "rezuscloud", "./cmd/rezusctl": "rezusctl",
			"./cmd/terraform-provider-rezuscloud": "plugin/terraform-provider-rezuscloud"} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(buildDir, out), pkg)
			cmd.Dir = root
			if b, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
				return
			}
		}
	})
	require.NoError(t, buildErr)
	return filepath.Join(buildDir, "rezuscloud"), filepath.Join(buildDir, "plugin")
}

// rezusctl runs the CLI with the config file cfg and answers its output.
func rezusctl(t *testing.T, cfg string, args ...string) string {
	t.Helper()
	binaries(t)
	cmd := exec.Command(filepath.Join(buildDir, "rezusctl"), args...)
	cmd.Env = append(os.Environ(), "REZUSCONFIG="+cfg)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "rezusctl %v:\n%s", args, out)
	return string(out)
}

// syncBuffer is the server's output, read while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type testServer struct {
	url, token string
}

const adminToken = "tfprovider-admin-token-0123456789"

// startServer runs the server on port 0 until the test ends; extra are
// more flags of serve.
func startServer(t *testing.T, extra ...string) *testServer {
	bin, _ := binaries(t)
	log := &syncBuffer{}
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--admin-token", adminToken,
		"--log-level", "info", "--allow-provider-downloads"}, extra...)...)
	cmd.Env = append(os.Environ(), "REZUSCLOUD_ADMIN_PASSWORD=tfprovider-admin-password")
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
	s := &testServer{token: adminToken}
	deadline := time.Now().Add(60 * time.Second)
	for s.url == "" {
		for _, line := range strings.Split(log.String(), "\n") {
			var l struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "listening" && l.Addr != "" {
				s.url = "http://" + l.Addr
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
	for {
		resp, err := http.Get(s.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		require.True(t, time.Now().Before(deadline), "the server did not become ready:\n%s", log.String())
		time.Sleep(50 * time.Millisecond) // polling a child process; there is nothing to wait on
	}
}

// api calls the server directly, as another user of it would.
func (s *testServer) api(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
		if method == http.MethodPatch {
			req.Header.Set("Content-Type", "application/merge-patch+json")
		}
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return resp.StatusCode, out
}

// workspace is a tofu working directory using this provider through
// dev_overrides (no init), against s.
type workspace struct {
	t    *testing.T
	dir  string
	tofu string
	env  []string
}

func newWorkspace(t *testing.T, s *testServer) *workspace {
	_, plugins := binaries(t)
	tofu, _ := tofutest.Tools(t)
	dir := t.TempDir()
	rc := filepath.Join(dir, ".tofurc")
	require.NoError(t, os.WriteFile(rc, []byte(fmt.Sprintf(`provider_installation {
  dev_overrides {
    %q = %q
  }
  direct {}
}
`, SourceAddress, plugins)), 0o600))
	env := []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH"), "TF_CLI_CONFIG_FILE=" + rc, "TF_IN_AUTOMATION=1",
		EnvEndpoint + "=" + s.url, EnvToken + "=" + s.token}
	return &workspace{t: t, dir: dir, tofu: tofu, env: env}
}

func (w *workspace) write(config string) {
	w.t.Helper()
	require.NoError(w.t, os.WriteFile(filepath.Join(w.dir, "main.tf"), []byte(config), 0o600))
}

// run runs tofu and answers its output and exit code.
func (w *workspace) run(args ...string) (string, int) {
	w.t.Helper()
	cmd := exec.Command(w.tofu, append(args, "-no-color")...)
	cmd.Dir, cmd.Env = w.dir, w.env
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		require.True(w.t, ok, "tofu %v: %v", args, err)
		code = ee.ExitCode()
	}
	return string(out), code
}

// apply applies and fails the test when tofu does.
func (w *workspace) apply() string {
	w.t.Helper()
	out, code := w.run("apply", "-auto-approve", "-input=false")
	require.Equal(w.t, 0, code, "tofu apply:\n%s", out)
	return out
}

// planEmpty requires a plan without any change (exit code 0 of
// -detailed-exitcode; 2 is a change).
func (w *workspace) planEmpty(why string) {
	w.t.Helper()
	out, code := w.run("plan", "-detailed-exitcode", "-input=false")
	require.Equal(w.t, 0, code, "%s: the plan is not empty:\n%s", why, out)
}

// planChanges requires a plan with changes and answers it.
func (w *workspace) planChanges(why string) string {
	w.t.Helper()
	out, code := w.run("plan", "-detailed-exitcode", "-input=false")
	require.Equal(w.t, 2, code, "%s: want a change:\n%s", why, out)
	return out
}
