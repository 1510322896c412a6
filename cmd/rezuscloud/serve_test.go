//go:build !e2e && !browser

// The process tests: no build tag selects them, so `go test ./cmd/...` runs them
// and the slow tags (e2e, browser) leave them out rather than run them twice.

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
)

// TestKillNineKeepsAcknowledgedWrites kills the server with SIGKILL in the middle
// of a burst of writes; after a restart every write answered 2xx is there.
func TestKillNineKeepsAcknowledgedWrites(t *testing.T) {
	dir := t.TempDir()
	p := startServer(t, dir)

	var mu sync.Mutex
	acked := map[string]string{}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("w%d-%d", w, i)
				code, obj := p.do(http.MethodPost, "/api/v1/tenants", `{"metadata":{"name":"`+name+`"}}`)
				if code == 0 {
					return // the server is gone
				}
				if code == http.StatusCreated {
					mu.Lock()
					acked[name] = rv(obj)
					mu.Unlock()
				}
			}
		}()
	}
	for {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= 300 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.done
	close(stop)
	wg.Wait()

	p2 := startServer(t, dir)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d writes acknowledged before SIGKILL", len(acked))
	for name, version := range acked {
		code, obj := p2.do(http.MethodGet, "/api/v1/tenants/"+name, "")
		require.Equal(t, http.StatusOK, code, "acknowledged tenant %s lost", name)
		require.Equal(t, version, rv(obj))
	}
}

// TestSIGTERMShutsDownCleanlyAndRestartKeepsEverything checks a graceful stop:
// watches end with a BOOKMARK to resume from (the lame duck's), the process
// exits 0, and a restart on the same dir serves the same objects at the same
// versions.
func TestSIGTERMShutsDownCleanlyAndRestartKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	p := startServer(t, dir)
	versions := map[string]string{}
	for i := range 20 {
		name := fmt.Sprintf("t%d", i)
		code, obj := p.do(http.MethodPost, "/api/v1/tenants", `{"metadata":{"name":"`+name+`"}}`)
		require.Equal(t, http.StatusCreated, code)
		versions[name] = rv(obj)
	}
	code, obj := p.do(http.MethodPatch, "/api/v1/tenants/t3", "")
	_ = obj
	require.NotEqual(t, http.StatusOK, code) // no merge-patch content type: refused

	req, _ := http.NewRequest(http.MethodGet, p.url+"/api/v1/tenants?watch=true", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var events atomic.Int32
	var lastEvent atomic.Value
	all := make(chan struct{})
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			typ, ok := strings.CutPrefix(sc.Text(), "event: ")
			if !ok {
				continue
			}
			lastEvent.Store(typ)
			if typ != "BOOKMARK" && events.Add(1) == 20 {
				close(all)
			}
		}
	}()
	select {
	case <-all:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not deliver the 20 tenants")
	}

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-p.done:
		require.NoError(t, err, "exit status")
	case <-time.After(30 * time.Second):
		t.Fatal("server did not stop within 30s of SIGTERM")
	}
	select {
	case <-watchDone:
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not end")
	}
	require.Equal(t, int32(20), events.Load(), "nothing more after the 20 tenants")
	require.Equal(t, "BOOKMARK", lastEvent.Load(), "the watch ended resumably")
	require.Contains(t, p.log(), `"msg":"stopped"`)

	p2 := startServer(t, dir)
	for name, version := range versions {
		code, obj := p2.do(http.MethodGet, "/api/v1/tenants/"+name, "")
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, version, rv(obj))
	}
	code, _ = p2.do(http.MethodPost, "/api/v1/tenants", `{"metadata":{"name":"after-restart"}}`)
	require.Equal(t, http.StatusCreated, code)
	// The break-glass token is never logged; the first admin's generated password
	// is in a 0600 file and not in the log either.
	require.NotContains(t, p.log(), token)
	pw := waitFile(t, filepath.Join(dir, "initial-admin-password"))
	st, err := os.Stat(filepath.Join(dir, "initial-admin-password"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	require.NotContains(t, p.log()+p2.log(), strings.TrimSpace(string(pw)))
	require.Contains(t, p.log()+p2.log(), "initial-admin-password")
	req, _ = http.NewRequest(http.MethodPost, p2.url+"/api/v1/auth/login", strings.NewReader(`{"username":"admin","password":"`+strings.TrimSpace(string(pw))+`"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// TestExternalNATS runs the server against a separately started nats-server
// (from the nats-server module, in this test process) with --nats-url.
func TestExternalNATS(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, MaxPayload: 8 << 20})
	require.NoError(t, err)
	go ns.Start()
	require.True(t, ns.ReadyForConnections(10*time.Second))
	t.Cleanup(ns.Shutdown)

	// Replicas share the sealed secrets, so they share the passphrase (each has its own data dir).
	t.Setenv("REZUSCLOUD_SECRETS_PASSPHRASE", "a passphrase both replicas are given")
	p := startServer(t, t.TempDir(), "--nats-url", ns.ClientURL())
	code, obj := p.do(http.MethodPost, "/api/v1/tenants", `{"metadata":{"name":"ext"}}`)
	require.Equal(t, http.StatusCreated, code)
	code, got := p.do(http.MethodGet, "/api/v1/tenants/ext", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, rv(obj), rv(got))

	// A second replica on the same NATS serves the same data and takes writes;
	// the first sees them (reads wait for the read model to catch up).
	p2 := startServer(t, t.TempDir(), "--nats-url", ns.ClientURL())
	code, got = p2.do(http.MethodGet, "/api/v1/tenants/ext", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, rv(obj), rv(got))
	code, obj2 := p2.do(http.MethodPost, "/api/v1/tenants", `{"metadata":{"name":"ext2"}}`)
	require.Equal(t, http.StatusCreated, code)
	code, got = p.do(http.MethodGet, "/api/v1/tenants/ext2", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, rv(obj2), rv(got))
	// Conflicts are enforced across replicas by JetStream itself.
	stale := `{"metadata":{"name":"ext","resourceVersion":"` + rv(obj) + `","labels":{"by":"%s"}}}`
	c1, _ := p.do(http.MethodPut, "/api/v1/tenants/ext", fmt.Sprintf(stale, "one"))
	c2, _ := p2.do(http.MethodPut, "/api/v1/tenants/ext", fmt.Sprintf(stale, "two"))
	require.ElementsMatch(t, []int{http.StatusOK, http.StatusConflict}, []int{c1, c2})
}

// TestRebuildProjectionsCommand stops a server, rebuilds its projections
// offline, and checks a restarted server is ready and serves the same objects.
func TestRebuildProjectionsCommand(t *testing.T) {
	dir := t.TempDir()
	p := startServer(t, dir)
	for i := range 10 {
		code, _ := p.do(http.MethodPost, "/api/v1/tenants", fmt.Sprintf(`{"metadata":{"name":"r%d"}}`, i))
		require.Equal(t, http.StatusCreated, code)
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, <-p.done)

	out, err := runSelf(t, "rebuild-projections", "--data-dir", dir)
	require.NoError(t, err, out)
	require.Contains(t, out, "rebuilt the projections from 11 events") // 10 tenants and the first admin

	p2 := startServer(t, dir)
	code, _ := p2.do(http.MethodGet, "/api/v1/tenants/r9", "")
	require.Equal(t, http.StatusOK, code)
}

func runSelf(t *testing.T, args ...string) (string, error) {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "REZUS_TEST_MAIN=1")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestSelfSignedTLS serves HTTPS with a generated certificate that clients can
// pin, kept across restarts; the session cookie is Secure over TLS.
func TestSelfSignedTLS(t *testing.T) {
	dir := t.TempDir()
	p := startServer(t, dir, "--tls-self-signed")
	code, _ := p.do(http.MethodPost, "/api/v1/tenants", `{"metadata":{"name":"tls"}}`)
	require.Equal(t, http.StatusCreated, code)
	// A client that does not trust the certificate is refused.
	_, err := http.Get(p.url + "/healthz")
	require.Error(t, err)
	require.Contains(t, err.Error(), "certificate")
	before, err := os.ReadFile(filepath.Join(dir, "tls", "tls.crt"))
	require.NoError(t, err)
	st, err := os.Stat(filepath.Join(dir, "tls", "tls.key"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	pw := waitFile(t, filepath.Join(dir, "initial-admin-password"))
	req, _ := http.NewRequest(http.MethodPost, p.url+"/api/v1/auth/login", strings.NewReader(`{"username":"admin","password":"`+strings.TrimSpace(string(pw))+`"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Set-Cookie"), "Secure")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, <-p.done)
	p2 := startServer(t, dir, "--tls-self-signed")
	after, err := os.ReadFile(filepath.Join(dir, "tls", "tls.crt"))
	require.NoError(t, err)
	require.Equal(t, before, after, "the certificate is kept across restarts")
	code, _ = p2.do(http.MethodGet, "/api/v1/tenants/tls", "")
	require.Equal(t, http.StatusOK, code)
}

// rv is an answer's metadata.resourceVersion.
func rv(m map[string]any) string {
	md, _ := m["metadata"].(map[string]any)
	s, _ := md["resourceVersion"].(string)
	return s
}

// TestSecretsKeyFile keeps the sealing key outside the data dir
// (--secrets-key-file): the server keeps working across a restart, the data
// dir holds no copy of the key, and a key file others may read is refused.
func TestSecretsKeyFile(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(t.TempDir(), "rezuscloud-seal.key")
	p := startServer(t, dir, "--secrets-key-file", keyFile)
	code, _ := p.do(http.MethodPost, "/api/v1/tenants", `{"metadata":{"name":"sealed"}}`)
	require.Equal(t, http.StatusCreated, code)
	pw := strings.TrimSpace(string(waitFile(t, filepath.Join(dir, "initial-admin-password"))))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, <-p.done)

	key, err := os.ReadFile(keyFile)
	require.NoError(t, err)
	require.Len(t, key, 32)
	st, err := os.Stat(keyFile)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	require.NoError(t, filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		require.NotEqual(t, "secrets.key", d.Name(), "a key in the data dir: %s", path)
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		require.False(t, bytes.Contains(b, key), "%s carries the sealing key", path)
		return nil
	}))

	// The password hash is sealed: logging in after a restart opens it.
	p2 := startServer(t, dir, "--secrets-key-file", keyFile)
	req, _ := http.NewRequest(http.MethodPost, p2.url+"/api/v1/auth/login", strings.NewReader(`{"username":"admin","password":"`+pw+`"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	code, _ = p2.do(http.MethodGet, "/api/v1/tenants/sealed", "")
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, p2.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, <-p2.done)
	_, err = os.Stat(filepath.Join(dir, "secrets.key"))
	require.ErrorIs(t, err, os.ErrNotExist)

	require.NoError(t, os.Chmod(keyFile, 0o644))
	out, err := runServeToExit(t, dir, "--secrets-key-file", keyFile)
	require.Error(t, err, "a key file others may read is refused")
	require.Contains(t, out, "has mode 0644")
}

// runServeToExit runs a server expected to refuse to start; it is killed if
// it is still running after startWithin.
func runServeToExit(t *testing.T, dataDir string, extra ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), startWithin)
	defer cancel()
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--data-dir", dataDir, "--admin-token", token}, extra...)
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), "REZUS_TEST_MAIN=1")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// The backups' spool dir is private to the server and starts empty of what a
// crashed run left (each such file is a tenant's plain etcd snapshot).
func TestPrivateTempDirIsPrivateAndClearsLeftovers(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tmp")
	got, err := privateTempDir(dir, "etcd-backup-*.db")
	require.NoError(t, err)
	require.Equal(t, dir, got)
	st, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), st.Mode().Perm())

	left := filepath.Join(dir, "etcd-backup-123.db")
	other := filepath.Join(dir, "keep.txt")
	require.NoError(t, os.WriteFile(left, []byte("snapshot"), 0o600))
	require.NoError(t, os.WriteFile(other, []byte("x"), 0o600))
	_, err = privateTempDir(dir, "etcd-backup-*.db")
	require.NoError(t, err)
	require.NoFileExists(t, left)
	require.FileExists(t, other)
}

// TestServerSaysWhereItListens: on port 0 the server says in its log which
// port it got, before it starts NATS (a replica waiting for its cluster
// answers probes there) and again once it serves. The tests find their
// servers this way instead of picking a port free beforehand.
func TestServerSaysWhereItListens(t *testing.T) {
	t.Parallel()
	p := startServer(t, t.TempDir())
	listening, serving := p.said("listening"), p.said("serving")
	require.Equal(t, listening, serving)
	_, port, err := net.SplitHostPort(listening)
	require.NoError(t, err)
	require.NotEqual(t, "0", port)
	require.Equal(t, "http://"+listening, p.url)
	log := p.log()
	require.Less(t, strings.Index(log, `"msg":"listening"`), strings.Index(log, `"msg":"embedded NATS started"`), "said before NATS starts")
}
