package emulator

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fastConfig keeps boot stages to milliseconds.
func fastConfig(dir string) Config {
	return Config{
		StateDir:          dir,
		InstallDelay:      20 * time.Millisecond,
		RebootDelay:       20 * time.Millisecond,
		UpgradeDelay:      10 * time.Millisecond,
		ServiceStartDelay: 10 * time.Millisecond,
	}
}

// restartableConfig is fastConfig for a test that restarts its emulator: a
// node gets a port of its own, because a loopback IP freed while the emulator
// is down can be taken by a parallel test's node (the first free IP), and
// the restored node would then fail to bind it.
func restartableConfig(dir string) Config {
	cfg := fastConfig(dir)
	cfg.Addressing = AddressingPorts
	return cfg
}

// startEmulator runs an emulator until the test ends; stop ends it early.
func startEmulator(t *testing.T, cfg Config) (em *Emulator, stop func()) {
	t.Helper()
	em, err := New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- em.Run(ctx) }()
	select {
	case <-em.Ready():
	case err := <-done:
		t.Fatalf("emulator ended: %v", err)
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		require.NoError(t, <-done)
	}
	t.Cleanup(stop)
	return em, stop
}

// testCluster is one tenant's PKI and the configs and talosconfigs made from it.
type testCluster struct {
	controlPlane, worker []byte
	admin, reader        *clientconfig.Config
	backup               *clientconfig.Config // os:etcd:backup only
}

func newTestCluster(t testing.TB, name string) testCluster {
	t.Helper()
	return newTestClusterAt(t, name, "https://10.5.0.1:6443", constants.DefaultKubernetesVersion)
}

// newTestClusterAt is newTestCluster with its control-plane endpoint and
// Kubernetes version.
func newTestClusterAt(t testing.TB, name, endpoint, kubernetesVersion string) testCluster {
	t.Helper()
	bundle, err := secrets.NewBundle(secrets.NewClock(), config.TalosVersionCurrent)
	require.NoError(t, err)
	input := func(roles role.Set) *generate.Input {
		in, err := generate.NewInput(name, endpoint, kubernetesVersion,
			generate.WithSecretsBundle(bundle), generate.WithRoles(roles))
		require.NoError(t, err)
		return in
	}
	admin := input(role.MakeSet(role.Admin))
	render := func(typ machine.Type) []byte {
		cfg, err := admin.Config(typ)
		require.NoError(t, err)
		b, err := cfg.Bytes()
		require.NoError(t, err)
		return b
	}
	tc, err := admin.Talosconfig()
	require.NoError(t, err)
	rc, err := input(role.MakeSet(role.Reader)).Talosconfig()
	require.NoError(t, err)
	bc, err := input(role.MakeSet(role.EtcdBackup)).Talosconfig()
	require.NoError(t, err)
	return testCluster{controlPlane: render(machine.TypeControlPlane), worker: render(machine.TypeWorker), admin: tc, reader: rc, backup: bc}
}

// connect opens a machinery client to one node with a talosconfig (mTLS).
func connect(t *testing.T, tc *clientconfig.Config, addr string) *client.Client {
	t.Helper()
	c, err := client.New(context.Background(), client.WithConfig(tc), client.WithEndpoints(addr))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// connectInsecure opens a client the way `talosctl --insecure` does, for maintenance mode.
func connectInsecure(t *testing.T, addr string) *client.Client {
	t.Helper()
	c, err := client.New(context.Background(), client.WithEndpoints(addr),
		client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true})) //nolint:gosec // maintenance mode has no PKI yet.
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// callCtx bounds one call so an unreachable node fails fast.
func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// versionIs succeeds once the node answers Version with want.
func versionIs(t *testing.T, c *client.Client, want string) func() error {
	return func() error {
		resp, err := c.Version(callCtx(t))
		if err != nil {
			return err
		}
		if got := resp.GetMessages()[0].GetVersion().GetTag(); got != want {
			return errors.New("version " + got)
		}
		return nil
	}
}

// phaseIs succeeds once the emulator reports the node in phase p.
func phaseIs(em *Emulator, name string, p Phase) func() error {
	return func() error {
		st, err := em.Get(name)
		if err != nil {
			return err
		}
		if st.Phase != p {
			return errors.New("phase " + string(st.Phase))
		}
		return nil
	}
}

func requireCode(t *testing.T, want codes.Code, err error) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, want, status.Code(err), "error: %v", err)
}

// authorized is em's HTTP API for the tests that are not about its
// authentication: every request carries the bearer token, as the emulated
// provider's do (TestHTTPAPIToken tests the refusals).
func authorized(em *Emulator) http.Handler {
	h := em.Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+em.APIToken())
		h.ServeHTTP(w, r)
	})
}
