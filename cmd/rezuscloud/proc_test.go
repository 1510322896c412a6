package main

// The test binary doubles as the server (TestMain), and these helpers start it
// as a child process and talk to it. Every test of this package uses them: the
// process tests (no build tag, serve_test.go), the end-to-end tests (tag e2e)
// and the browser tests (tag browser).

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/internal/leaktest"
	"github.com/rezuscloud/rezuscloud/internal/proctree"
)

const token = "process-test-token"

// startWithin bounds how long a server process may take to start (and to
// write its first files). It is a liveness bound, not a speed claim: the
// server is built with -race, and on a 2-core machine running other test
// packages at once its start-up (stream provisioning, bcrypt, PBKDF2) took
// over 30 s. The speed of start-up is measured by the bench command instead.
const startWithin = 2 * time.Minute

// TestMain lets the test binary act as the server: tests start it again as a
// child process with REZUS_TEST_MAIN set, so kill -9 and SIGTERM hit a real process.
func TestMain(m *testing.M) {
	if os.Getenv("REZUS_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	// Servers, their tofu and its plugins, etcd and the Kubernetes control
	// planes all carry this binary's pid: none may outlive the tests.
	proctree.MarkRoot()
	code := m.Run()
	if leaktest.LeftoverProcesses() {
		code = 1
	}
	os.Exit(code)
}

type proc struct {
	client *http.Client
	out    *lockedWriter
	t      *testing.T
	cmd    *exec.Cmd
	url    string
	// dataDir is the server's --data-dir.
	dataDir string
	logs    *bytes.Buffer
	done    chan error
}

func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// startServer starts a server on a free port and waits until it is ready.
// A port found free can be taken before the server binds it (the tests run
// in parallel, and every outgoing connection takes an ephemeral port too):
// a server that lost its port that way is started again on another one.
func startServer(t *testing.T, dataDir string, extra ...string) *proc {
	t.Helper()
	for attempt := 1; ; attempt++ {
		p := launchServer(t, freePort(t), dataDir, extra...)
		if p.waitReady(dataDir) || attempt == 3 {
			if !p.serving() {
				t.Fatalf("server lost its port %d times:\n%s", attempt, p.log())
			}
			return p
		}
	}
}

// launchServer starts a server process listening on addr without waiting for
// it: replicas of a cluster get ready only together.
func launchServer(t *testing.T, addr, dataDir string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"serve", "--listen", addr, "--data-dir", dataDir, "--admin-token", token, "--log-level", "debug"}, extra...)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "REZUS_TEST_MAIN=1")
	p := &proc{t: t, cmd: cmd, url: "http://" + addr, dataDir: dataDir, logs: &bytes.Buffer{}, done: make(chan error, 1), client: http.DefaultClient}
	for _, a := range extra {
		if a == "--tls-self-signed" {
			p.url = "https://" + addr
		}
	}
	p.out = &lockedWriter{w: p.logs}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	require.NoError(t, cmd.Start())
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("server log:\n%s", p.log())
		}
	})
	return p
}

// waitReady waits until the server answers /readyz with 200 and has said it
// serves. It reports false if the server exited because its address was
// taken: then whatever answers on that address is not this server.
func (p *proc) waitReady(dataDir string) bool {
	p.t.Helper()
	deadline := time.Now().Add(startWithin)
	for {
		if p.exited() {
			if strings.Contains(p.log(), "address already in use") {
				return false
			}
			p.t.Fatalf("server exited before it was ready:\n%s", p.log())
		}
		if strings.HasPrefix(p.url, "https://") && p.client == http.DefaultClient {
			if pem, err := os.ReadFile(filepath.Join(dataDir, "tls", "tls.crt")); err == nil {
				pool := x509.NewCertPool()
				pool.AppendCertsFromPEM(pem)
				p.client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
			}
		}
		resp, err := p.client.Get(p.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && p.serving() {
				return true
			}
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("server not ready in %s:\n%s", startWithin, p.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exited reports whether the process has ended, without blocking; the exit
// status is put back for whoever waits on p.done next.
func (p *proc) exited() bool {
	select {
	case err := <-p.done:
		p.done <- err
		return true
	default:
		return false
	}
}

// serving reports whether this process said it serves its address: an
// answer on the address alone may come from another test's server.
func (p *proc) serving() bool {
	addr := strings.TrimPrefix(strings.TrimPrefix(p.url, "http://"), "https://")
	for _, line := range strings.Split(p.log(), "\n") {
		if strings.Contains(line, "serving") && strings.Contains(line, addr) {
			return true
		}
	}
	return false
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// log returns what the server wrote so far; safe while it is still writing.
func (p *proc) log() string {
	p.out.mu.Lock()
	defer p.out.mu.Unlock()
	return p.logs.String()
}

// waitFile waits for a file the server writes in the background.
func waitFile(t *testing.T, path string) []byte {
	t.Helper()
	deadline := time.Now().Add(startWithin)
	for {
		b, err := os.ReadFile(path)
		if err == nil && len(b) > 0 {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not written within %s: %v", path, startWithin, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (p *proc) do(method, path, body string) (int, map[string]any) {
	req, err := http.NewRequest(method, p.url+path, strings.NewReader(body))
	require.NoError(p.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}
