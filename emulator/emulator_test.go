package emulator

//lint:file-ignore SA1019 these tests call MachineService.Upgrade on purpose: the emulator serves it because
// the upgrade saga still upgrades through it (controllers/upgrade_node.go); LifecycleService has its own tests here

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/rezuscloud/rezuscloud/domain"
)

// TestClusterLifecycle takes three control planes and a worker from
// maintenance mode to a bootstrapped cluster, only through the machinery client.
func TestClusterLifecycle(t *testing.T) {
	t.Parallel()
	em, _ := startEmulator(t, fastConfig(""))
	cl := newTestCluster(t, "lifecycle")
	names := []string{"cp-1", "cp-2", "cp-3", "worker-1"}
	addrs := map[string]string{}
	for _, name := range names {
		st, err := em.Create(context.Background(), NodeSpec{Name: name, Cluster: "lifecycle"})
		require.NoError(t, err)
		require.Equal(t, PhaseMaintenance, st.Phase)
		addrs[name] = st.Address
	}
	if em.Loopback() {
		require.True(t, strings.HasSuffix(addrs["cp-1"], ":50000"), addrs["cp-1"])
		require.NotEqual(t, addrs["cp-1"], addrs["cp-2"])
	}

	// Maintenance mode: insecure TLS, Version and ApplyConfiguration only.
	insecure := connectInsecure(t, addrs["cp-1"])
	resp, err := insecure.Version(callCtx(t))
	require.NoError(t, err)
	require.Equal(t, "v1.13.0", resp.GetMessages()[0].GetVersion().GetTag())
	_, err = insecure.ServiceList(callCtx(t))
	requireCode(t, codes.Unimplemented, err)
	_, err = insecure.ApplyConfiguration(callCtx(t), &machine.ApplyConfigurationRequest{Data: []byte("version: v1alpha1\nmachine: [")})
	requireCode(t, codes.InvalidArgument, err)

	for _, name := range []string{"worker-1", "cp-1", "cp-2", "cp-3"} { // the worker first: it waits for a control plane (trustd)
		data := cl.controlPlane
		if strings.HasPrefix(name, "worker") {
			data = cl.worker
		}
		_, err := connectInsecure(t, addrs[name]).ApplyConfiguration(callCtx(t), &machine.ApplyConfigurationRequest{Data: data})
		require.NoError(t, err, name)
	}

	clients := map[string]*client.Client{}
	for _, name := range names {
		clients[name] = connect(t, cl.admin, addrs[name])
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			assert.NoError(ct, versionIs(t, clients[name], "v1.13.0")())
		}, 15*time.Second, 10*time.Millisecond, name+" serves mTLS")
	}

	cp1 := clients["cp-1"]
	_, err = cp1.EtcdMemberList(callCtx(t), &machine.EtcdMemberListRequest{})
	requireCode(t, codes.FailedPrecondition, err)
	requireCode(t, codes.FailedPrecondition, clients["worker-1"].Bootstrap(callCtx(t), &machine.BootstrapRequest{}))
	require.NoError(t, cp1.Bootstrap(callCtx(t), &machine.BootstrapRequest{}))
	requireCode(t, codes.AlreadyExists, cp1.Bootstrap(callCtx(t), &machine.BootstrapRequest{}))
	requireCode(t, codes.AlreadyExists, clients["cp-2"].Bootstrap(callCtx(t), &machine.BootstrapRequest{}))

	for _, name := range names {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			assert.NoError(ct, func() error {
				resp, err := clients[name].ServiceList(callCtx(t))
				if err != nil {
					return err
				}
				services := resp.GetMessages()[0].GetServices()
				ids := map[string]bool{}
				for _, s := range services {
					ids[s.GetId()] = true
					if !s.GetHealth().GetHealthy() {
						return fmt.Errorf("%s is %s", s.GetId(), s.GetState())
					}
				}
				if want := !strings.HasPrefix(name, "worker"); ids["etcd"] != want || !ids["kubelet"] || !ids["apid"] {
					return fmt.Errorf("services %v", ids)
				}
				return nil
			}())
		}, 15*time.Second, 10*time.Millisecond, name+" services healthy")
	}

	for _, name := range []string{"cp-1", "cp-2", "cp-3"} {
		resp, err := clients[name].EtcdMemberList(callCtx(t), &machine.EtcdMemberListRequest{})
		require.NoError(t, err)
		var hosts []string
		for _, m := range resp.GetMessages()[0].GetMembers() {
			hosts = append(hosts, m.GetHostname())
		}
		require.Equal(t, []string{"cp-1", "cp-2", "cp-3"}, hosts, name)
	}
	_, err = clients["worker-1"].EtcdMemberList(callCtx(t), &machine.EtcdMemberListRequest{})
	requireCode(t, codes.FailedPrecondition, err)

	kubeconfig, err := cp1.Kubeconfig(callCtx(t))
	require.NoError(t, err)
	require.Contains(t, string(kubeconfig), "server: https://10.5.0.1:6443")
	require.Contains(t, string(kubeconfig), "client-certificate-data:")

	dmesg, err := cp1.Dmesg(callCtx(t), false, false)
	require.NoError(t, err)
	var journal strings.Builder
	for {
		d, err := dmesg.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		journal.Write(d.GetBytes())
	}
	require.Contains(t, journal.String(), "etcd bootstrapped")

	logs, err := cp1.Logs(callCtx(t), "system", 0, "etcd", false, 10)
	require.NoError(t, err)
	line, err := logs.Recv()
	require.NoError(t, err)
	require.Contains(t, string(line.GetBytes()), "etcd")
}

// configuredNode creates a node booted with a config and waits for it to run.
func configuredNode(t *testing.T, em *Emulator, name string, userData []byte) NodeStatus {
	t.Helper()
	st, err := em.Create(context.Background(), NodeSpec{Name: name, UserData: userData})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, phaseIs(em, name, PhaseRunning)())
	}, 15*time.Second, 10*time.Millisecond, name+" running")
	return st
}

func TestUpgradeRebootReset(t *testing.T) {
	t.Parallel()
	em, _ := startEmulator(t, fastConfig(""))
	cl := newTestCluster(t, "upgrades")
	st := configuredNode(t, em, "cp-1", cl.controlPlane)
	c := connect(t, cl.admin, st.Address)

	_, err := c.Upgrade(callCtx(t), "ghcr.io/siderolabs/installer", false, false)
	requireCode(t, codes.InvalidArgument, err)
	_, err = c.Upgrade(callCtx(t), "ghcr.io/siderolabs/installer:v1.13.1", false, false)
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, versionIs(t, c, "v1.13.1")())
	}, 15*time.Second, 10*time.Millisecond, "new version after upgrade")

	require.NoError(t, c.Reboot(callCtx(t)))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, func() error {
			if err := phaseIs(em, "cp-1", PhaseRunning)(); err != nil {
				return err
			}
			return journalCount(t, c, "booted talos", 3)
		}())
	}, 15*time.Second, 10*time.Millisecond, "rebooted")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, versionIs(t, c, "v1.13.1")())
	}, 15*time.Second, 10*time.Millisecond, "version after reboot")

	// The LifecycleService installs (stages) a version; the next reboot boots it.
	require.Equal(t, int32(0), lifecycleUpgrade(t, c, "ghcr.io/siderolabs/installer:v1.13.3"))
	require.NoError(t, versionIs(t, c, "v1.13.1")(), "staged, not yet booted")
	_, err = em.InjectFault("cp-1", Faults{FailNextUpgrade: true})
	require.NoError(t, err)
	require.Equal(t, int32(1), lifecycleUpgrade(t, c, "ghcr.io/siderolabs/installer:v1.13.4"), "a failed install reports its exit code")
	require.NoError(t, c.Reboot(callCtx(t)))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, versionIs(t, c, "v1.13.3")())
	}, 15*time.Second, 10*time.Millisecond, "staged version after reboot")

	applied, err := c.ApplyConfiguration(callCtx(t), &machine.ApplyConfigurationRequest{Data: cl.controlPlane, Mode: machine.ApplyConfigurationRequest_NO_REBOOT})
	require.NoError(t, err)
	require.Equal(t, machine.ApplyConfigurationRequest_NO_REBOOT, applied.GetMessages()[0].GetMode())
	_, err = c.ApplyConfiguration(callCtx(t), &machine.ApplyConfigurationRequest{Data: []byte("machine: [")})
	requireCode(t, codes.InvalidArgument, err)

	require.NoError(t, c.Reset(callCtx(t), true, true))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, phaseIs(em, "cp-1", PhaseMaintenance)())
	}, 15*time.Second, 10*time.Millisecond, "back in maintenance")
	resp, err := connectInsecure(t, st.Address).Version(callCtx(t))
	require.NoError(t, err)
	require.Equal(t, "v1.13.3", resp.GetMessages()[0].GetVersion().GetTag())
}

// lifecycleUpgrade runs LifecycleService.Upgrade to its end and returns the exit code.
func lifecycleUpgrade(t *testing.T, c *client.Client, image string) int32 {
	t.Helper()
	s, err := c.LifecycleClient.Upgrade(callCtx(t), &machine.LifecycleServiceUpgradeRequest{
		Source: &machine.InstallArtifactsSource{ImageName: image},
	})
	require.NoError(t, err)
	code := int32(-1)
	for {
		resp, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return code
		}
		require.NoError(t, err)
		if ec, ok := resp.GetProgress().GetResponse().(*machine.LifecycleServiceInstallProgress_ExitCode); ok {
			code = ec.ExitCode
		}
	}
}

// journalCount succeeds once the node's dmesg holds line at least n times.
func journalCount(t *testing.T, c *client.Client, line string, n int) error {
	s, err := c.Dmesg(callCtx(t), false, false)
	if err != nil {
		return err
	}
	var b strings.Builder
	for {
		d, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		b.Write(d.GetBytes())
	}
	if got := strings.Count(b.String(), line); got < n {
		return fmt.Errorf("%q seen %d times", line, got)
	}
	return nil
}

func TestFaults(t *testing.T) {
	t.Parallel()
	em, _ := startEmulator(t, fastConfig(""))
	cl := newTestCluster(t, "faults")
	configuredNode(t, em, "cp", cl.controlPlane) // issues the workers' certificates, as trustd does
	tests := []struct {
		name   string
		faults Faults
		check  func(t *testing.T, c *client.Client)
	}{
		{"fail next upgrade", Faults{FailNextUpgrade: true}, func(t *testing.T, c *client.Client) {
			_, err := c.Upgrade(callCtx(t), "ghcr.io/siderolabs/installer:v1.14.0", false, false)
			requireCode(t, codes.Internal, err)
			require.NoError(t, versionIs(t, c, "v1.13.0")())
			_, err = c.Upgrade(callCtx(t), "ghcr.io/siderolabs/installer:v1.14.0", false, false)
			require.NoError(t, err, "the fault clears after one failure")
			require.EventuallyWithT(t, func(ct *assert.CollectT) {
				assert.NoError(ct, versionIs(t, c, "v1.14.0")())
			}, 15*time.Second, 10*time.Millisecond, "upgraded")
		}},
		{"unreachable", Faults{Unreachable: true}, func(t *testing.T, c *client.Client) {
			_, err := c.Version(callCtx(t))
			requireCode(t, codes.Unavailable, err)
		}},
		{"hang", Faults{Hang: true}, func(t *testing.T, c *client.Client) {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			_, err := c.Version(ctx)
			requireCode(t, codes.DeadlineExceeded, err)
		}},
		{"unhealthy", Faults{Unhealthy: true}, func(t *testing.T, c *client.Client) {
			resp, err := c.ServiceList(callCtx(t))
			require.NoError(t, err)
			for _, s := range resp.GetMessages()[0].GetServices() {
				require.False(t, s.GetHealth().GetHealthy(), s.GetId())
			}
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := fmt.Sprintf("node-%d", i)
			st := configuredNode(t, em, name, cl.worker)
			c := connect(t, cl.admin, st.Address)
			_, err := em.InjectFault(name, tt.faults)
			require.NoError(t, err)
			tt.check(t, c)
			_, err = em.InjectFault(name, Faults{})
			require.NoError(t, err)
			require.EventuallyWithT(t, func(ct *assert.CollectT) {
				assert.NoError(ct, func() error {
					if _, err := c.Version(callCtx(t)); err != nil {
						return err
					}
					return phaseIs(em, name, PhaseRunning)()
				}())
			}, 15*time.Second, 10*time.Millisecond, "healed")
		})
	}
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	em, _ := startEmulator(t, fastConfig(""))
	cl := newTestCluster(t, "refusals")
	other := newTestCluster(t, "other")
	st := configuredNode(t, em, "cp-1", cl.controlPlane)

	_, err := connect(t, other.admin, st.Address).Version(callCtx(t))
	requireCode(t, codes.Unavailable, err) // the TLS handshake fails both ways

	reader := connect(t, cl.reader, st.Address)
	_, err = reader.Version(callCtx(t))
	require.NoError(t, err, "os:reader may read")
	_, err = reader.ServiceList(callCtx(t))
	require.NoError(t, err)
	_, err = reader.Upgrade(callCtx(t), "ghcr.io/siderolabs/installer:v1.13.1", false, false)
	requireCode(t, codes.PermissionDenied, err)
	requireCode(t, codes.PermissionDenied, reader.Reboot(callCtx(t)))
	requireCode(t, codes.PermissionDenied, reader.Reset(callCtx(t), true, true))
	_, err = reader.ApplyConfiguration(callCtx(t), &machine.ApplyConfigurationRequest{Data: cl.controlPlane})
	requireCode(t, codes.PermissionDenied, err)
	requireCode(t, codes.PermissionDenied, reader.Bootstrap(callCtx(t), &machine.BootstrapRequest{}))
	up, err := reader.LifecycleClient.Upgrade(callCtx(t), &machine.LifecycleServiceUpgradeRequest{
		Source: &machine.InstallArtifactsSource{ImageName: "ghcr.io/siderolabs/installer:v1.13.1"},
	})
	require.NoError(t, err)
	_, err = up.Recv()
	requireCode(t, codes.PermissionDenied, err)
	_, err = reader.Kubeconfig(callCtx(t))
	requireCode(t, codes.PermissionDenied, err)
	_, err = connectInsecure(t, st.Address).Version(callCtx(t))
	require.Error(t, err, "a configured node wants a client certificate")
}

func TestPersistenceAcrossRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cl := newTestCluster(t, "persist")
	em, stop := startEmulator(t, fastConfig(dir))
	cp := configuredNode(t, em, "cp-1", cl.controlPlane)
	maint, err := em.Create(context.Background(), NodeSpec{Name: "spare", Cluster: "persist"})
	require.NoError(t, err)
	c := connect(t, cl.admin, cp.Address)
	require.NoError(t, c.Bootstrap(callCtx(t), &machine.BootstrapRequest{}))
	_, err = c.Upgrade(callCtx(t), "ghcr.io/siderolabs/installer:v1.13.2", false, false)
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, versionIs(t, c, "v1.13.2")())
	}, 15*time.Second, 10*time.Millisecond, "upgraded")
	_, err = em.InjectFault("spare", Faults{Unhealthy: true})
	require.NoError(t, err)
	stop()

	_, err = c.Version(callCtx(t))
	requireCode(t, codes.Unavailable, err)

	em2, _ := startEmulator(t, fastConfig(dir))
	got, err := em2.Get("cp-1")
	require.NoError(t, err)
	require.Equal(t, cp.Address, got.Address)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, versionIs(t, c, "v1.13.2")())
	}, 15*time.Second, 10*time.Millisecond, "back with its version")
	resp, err := c.EtcdMemberList(callCtx(t), &machine.EtcdMemberListRequest{})
	require.NoError(t, err, "bootstrap survives a restart")
	require.Len(t, resp.GetMessages()[0].GetMembers(), 1)
	requireCode(t, codes.AlreadyExists, c.Bootstrap(callCtx(t), &machine.BootstrapRequest{}))

	spare, err := em2.Get("spare")
	require.NoError(t, err)
	require.Equal(t, maint.Address, spare.Address)
	require.Equal(t, PhaseMaintenance, spare.Phase)
	require.True(t, spare.Faults.Unhealthy)

	require.NoError(t, em2.Delete("spare"))
	require.NoFileExists(t, dir+"/nodes/spare.json")
}

func TestPortsAddressing(t *testing.T) {
	t.Parallel()
	em, _ := startEmulator(t, Config{Addressing: AddressingPorts})
	a, err := em.Create(context.Background(), NodeSpec{Name: "a"})
	require.NoError(t, err)
	b, err := em.Create(context.Background(), NodeSpec{Name: "b"})
	require.NoError(t, err)
	require.NotEqual(t, a.Address, b.Address)
	require.True(t, strings.HasPrefix(a.Address, "127.0.0.1:"), a.Address)
	_, err = connectInsecure(t, b.Address).Version(callCtx(t))
	require.NoError(t, err)
}

func TestCreateRefusals(t *testing.T) {
	t.Parallel()
	em, _ := startEmulator(t, Config{Addressing: AddressingPorts})
	_, err := em.Create(context.Background(), NodeSpec{Name: "a"})
	require.NoError(t, err)
	tests := []struct {
		name string
		spec NodeSpec
		want string
	}{
		{"duplicate", NodeSpec{Name: "a"}, "AlreadyExists"},
		{"bad name", NodeSpec{Name: "Not_A_Label"}, "Invalid"},
		{"bad user data", NodeSpec{Name: "b", UserData: []byte("machine: [")}, "Invalid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := em.Create(context.Background(), tt.spec)
			require.Error(t, err)
			require.Equal(t, tt.want, string(domain.ReasonOf(err)))
		})
	}
	require.Error(t, em.Delete("missing"))
}

func TestVersionFromImage(t *testing.T) {
	tests := []struct {
		image, want string
		ok          bool
	}{
		{"ghcr.io/siderolabs/installer:v1.13.1", "v1.13.1", true},
		{"localhost:5000/installer:v1.14.0-alpha.1", "v1.14.0-alpha.1", true},
		{"ghcr.io/siderolabs/installer:v1.13.1@sha256:abcd", "v1.13.1", true},
		{"localhost:5000/installer", "", false},
		{"installer:", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.image, func(t *testing.T) {
			got, ok := versionFromImage(tt.image)
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.want, got)
		})
	}
}

// TestWorkerWaitsForTrustd: a worker's config carries no OS CA key, so its
// certificate comes from a control plane (trustd); until one of its cluster
// boots, the worker stays unreachable.
func TestWorkerWaitsForTrustd(t *testing.T) {
	t.Parallel()
	em, _ := startEmulator(t, fastConfig(""))
	cl := newTestCluster(t, "trustd")
	w, err := em.Create(context.Background(), NodeSpec{Name: "worker-1", UserData: cl.worker})
	require.NoError(t, err)
	require.Equal(t, PhaseBooting, w.Phase)
	require.Contains(t, w.Error, "trustd")
	c := connect(t, cl.admin, w.Address)
	_, err = c.Version(callCtx(t))
	requireCode(t, codes.Unavailable, err)

	configuredNode(t, em, "cp-1", cl.controlPlane)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, versionIs(t, c, "v1.13.0")())
	}, 15*time.Second, 10*time.Millisecond, "worker up once a control plane is")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, phaseIs(em, "worker-1", PhaseRunning)())
	}, 15*time.Second, 10*time.Millisecond, "worker running")
}

// TestUpgradeRebootOutlivesTheEmulator stops the emulator while a node
// reboots into an upgrade: a real machine's reboot goes on without the
// management plane, so the node comes back on the new version.
func TestUpgradeRebootOutlivesTheEmulator(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cl := newTestCluster(t, "outlive")
	slow := fastConfig(dir)
	slow.UpgradeDelay = time.Hour
	em, stop := startEmulator(t, slow)
	cp := configuredNode(t, em, "cp-1", cl.controlPlane)
	c := connect(t, cl.admin, cp.Address)
	_, err := c.Upgrade(callCtx(t), "ghcr.io/siderolabs/installer:v1.13.2", false, false)
	require.NoError(t, err)
	// The answer comes first; the node goes down just after (a goroutine,
	// after the shutdown delay), and stays down for the hour.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, phaseIs(em, "cp-1", PhaseRebooting)())
	}, 15*time.Second, time.Millisecond, "rebooting into the upgrade")
	stop()

	em2, _ := startEmulator(t, fastConfig(dir))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, versionIs(t, c, "v1.13.2")())
	}, 15*time.Second, 10*time.Millisecond, "back on the new version")
	got, err := em2.Get("cp-1")
	require.NoError(t, err)
	require.Empty(t, got.RebootingInto)
}

// TestUpgradeWhileBooting: a node asked to upgrade while its services are
// still starting (just back from a reboot) takes the call once they run
// instead of refusing it with Unavailable, which a caller cannot tell from
// a node that is down.
func TestUpgradeWhileBooting(t *testing.T) {
	t.Parallel()
	cfg := fastConfig("")
	cfg.ServiceStartDelay = 300 * time.Millisecond
	em, _ := startEmulator(t, cfg)
	cl := newTestCluster(t, "midboot")
	st := configuredNode(t, em, "cp-1", cl.controlPlane)
	c := connect(t, cl.admin, st.Address)
	require.NoError(t, c.Reboot(callCtx(t)))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, phaseIs(em, "cp-1", PhaseBooting)())
	}, 15*time.Second, time.Millisecond, "booting again")
	_, err := c.Upgrade(callCtx(t), "ghcr.io/siderolabs/installer:v1.13.2", false, false)
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, versionIs(t, c, "v1.13.2")())
	}, 15*time.Second, 10*time.Millisecond, "upgraded")
}
