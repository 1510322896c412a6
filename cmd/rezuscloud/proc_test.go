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
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	// url is where the server listens, known once it said so (addressed).
	url    string
	scheme string
	// dataDir is the server's --data-dir.
	dataDir string
	logs    *bytes.Buffer
	// done receives the exit once, for the test; waited is closed then,
	// for everyone.
	done   chan error
	waited chan struct{}
}

// startServer starts a server and waits until it is ready.
func startServer(t *testing.T, dataDir string, extra ...string) *proc {
	t.Helper()
	p := launchServer(t, dataDir, extra...)
	p.waitReady(dataDir)
	return p
}

// launchServer starts the test binary as a server without waiting for it:
// replicas of a cluster get ready only together.
func launchServer(t *testing.T, dataDir string, extra ...string) *proc {
	t.Helper()
	return launch(t, "", nil, dataDir, extra...)
}

// launch starts bin (the test binary itself when empty) as a server with
// env added, without waiting for it. It listens on port 0 and says in its
// log where (addressed): a port picked free beforehand could be taken by
// another test's process before the server bound it.
func launch(t *testing.T, bin string, env []string, dataDir string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--data-dir", dataDir, "--admin-token", token, "--log-level", "debug"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	if bin == "" {
		bin = "the server"
		cmd = exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), append(env, "REZUS_TEST_MAIN=1")...)
	}
	p := &proc{t: t, cmd: cmd, scheme: "http", dataDir: dataDir, logs: &bytes.Buffer{}, done: make(chan error, 1), waited: make(chan struct{}),
		client: http.DefaultClient}
	if slices.Contains(extra, "--tls-self-signed") {
		p.scheme = "https"
	}
	p.out = &lockedWriter{w: p.logs}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	require.NoError(t, cmd.Start())
	go func() {
		p.done <- cmd.Wait()
		close(p.waited)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = cmd.Process.Kill()
			<-p.waited
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", bin, p.log())
		}
	})
	return p
}

// waitReady waits until the server answers /readyz with 200 and has said it
// serves, failing the test if it exits first.
func (p *proc) waitReady(dataDir string) {
	p.t.Helper()
	deadline := time.Now().Add(startWithin)
	last := "no answer yet" // what /readyz said last, for a server that never gets ready
	for {
		if p.exited() {
			p.t.Fatalf("server exited before it was ready:\n%s", p.log())
		}
		if p.addressed() {
			if p.scheme == "https" && p.client == http.DefaultClient {
				if pem, err := os.ReadFile(filepath.Join(dataDir, "tls", "tls.crt")); err == nil {
					pool := x509.NewCertPool()
					pool.AppendCertsFromPEM(pem)
					p.client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
				}
			}
			resp, err := p.client.Get(p.url + "/readyz")
			if err == nil {
				body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK && p.said("serving") != "" {
					return
				}
				last = fmt.Sprintf("%d %s", resp.StatusCode, body)
			} else {
				last = err.Error()
			}
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("server not ready in %s (/readyz last said: %s):\n%s", startWithin, last, p.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitAddress waits until the server says where it listens (this build
// does so before it starts NATS; a release before 0.2.0 only once ready).
func (p *proc) waitAddress() {
	p.t.Helper()
	deadline := time.Now().Add(startWithin)
	for !p.addressed() {
		if p.exited() {
			p.t.Fatalf("server exited before it said where it listens:\n%s", p.log())
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("server did not say where it listens in %s:\n%s", startWithin, p.log())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// addressed reports whether the server said where it listens, setting
// p.url the first time it has.
func (p *proc) addressed() bool {
	if p.url != "" {
		return true
	}
	addr := p.said("listening")
	if addr == "" {
		addr = p.said("serving")
	}
	if addr == "" {
		return false
	}
	p.url = p.scheme + "://" + addr
	return true
}

// said answers the address of the server's first log line with message
// msg, or "" if it has not written one.
func (p *proc) said(msg string) string {
	for _, line := range strings.Split(p.log(), "\n") {
		if !strings.Contains(line, `"msg":"`+msg+`"`) {
			continue
		}
		var l struct{ Msg, Addr string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == msg && l.Addr != "" {
			return l.Addr
		}
	}
	return ""
}

// exited reports whether the process has ended, without blocking.
func (p *proc) exited() bool {
	select {
	case <-p.waited:
		return true
	default:
		return false
	}
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
