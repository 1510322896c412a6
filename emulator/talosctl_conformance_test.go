package emulator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"hash/crc32"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

// talosctlPath finds the real talosctl (tofutest.Talosctl); a missing one
// fails the test.
func talosctlPath(t *testing.T) string { return tofutest.Talosctl(t) }

// talosctl runs the real talosctl against one emulated node.
type talosctl struct {
	bin         string
	talosconfig string
	endpoint    string // host:port of the node's API
	node        string // its IP, for --nodes
}

func (c talosctl) args(args ...string) []string {
	return append([]string{"--talosconfig", c.talosconfig, "--endpoints", c.endpoint, "--nodes", c.node}, args...)
}

// run runs a command that must succeed and returns its stdout.
func (c talosctl) run(t *testing.T, args ...string) string {
	t.Helper()
	stdout, stderr, err := c.try(args...)
	require.NoError(t, err, "talosctl %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), stdout, stderr)
	return stdout
}

// try runs a command and returns its output and exit error.
func (c talosctl) try(args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, c.args(args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// watch starts a command that runs until the test ends (get --watch) and
// returns a function reading what it printed so far.
func (c talosctl) watch(t *testing.T, args ...string) func() string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, c.bin, c.args(args...)...)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	return out.String
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// newTalosctl writes a talosconfig made from the cluster's PKI for a node.
func newTalosctl(t *testing.T, bin string, tc testCluster, st NodeStatus) talosctl {
	t.Helper()
	host, _, err := net.SplitHostPort(st.Address)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "talosconfig")
	b, err := tc.admin.Bytes()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o600))
	return talosctl{bin: bin, talosconfig: path, endpoint: st.Address, node: host}
}

// requireLines asserts that out has a line holding every one of fields.
func requireLine(t *testing.T, out string, fields ...string) {
	t.Helper()
	for line := range strings.SplitSeq(out, "\n") {
		all := true
		for _, f := range fields {
			all = all && strings.Contains(line, f)
		}
		if all {
			return
		}
	}
	t.Fatalf("no line holds all of %q in:\n%s", fields, out)
}

// TestTalosctlConformance runs the real talosctl v1.13.0 against an emulated
// control plane and worker with a talosconfig of the cluster's PKI, over
// the everyday commands, and checks that each answer reflects the node.
// etcdutlHash is the hash etcdutl's snapshot status reports: the CRC-32C of
// every bucket's name and its keys and values, in bolt's order.
func etcdutlHash(t *testing.T, path string) uint32 {
	t.Helper()
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	require.NoError(t, err)
	defer db.Close()
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			h.Write(name)
			return b.ForEach(func(k, v []byte) error {
				h.Write(k)
				h.Write(v)
				return nil
			})
		})
	}))
	return h.Sum32()
}

func TestTalosctlConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the talosctl binary")
	}
	bin := talosctlPath(t)
	cfg := fastConfig(t.TempDir())
	cfg.ServiceStartDelay = 200 * time.Millisecond
	// talosctl --wait retries its event stream once a second after the
	// reboot starts, and must find the node down then, as it would a real
	// machine: a node back within a second has it wait for events of a boot
	// it joined late.
	cfg.RebootDelay = 2500 * time.Millisecond
	// talosctl --wait sends its action and opens its event stream at once;
	// a real node stops its services for seconds before it goes down, so the
	// stream is open before the action's last events. Without the delay, a
	// loaded machine could open it after them (CI did, twice, on reset).
	cfg.ShutdownDelay = InteractiveShutdownDelay
	em, _ := startEmulator(t, cfg)
	tc := newTestCluster(t, "conformance")
	ctx := context.Background()

	cpSt, err := em.Create(ctx, NodeSpec{Name: "conf-cp", UserData: tc.controlPlane})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, phaseIs(em, "conf-cp", PhaseRunning)())
	}, 15*time.Second, 10*time.Millisecond, "control plane running")
	wkSt, err := em.Create(ctx, NodeSpec{Name: "conf-worker", UserData: tc.worker})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, phaseIs(em, "conf-worker", PhaseRunning)())
	}, 15*time.Second, 10*time.Millisecond, "worker running")
	cp := newTalosctl(t, bin, tc, cpSt)
	wk := newTalosctl(t, bin, tc, wkSt)

	t.Run("version", func(t *testing.T) {
		out := cp.run(t, "version")
		require.Contains(t, out, "Server:")
		requireLine(t, out, "NODE:", "conf-cp")
		requireLine(t, out, "Tag:", "v1.13.0")
	})

	t.Run("bootstrap", func(t *testing.T) {
		cp.run(t, "bootstrap")
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			assert.NoError(ct, func() error {
				if !em.bootstrapped(cpSt.ClusterID) {
					return fmt.Errorf("not bootstrapped")
				}
				return nil
			}())
		}, 15*time.Second, 10*time.Millisecond, "etcd bootstrapped")
	})

	t.Run("services", func(t *testing.T) {
		out := cp.run(t, "services")
		for _, svc := range []string{"apid", "containerd", "cri", "etcd", "kubelet", "machined", "trustd"} {
			requireLine(t, out, "conf-cp", svc, "Running", "OK")
		}
		out = wk.run(t, "services")
		requireLine(t, out, "conf-worker", "kubelet", "Running", "OK")
		require.NotContains(t, out, "etcd")
	})

	t.Run("service etcd", func(t *testing.T) {
		out := cp.run(t, "service", "etcd")
		requireLine(t, out, "STATE", "Running")
		requireLine(t, out, "HEALTH", "OK")
		requireLine(t, out, "[Running]: Health check successful")
	})

	t.Run("etcd", func(t *testing.T) {
		id := fmt.Sprintf("%x", memberID("conf-cp"))
		requireLine(t, cp.run(t, "etcd", "members"), id, "conf-cp", "https://")
		requireLine(t, cp.run(t, "etcd", "status"), "conf-cp", id)
		// Data for the snapshot: three writes (revision 4), two keys.
		for _, kv := range [][2]string{{"/registry/a", "1"}, {"/registry/b", "2"}, {"/registry/a", "3"}} {
			_, err := em.PutEtcdKey(cpSt.ClusterID, kv[0], kv[1])
			require.NoError(t, err)
		}
		path := filepath.Join(t.TempDir(), "etcd.snapshot")
		// talosctl saves the snapshot, checks its size, then reads its
		// status as a bolt database with etcdutl, as it does a real one.
		out := cp.run(t, "etcd", "snapshot", path)
		t.Log(out)
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Contains(t, out, fmt.Sprintf("etcd snapshot saved to %q (%d bytes)", path, len(b)))
		require.Contains(t, out, fmt.Sprintf("snapshot info: hash %08x, revision 4, total keys 2, total size %d", etcdutlHash(t, path), len(b)-sha256.Size))
	})

	t.Run("dmesg and logs", func(t *testing.T) {
		require.Contains(t, cp.run(t, "dmesg"), "services running")
		require.Contains(t, cp.run(t, "logs", "kubelet"), "kubelet: running on talos v1.13.0")
	})

	t.Run("get", func(t *testing.T) {
		out := cp.run(t, "get", "members")
		requireLine(t, out, "conf-cp", "controlplane", "Talos (v1.13.0)", cpSt.Address[:strings.LastIndex(cpSt.Address, ":")])
		requireLine(t, out, "conf-worker", "worker")
		requireLine(t, cp.run(t, "get", "machinestatus"), "machine", "running", "true")
		requireLine(t, cp.run(t, "get", "nodename"), "nodename", "conf-cp")
		requireLine(t, cp.run(t, "get", "hostname"), "hostname", "conf-cp")
		requireLine(t, cp.run(t, "get", "services"), "etcd", "true", "true")
		requireLine(t, cp.run(t, "get", "addresses"), "eth0/"+cp.node+"/32")
		requireLine(t, cp.run(t, "get", "nodeaddresses"), "current", cp.node+"/32")
		requireLine(t, cp.run(t, "get", "machineconfig"), "v1alpha1")
		require.Contains(t, cp.run(t, "get", "machineconfig", "-o", "yaml"), "clusterName: conformance")
		requireLine(t, cp.run(t, "get", "etcdmembers"), "local", fmt.Sprintf("%016x", memberID("conf-cp")))
		requireLine(t, cp.run(t, "get", "versions"), "Talos", "v1.13.0")
		out = cp.run(t, "get", "staticpodstatus")
		requireLine(t, out, "kube-system/kube-apiserver-conf-cp", "True")
		requireLine(t, out, "kube-system/kube-scheduler-conf-cp")
		require.NotContains(t, wk.run(t, "get", "staticpodstatus"), "kube-apiserver", "a worker runs no static pods")
	})

	t.Run("memory containers time read", func(t *testing.T) {
		requireLine(t, cp.run(t, "memory"), "conf-cp", "4096")
		out := cp.run(t, "containers")
		for _, c := range []string{"apid", "trustd", "etcd", "kubelet"} {
			requireLine(t, out, "system", c, "RUNNING")
		}
		requireLine(t, cp.run(t, "containers", "-k"), "k8s.io", "kube-system/kube-apiserver-conf-cp:kube-apiserver", "CONTAINER_RUNNING")
		require.NotContains(t, wk.run(t, "containers"), "etcd")
		requireLine(t, cp.run(t, "time"), "conf-cp", "time.cloudflare.com")
		require.Contains(t, cp.run(t, "read", "/etc/os-release"), "VERSION_ID=v1.13.0")
	})

	t.Run("kubeconfig", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "kubeconfig")
		cp.run(t, "kubeconfig", path)
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Contains(t, string(b), "clusters:")
	})

	t.Run("apply-config", func(t *testing.T) {
		watched := wk.watch(t, "get", "machineconfig", "--watch", "-o", "yaml")
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			assert.NoError(ct, func() error {
				if !strings.Contains(watched(), "clusterName: conformance") {
					return fmt.Errorf("watch output so far: %s", watched())
				}
				return nil
			}())
		}, 15*time.Second, 10*time.Millisecond, "the watch to list the config")
		patch, err := configpatcher.LoadPatch([]byte("machine:\n  nodeLabels:\n    conformance: applied\n"))
		require.NoError(t, err)
		out, err := configpatcher.Apply(configpatcher.WithBytes(tc.worker), []configpatcher.Patch{patch})
		require.NoError(t, err)
		b, err := out.Bytes()
		require.NoError(t, err)
		path := filepath.Join(t.TempDir(), "worker.yaml")
		require.NoError(t, os.WriteFile(path, b, 0o600))
		_, stderr, err := wk.try("apply-config", "--file", path, "--mode", "auto")
		require.NoError(t, err, stderr)
		require.Contains(t, stderr, "Applied configuration without a reboot") // talosctl prints the mode details there
		st, err := em.Get("conf-worker")
		require.NoError(t, err)
		require.Equal(t, configHash(b), st.ConfigHash)
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			assert.NoError(ct, func() error {
				if !strings.Contains(watched(), "conformance: applied") {
					return fmt.Errorf("watch output so far: %s", watched())
				}
				return nil
			}())
		}, 15*time.Second, 10*time.Millisecond, "the watch to see the new config")
	})

	t.Run("upgrade", func(t *testing.T) {
		// --drain=false: this emulator is light (no Kubernetes API);
		// TestTalosctlUpgradeDrains runs the default drain against the
		// real control plane.
		wk.run(t, "upgrade", "--image", "ghcr.io/siderolabs/installer:v1.13.1", "--wait", "--drain=false")
		st, err := em.Get("conf-worker")
		require.NoError(t, err)
		require.Equal(t, "v1.13.1", st.Version)
		requireLine(t, wk.run(t, "version"), "Tag:", "v1.13.1")
		requireLine(t, wk.run(t, "get", "versions"), "Talos", "v1.13.1")
		require.Contains(t, wk.run(t, "read", "/etc/os-release"), "VERSION_ID=v1.13.1")
		requireLine(t, cp.run(t, "get", "members"), "conf-worker", "Talos (v1.13.1)")
	})

	t.Run("reset", func(t *testing.T) {
		wk.run(t, "reset", "--graceful", "--reboot")
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			assert.NoError(ct, phaseIs(em, "conf-worker", PhaseMaintenance)())
		}, 15*time.Second, 10*time.Millisecond, "worker back in maintenance mode")
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			assert.NoError(ct, func() error {
				out := cp.run(t, "get", "members")
				if strings.Contains(out, "conf-worker") {
					return fmt.Errorf("members: %s", out)
				}
				return nil
			}())
		}, 15*time.Second, 10*time.Millisecond, "the worker gone from the members")
	})
}
