package main

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBootEmulatedPrintsAddresses(t *testing.T) {
	tc := newTestCLI(t)
	stateDir := t.TempDir()
	// A port per node: in loopback mode every emulator on the machine scans
	// from 127.0.1.1 up, so an address this test frees between its two runs
	// is taken at once by an emulator of a test running in parallel, and the
	// restored node rightly fails. Ephemeral ports are not handed out that way.
	args := []string{"boot", "--platform", "emulated", "--addressing", "ports", "--control-planes", "3", "--workers", "2", "--state-dir", stateDir, "--cluster", "boot"}
	out, errb, stop := tc.start(args...)
	addrRE := regexp.MustCompile(`(?m)^(boot-(?:cp|worker)-\d)\s+(controlplane|worker)\s+(127\.0\.\d+\.\d+:\d+)\s+maintenance$`)
	waitFor(t, func() bool { return strings.Contains(out.String(), "Ctrl-C") }, func() string { return out.String() + errb.String() })
	rows := addrRE.FindAllStringSubmatch(out.String(), -1)
	require.Len(t, rows, 5, out.String())
	seen := map[string]bool{}
	for _, row := range rows {
		require.False(t, seen[row[3]], "address %s twice", row[3])
		seen[row[3]] = true
		c, err := net.DialTimeout("tcp", row[3], 2*time.Second)
		require.NoError(t, err, "node %s listens", row[1])
		c.Close()
	}
	require.Equal(t, 130, stop(), "Ctrl-C ends it")
	_, err := net.DialTimeout("tcp", rows[0][3], time.Second)
	require.Error(t, err, "the nodes stop with the command")

	// A rerun with the same state dir brings the same nodes back at the same addresses.
	out2, errb2, stop2 := tc.start(args...)
	waitFor(t, func() bool { return strings.Contains(out2.String(), "Ctrl-C") }, func() string { return out2.String() + errb2.String() })
	require.ElementsMatch(t, rows, addrRE.FindAllStringSubmatch(out2.String(), -1), out2.String()+errb2.String())
	stop2()
}

func TestBootEmulatedServesItsAPI(t *testing.T) {
	tc := newTestCLI(t)
	out, errb, stop := tc.start("boot", "--addressing", "ports", "--listen", "127.0.0.1:0", "--cluster", "api", "--workers", "1")
	defer stop()
	apiRE := regexp.MustCompile(`emulator API: (http://\S+) \(Authorization: Bearer ([0-9a-f]{64})\)`)
	waitFor(t, func() bool { return strings.Contains(out.String(), "Ctrl-C") }, func() string { return out.String() + errb.String() })
	m := apiRE.FindStringSubmatch(out.String())
	require.NotNil(t, m, out.String())
	resp, err := http.Get(m[1])
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "the API needs the token it printed")
	req, err := http.NewRequest(http.MethodGet, m[1], nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+m[2])
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var list struct {
		Items []struct{ Name, Address, Phase string }
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	require.Len(t, list.Items, 2)
	require.Equal(t, "api-cp-1", list.Items[0].Name)
	require.Equal(t, "maintenance", list.Items[1].Phase)
}

// waitFor polls cond until it holds or 20 s pass.
func waitFor(t *testing.T, cond func() bool, show func() string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out; output:\n%s", show())
		}
		<-tick.C
	}
}

func TestBootRealPlatformsFailClearly(t *testing.T) {
	dir := t.TempDir()

	// A fake engine that answers 404 for every image.
	sock := filepath.Join(dir, "docker.sock")
	lis, err := net.Listen("unix", sock)
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/json") && strings.Contains(r.URL.Path, "present") {
			w.Write([]byte(`{}`))
			return
		}
		http.Error(w, `{"message":"No such image"}`, http.StatusNotFound)
	}), ReadHeaderTimeout: time.Second}
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Close() })

	iso := filepath.Join(dir, "metal-amd64.iso")
	require.NoError(t, os.WriteFile(iso, []byte("iso"), 0o600))
	trueBin, err := os.Executable() // any executable stands in for qemu
	require.NoError(t, err)

	tests := []struct {
		name    string
		args    []string
		wantErr string
		wantOut string
	}{
		{"docker engine absent", []string{"--platform", "docker", "--docker-host", "unix://" + filepath.Join(dir, "none.sock")},
			"docker engine not reachable at unix://" + filepath.Join(dir, "none.sock"), ""},
		{"docker image absent", []string{"--platform", "docker", "--docker-host", "unix://" + sock, "--image", "ghcr.io/siderolabs/talos:v0.0.0"},
			"docker image ghcr.io/siderolabs/talos:v0.0.0 not found", ""},
		{"docker tcp host refused", []string{"--platform", "docker", "--docker-host", "tcp://127.0.0.1:2375"},
			"only unix:// sockets are supported", ""},
		{"qemu binary absent", []string{"--platform", "qemu", "--qemu-binary", filepath.Join(dir, "no-qemu"), "--iso", iso},
			"qemu not found", ""},
		{"qemu iso missing flag", []string{"--platform", "qemu", "--qemu-binary", trueBin}, "--iso is required", ""},
		{"qemu iso absent", []string{"--platform", "qemu", "--qemu-binary", trueBin, "--iso", filepath.Join(dir, "none.iso")},
			"talos ISO " + filepath.Join(dir, "none.iso"), ""},
		{"unknown platform", []string{"--platform", "vmware"}, "--platform must be emulated, docker or qemu", ""},
		{"no control planes", []string{"--control-planes", "0"}, "--control-planes must be at least 1", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newTestCLI(t).run(append([]string{"boot"}, tt.args...)...)
			if tt.wantErr != "" {
				require.Equal(t, 1, r.code, r.stdout)
				require.Contains(t, r.stderr, tt.wantErr)
				return
			}
			require.Equal(t, 0, r.code, r.stderr)
			require.Contains(t, r.stdout, tt.wantOut)
		})
	}
}
