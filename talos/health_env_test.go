package talos_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
	"github.com/rezuscloud/rezuscloud/talos/emulator"
)

// healthPort is the Talos API port of the emulated nodes (one loopback IP each).
const healthPort = 50000

// healthEnv is a tenant of emulated Talos nodes booted with configs rendered
// from its PKI, its Machine objects in a real event store and read model, and
// a HealthService probing them through the real machinery client.
type healthEnv struct {
	t      testing.TB
	ctx    context.Context
	store  *eventstore.Store
	cache  *projections.Cache
	pki    *talos.PKI
	em     *emulator.Emulator
	clock  *manualClock
	calls  *callCounter
	svc    *talos.HealthService
	tenant string
}

// manualClock is a clock tests move by hand; it starts at the real time.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// callCounter counts the Talos API calls made by the health service, by method.
type callCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *callCounter) interceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.mu.Lock()
	c.n[method]++
	c.mu.Unlock()
	return invoker(ctx, method, req, reply, cc, opts...)
}

// snapshot returns the counts so far, keyed by the method's short name.
func (c *callCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.n {
		out[k[len("/machine.MachineService/"):]] = v
	}
	return out
}

func (c *callCounter) total() int {
	n := 0
	for _, v := range c.snapshot() {
		n += v
	}
	return n
}

// newHealthEnv boots a tenant "acme" of cps control planes and workers workers
// (cp-1.., w-1..), bootstraps etcd, waits for every node to run and returns
// the environment; mutate adjusts the health service's config.
func newHealthEnv(t testing.TB, cps, workers int, mutate func(*talos.HealthConfig)) *healthEnv {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	env := eventstoretest.Start(t)
	cache := projections.NewCache(env.Store, nil)
	cacheDone := make(chan error, 1)
	go func() { cacheDone <- cache.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-cacheDone })
	plain, err := eventstore.OpenSecrets(ctx, env.Store)
	require.NoError(t, err)
	sealed, err := eventstore.OpenSealedSecrets(ctx, plain, eventstore.SealerConfig{KeyFile: filepath.Join(t.TempDir(), "secrets.key")})
	require.NoError(t, err)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	pki := talos.NewPKI(talos.PKIConfig{Cache: cache, Secrets: sealed, Log: quiet})

	em, err := emulator.New(emulator.Config{Addressing: emulator.AddressingLoopback, Port: healthPort,
		InstallDelay: 10 * time.Millisecond, RebootDelay: 10 * time.Millisecond,
		UpgradeDelay: 10 * time.Millisecond, ServiceStartDelay: 10 * time.Millisecond})
	require.NoError(t, err)
	emDone := make(chan error, 1)
	go func() { emDone <- em.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-emDone) })
	<-em.Ready()
	if !em.Loopback() {
		t.Skip("the emulator needs a loopback IP per node here (Linux)")
	}

	h := &healthEnv{t: t, ctx: ctx, store: env.Store, cache: cache, pki: pki, em: em,
		clock: &manualClock{now: time.Now()}, calls: &callCounter{n: map[string]int{}}, tenant: "acme"}
	h.execute(domain.Command{Op: domain.OpCreate, Ref: domain.Ref{Kind: domain.TenantKind.Kind, Name: h.tenant},
		Object: &domain.Object{Metadata: domain.ObjectMeta{Name: h.tenant}, Spec: json.RawMessage(`{}`)}})
	h.setTenantPhase("Ready")
	tenant := getAs[domain.Tenant](t, cache, domain.Ref{Kind: domain.TenantKind.Kind, Name: h.tenant})
	bundle, err := pki.Bundle(ctx, h.tenant)
	require.NoError(t, err)

	type planned struct {
		name, group, role, ip string
	}
	var plan []planned
	for i := 1; i <= cps; i++ {
		plan = append(plan, planned{name: fmt.Sprintf("cp-%d", i), group: "cp", role: domain.RoleControlPlane})
	}
	for i := 1; i <= workers; i++ {
		plan = append(plan, planned{name: fmt.Sprintf("w-%d", i), group: "workers", role: domain.RoleWorker})
	}
	for i := range plan {
		a, err := em.ReserveAddress(ctx, emulator.AddressSpec{Name: plan[i].name})
		require.NoError(t, err)
		plan[i].ip = a.Address
	}
	configs := map[string][]byte{}
	for _, role := range []string{domain.RoleControlPlane, domain.RoleWorker} {
		ng := &domain.NodeGroup{Metadata: domain.ObjectMeta{Name: "ng", Tenant: h.tenant}, Spec: domain.NodeGroupSpec{Role: role, Count: 1, Provider: "emu"}}
		cfg, err := talos.Render(talos.RenderInput{Tenant: tenant, NodeGroup: ng, ControlPlaneAddress: plan[0].ip, Bundle: bundle})
		require.NoError(t, err)
		configs[role] = cfg
	}
	// Control planes boot first: they bring the OS CA key workers' certificates are issued with.
	for _, p := range plan {
		_, err := em.Create(ctx, emulator.NodeSpec{Name: p.name, Cluster: h.tenant, UserData: configs[p.role], Address: p.ip})
		require.NoError(t, err)
		spec, err := json.Marshal(domain.MachineSpec{NodeGroup: p.group, Role: p.role, Address: p.ip})
		require.NoError(t, err)
		h.execute(domain.Command{Op: domain.OpCreate, Ref: domain.Ref{Kind: domain.MachineKind.Kind, Tenant: h.tenant, Name: p.name},
			Object: &domain.Object{Metadata: domain.ObjectMeta{Name: p.name, Tenant: h.tenant}, Spec: spec}})
	}
	h.bootstrap(bundle, plan[0].ip)
	require.Eventually(t, func() bool {
		for _, n := range em.List() {
			if n.Phase != emulator.PhaseRunning {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond)

	cfg := talos.HealthConfig{Cache: cache, PKI: pki, Store: env.Store, Now: h.clock.Now, Port: healthPort, Log: quiet,
		Timeout:     time.Second,
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(h.calls.interceptor)}}
	if mutate != nil {
		mutate(&cfg)
	}
	h.svc = talos.NewHealthService(cfg)
	return h
}

// bootstrap starts etcd on the first control plane with an admin talosconfig.
func (h *healthEnv) bootstrap(bundle *secrets.Bundle, ip string) {
	h.t.Helper()
	endpoint := net.JoinHostPort(ip, strconv.Itoa(healthPort))
	raw, err := talos.Talosconfig(bundle, h.tenant, []string{endpoint})
	require.NoError(h.t, err)
	tc, err := clientconfig.FromBytes(raw)
	require.NoError(h.t, err)
	c, err := client.New(h.ctx, client.WithConfig(tc), client.WithEndpoints(endpoint))
	require.NoError(h.t, err)
	defer c.Close()
	require.Eventually(h.t, func() bool { return c.Bootstrap(h.ctx, &machine.BootstrapRequest{}) == nil }, 15*time.Second, 10*time.Millisecond)
}

func (h *healthEnv) execute(cmd domain.Command) {
	h.t.Helper()
	cmd.Actor, cmd.Now, cmd.NewUID = "test", time.Now(), uuid.NewString()
	res, err := h.store.Execute(h.ctx, cmd, eventstore.UpdateOptions{Retries: 5})
	require.NoError(h.t, err)
	require.NoError(h.t, h.cache.WaitFor(h.ctx, res.Seq))
}

func (h *healthEnv) setTenantPhase(phase string) {
	h.t.Helper()
	ref := domain.Ref{Kind: domain.TenantKind.Kind, Name: h.tenant}
	cur := getAs[domain.Tenant](h.t, h.cache, ref)
	cur.Status.Phase = phase
	raw, err := json.Marshal(cur.Status)
	require.NoError(h.t, err)
	h.execute(domain.Command{Op: domain.OpUpdateStatus, Ref: ref, Object: &domain.Object{Status: raw}})
}

// sync waits until the read model holds every event written so far.
func (h *healthEnv) sync() {
	h.t.Helper()
	require.NoError(h.t, h.cache.Sync(h.ctx))
}

// lastSeq is the stream's last sequence: how many events exist.
func (h *healthEnv) lastSeq() uint64 {
	h.t.Helper()
	_, last, err := h.store.Bounds(h.ctx)
	require.NoError(h.t, err)
	return last
}

func (h *healthEnv) machine(name string) *domain.Machine {
	h.t.Helper()
	h.sync()
	return getAs[domain.Machine](h.t, h.cache, domain.Ref{Kind: domain.MachineKind.Kind, Tenant: h.tenant, Name: name})
}

func (h *healthEnv) tenantObj() *domain.Tenant {
	h.t.Helper()
	h.sync()
	return getAs[domain.Tenant](h.t, h.cache, domain.Ref{Kind: domain.TenantKind.Kind, Name: h.tenant})
}

func (h *healthEnv) fault(node string, f emulator.Faults) {
	h.t.Helper()
	_, err := h.em.InjectFault(node, f)
	require.NoError(h.t, err)
}

func getAs[T any](t testing.TB, cache *projections.Cache, ref domain.Ref) *T {
	t.Helper()
	raw, ok := cache.Get(ref)
	require.True(t, ok, "%s not in the read model", ref)
	v := new(T)
	require.NoError(t, json.Unmarshal(raw, v))
	return v
}
