package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

// TestMain lets a test run this binary's main in a child process.
func TestMain(m *testing.M) {
	if os.Getenv("REZUS_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "rezusbench-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	server.path = filepath.Join(dir, "rezuscloud")
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// server is cmd/rezuscloud, built once for the tests that run it (each link
// of it costs seconds; the tests run it at once, in parallel).
var server struct {
	once sync.Once
	path string
	out  []byte
	err  error
}

// buildServer builds cmd/rezuscloud, the server rezusbench measures.
func buildServer(t *testing.T) string {
	t.Helper()
	server.once.Do(func() {
		goBin, err := exec.LookPath("go") // tests run under the go tool, so it is on PATH
		if err != nil {
			server.err = err
			return
		}
		server.out, server.err = exec.Command(goBin, "build", "-o", server.path, "github.com/rezuscloud/rezuscloud/cmd/rezuscloud").CombinedOutput()
	})
	require.NoError(t, server.err, "go build: %s", server.out)
	return server.path
}

func runSelf(t *testing.T, args ...string) (string, error) {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "REZUS_TEST_MAIN=1")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestBenchCommandRuns runs `rezusbench api` with small numbers, so the
// command behind docs/benchmarks.md keeps working.
func TestBenchCommandRuns(t *testing.T) {
	t.Parallel()
	server := buildServer(t)
	out, err := runSelf(t, "--server", server, "api", "--duration", "300ms", "--tenants", "50", "--nodegroups", "100", "--rate", "50", "--clients", "1,4")
	require.NoError(t, err, out)
	for _, want := range []string{"a: JetStream publish + expected seq", "b: API create (POST)", "b: API update (PATCH)",
		"`GET /api/v1/tenants` | 50 |", "`GET /api/v1/nodegroups`", "objects present: 50 tenants", "server RSS"} {
		require.Contains(t, out, want)
	}
}

// TestServerBinary finds the server: --server first, then a rezuscloud
// beside this binary, then PATH; none is an error that says what to pass.
func TestServerBinary(t *testing.T) {
	out, err := runSelf(t, "--server", "/nonexistent/rezuscloud", "api", "--duration", "1ms")
	require.Error(t, err)
	require.Contains(t, out, "/nonexistent/rezuscloud")

	t.Setenv("PATH", t.TempDir())
	out, err = runSelf(t, "api", "--duration", "1ms")
	require.Error(t, err)
	require.Contains(t, out, "pass --server")
}

// TestFleetBenchRuns runs the fleet bench in a small form: 12 tenants of 3
// machines built through the API and tofu, one health sweep, and a rollout
// of a Talos patch version in three waves to completion, every machine on
// it after. It asserts completion, not time.
func TestFleetBenchRuns(t *testing.T) {
	t.Parallel()
	server := buildServer(t)
	tofu, mirror := tofutest.Tools(t)
	out, err := runSelf(t, "--server", server, "fleet", "--tenants", "12", "--parallel", "6", "--waves", "1,50%,100%", "--soak", "1s",
		"--tofu", tofu, "--provider-mirror", mirror, "--timeout", "15m")
	require.NoError(t, err, out)
	for _, want := range []string{"fleet: 12 tenants x (1 control plane + 2 workers) = 36 machines", "built: 36 machines running",
		"health sweep: 12 tenants (36 machines) probed in", "12 Ready", "rollout: Talos v1.13.1 to 12 tenants in",
		"every machine (36) reports v1.13.1", "settled:",
		// Issue 49: the version written back makes no Apply.
		"0 applies after it", "12 tenants say NothingToApply"} {
		require.Contains(t, out, want)
	}
}
