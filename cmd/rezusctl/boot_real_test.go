package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// requireQEMU finds the real qemu-system-x86_64 and qemu-img (Debian's
// qemu-system-x86 and qemu-utils, which .ci/run installs).
func requireQEMU(t *testing.T) {
	t.Helper()
	for _, bin := range []string{"qemu-system-x86_64", "qemu-img"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is not installed: apt-get install qemu-system-x86 qemu-utils (.ci/run does)", bin)
		}
	}
}

// TestBootQEMUStartsRealMachines runs the real QEMU on an empty ISO: nothing
// boots (there is no Talos image on these machines), but the processes,
// their disks and the port forwards are real. The command waits for the
// Talos APIs, says which did not answer, and leaves the machines running
// for `boot stop`, which ends them.
func TestBootQEMUStartsRealMachines(t *testing.T) {
	requireQEMU(t)
	dir := t.TempDir()
	iso := filepath.Join(dir, "empty.iso")
	require.NoError(t, os.WriteFile(iso, make([]byte, 2048), 0o600))
	state := filepath.Join(dir, "state")
	tc := newTestCLI(t)
	r := tc.run("boot", "--platform", "qemu", "--iso", iso, "--cluster", "q", "--control-planes", "1", "--workers", "1",
		"--state-dir", state, "--wait-timeout", "2s", "--cpus", "1", "--memory-controlplane", "128", "--memory-worker", "128", "--disk-size", "1G")
	var rec bootRecord
	t.Cleanup(func() {
		for _, n := range rec.Nodes {
			stopPID(n.PID)
		}
	})
	b, err := os.ReadFile(filepath.Join(state, "nodes.json"))
	require.NoError(t, err, r.stderr)
	require.NoError(t, json.Unmarshal(b, &rec))
	require.Equal(t, 1, r.code, r.stdout)
	require.Contains(t, r.stderr, "2 of 2 machines did not answer on the Talos API within 2s (q-cp-1, q-worker-1): they keep running")
	require.Regexp(t, `(?m)^q-cp-1\s+controlplane\s+127\.0\.\d+\.\d+:50000\s+not answering$`, r.stdout)
	require.Regexp(t, `(?m)^q-worker-1\s+worker\s+127\.0\.\d+\.\d+:50000\s+not answering$`, r.stdout)

	require.Len(t, rec.Nodes, 2)
	for _, n := range rec.Nodes {
		require.True(t, alive(n.PID), "%s runs", n.Name)
		cmdline, err := os.ReadFile(filepath.Join("/proc", itoa(n.PID), "cmdline"))
		require.NoError(t, err)
		args := strings.Split(string(cmdline), "\x00")
		require.Contains(t, args, "-cdrom")
		require.Contains(t, args, iso)
		host, _, _ := net.SplitHostPort(n.Address)
		require.Contains(t, args, "user,id=n0,hostfwd=tcp:"+host+":50000-:50000")
		// The disk is a real qcow2 image.
		out, err := exec.Command("qemu-img", "info", "-U", "--output", "json", filepath.Join(state, n.Name+".qcow2")).Output()
		require.NoError(t, err)
		var info struct {
			Format      string `json:"format"`
			VirtualSize int64  `json:"virtual-size"`
		}
		require.NoError(t, json.Unmarshal(out, &info))
		require.Equal(t, "qcow2", info.Format)
		require.Equal(t, int64(1<<30), info.VirtualSize)
		// QEMU listens on the forwarded port (the guest behind it does not answer TLS).
		c, err := net.DialTimeout("tcp", n.Address, 2*time.Second)
		require.NoError(t, err, "%s: the port forward listens", n.Name)
		c.Close()
		require.False(t, talosAnswers(context.Background(), n.Address))
	}
	// A second boot of the same cluster is refused while it runs.
	r2 := tc.run("boot", "--platform", "qemu", "--iso", iso, "--cluster", "q", "--state-dir", state)
	require.Equal(t, 1, r2.code)
	require.Contains(t, r2.stderr, "are recorded as running")

	r = tc.run("boot", "stop", "--platform", "qemu", "--cluster", "q", "--state-dir", state, "--purge")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "q-cp-1 stopped\nq-worker-1 stopped\n", r.stdout)
	for _, n := range rec.Nodes {
		require.Eventually(t, func() bool { return !alive(n.PID) }, 10*time.Second, 50*time.Millisecond)
		_, err := net.DialTimeout("tcp", n.Address, time.Second)
		require.Error(t, err, "the forward is gone with the process")
	}
	_, err = os.Stat(state)
	require.True(t, os.IsNotExist(err), "--purge removes the disks")
}

func itoa(i int) string { return big.NewInt(int64(i)).String() }

// fakeEngine is a Docker engine API on a unix socket, for the docker boot
// path (no daemon here): it records the calls, and starting a container
// serves a TLS listener where the container's Talos API port is published,
// as a Talos container in maintenance mode does.
type fakeEngine struct {
	mu         sync.Mutex
	calls      []string
	creates    []map[string]any
	containers map[string]map[string]any // id -> create body
	listeners  []net.Listener
}

func startFakeEngine(t *testing.T) (*fakeEngine, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "docker.sock")
	lis, err := net.Listen("unix", sock)
	require.NoError(t, err)
	e := &fakeEngine{containers: map[string]map[string]any{}}
	cert := selfSigned(t)
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		e.mu.Lock()
		defer e.mu.Unlock()
		e.calls = append(e.calls, r.Method+" "+r.URL.Path)
		switch {
		case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/images/"):
			w.Write([]byte(`{}`))
		case r.URL.Path == "/networks/create":
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(`{"Id":"net1"}`))
		case r.URL.Path == "/containers/create":
			var m map[string]any
			require.NoError(t, json.Unmarshal(body, &m))
			m["name"] = r.URL.Query().Get("name")
			id := "c" + itoa(len(e.containers)+1)
			e.containers[id] = m
			e.creates = append(e.creates, m)
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(`{"Id":"` + id + `"}`))
		case strings.HasSuffix(r.URL.Path, "/start"):
			id := strings.Split(r.URL.Path, "/")[2]
			m := e.containers[id]
			b := m["HostConfig"].(map[string]any)["PortBindings"].(map[string]any)["50000/tcp"].([]any)[0].(map[string]any)
			l, err := tls.Listen("tcp", b["HostIp"].(string)+":"+b["HostPort"].(string), &tls.Config{Certificates: []tls.Certificate{cert}})
			if err != nil {
				http.Error(w, `{"message":"`+err.Error()+`"}`, http.StatusInternalServerError)
				return
			}
			e.listeners = append(e.listeners, l)
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					go func() { _ = c.(*tls.Conn).Handshake(); c.Close() }()
				}
			}()
			w.WriteHeader(http.StatusNoContent)
		case r.Method == http.MethodGet && r.URL.Path == "/containers/json":
			require.Equal(t, `{"label":["io.rezuscloud.boot.cluster=dk"]}`, r.URL.Query().Get("filters"))
			var list []map[string]any
			for id, m := range e.containers {
				list = append(list, map[string]any{"Id": id, "Names": []string{"/" + m["name"].(string)}})
			}
			json.NewEncoder(w).Encode(list)
		case r.Method == http.MethodDelete:
			w.WriteHeader(http.StatusNoContent)
		default:
			http.Error(w, `{"message":"unexpected"}`, http.StatusBadRequest)
		}
	})}
	go srv.Serve(lis)
	t.Cleanup(func() {
		srv.Close()
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, l := range e.listeners {
			l.Close()
		}
	})
	return e, sock
}

func selfSigned(t *testing.T) tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestBootDockerAgainstAFakeEngine: the docker path creates the cluster's
// network and one Talos container per node with talosctl's docker flags,
// starts them, waits for their Talos APIs, and `boot stop` removes them.
func TestBootDockerAgainstAFakeEngine(t *testing.T) {
	e, sock := startFakeEngine(t)
	tc := newTestCLI(t)
	r := tc.run("boot", "--platform", "docker", "--docker-host", "unix://"+sock, "--cluster", "dk", "--workers", "1", "--wait-timeout", "10s")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, regexp.MustCompile(`(?m)^dk-cp-1\s+controlplane\s+127\.0\.\d+\.\d+:50000\s+maintenance$`), r.stdout)
	require.Regexp(t, regexp.MustCompile(`(?m)^dk-worker-1\s+worker\s+127\.0\.\d+\.\d+:50000\s+maintenance$`), r.stdout)

	e.mu.Lock()
	calls := append([]string(nil), e.calls...)
	creates := e.creates
	e.mu.Unlock()
	require.Equal(t, []string{
		"GET /images/ghcr.io/siderolabs/talos:v1.13.0/json", "POST /networks/create",
		"POST /containers/create", "POST /containers/c1/start", "POST /containers/create", "POST /containers/c2/start",
	}, calls)
	require.Len(t, creates, 2)
	cp := creates[0]
	require.Equal(t, "dk-cp-1", cp["name"])
	require.Equal(t, "dk-cp-1", cp["Hostname"])
	require.Equal(t, []any{"PLATFORM=container"}, cp["Env"])
	require.Equal(t, map[string]any{"io.rezuscloud.boot.cluster": "dk"}, cp["Labels"])
	hc := cp["HostConfig"].(map[string]any)
	require.Equal(t, true, hc["Privileged"])
	require.Equal(t, true, hc["ReadonlyRootfs"])
	require.Equal(t, []any{"seccomp=unconfined"}, hc["SecurityOpt"])
	require.Equal(t, map[string]any{"/run": "rw", "/system": "rw", "/tmp": "rw"}, hc["Tmpfs"])
	require.Equal(t, "dk", hc["NetworkMode"])
	require.Contains(t, hc["PortBindings"], "6443/tcp", "a control plane publishes the Kubernetes API")
	require.NotContains(t, creates[1]["HostConfig"].(map[string]any)["PortBindings"], "6443/tcp")

	r = tc.run("boot", "stop", "--platform", "docker", "--docker-host", "unix://"+sock, "--cluster", "dk")
	require.Equal(t, 0, r.code, r.stderr)
	e.mu.Lock()
	defer e.mu.Unlock()
	require.Subset(t, e.calls, []string{"GET /containers/json", "DELETE /containers/c1", "DELETE /containers/c2", "DELETE /networks/dk"})
}

// TestBootRegistersMachines: --register makes the booted nodes Machines of
// the tenant, labelled with the boot's cluster and --label, control planes
// in --cp-group and workers in --worker-group, at the address a metal node
// group reaches them on.
func TestBootRegistersMachines(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server")
	}
	// The booted nodes are on loopback, which a metal machine may be on
	// only when the operator says so.
	srv := startServer(t, "--metal-networks", "127.0.0.0/8")
	tc := newTestCLI(t)
	tc.ok("config", "set-context", "boot", "--server", srv.url, "--token", srv.token, "--tenant", "iron")
	tc.ok("config", "use-context", "boot")
	code, body := srv.api(t, http.MethodPost, "/api/v1/tenants", "application/json", `{"metadata":{"name":"iron"},"spec":{}}`)
	require.Equal(t, http.StatusCreated, code, string(body))

	out, errb, stop := tc.start("boot", "--platform", "emulated", "--addressing", "loopback", "--cluster", "reg", "--workers", "1",
		"--register", "--label", "rack=r1", "--worker-group", "pool")
	defer stop()
	waitFor(t, func() bool { return strings.Contains(out.String(), "Ctrl-C") }, func() string { return out.String() + errb.String() })
	require.Contains(t, out.String(), "machine/reg-cp-1 registered in tenant iron (node group cp, address 127.0.")
	require.Contains(t, out.String(), "machine/reg-worker-1 registered in tenant iron (node group pool, address 127.0.")

	code, body = srv.api(t, http.MethodGet, "/api/v1/tenants/iron/machines?labelSelector=rezuscloud.io/boot=reg,rack=r1", "", "")
	require.Equal(t, http.StatusOK, code, string(body))
	var list struct {
		Items []struct {
			Metadata struct{ Name string }
			Spec     struct{ NodeGroup, Role, Address, Hostname string }
		}
	}
	require.NoError(t, json.Unmarshal(body, &list))
	require.Len(t, list.Items, 2)
	byName := map[string]string{}
	for _, m := range list.Items {
		byName[m.Metadata.Name] = m.Spec.NodeGroup + "/" + m.Spec.Role
		require.True(t, talosAnswers(context.Background(), net.JoinHostPort(m.Spec.Address, "50000")), "%s answers at its registered address", m.Metadata.Name)
	}
	require.Equal(t, map[string]string{"reg-cp-1": "cp/controlplane", "reg-worker-1": "pool/worker"}, byName)
}
