package upgrade_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/rezuscloud/rezuscloud/controllers/upgrade"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/emulator"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
	"github.com/rezuscloud/rezuscloud/talos/health"
)

// The versions the saga tests upgrade between. The tenant's configs carry
// Kubernetes sagaKube, which both Talos versions run (machinery's matrix:
// Talos 1.12 runs 1.30-1.35, 1.13 runs 1.31-1.36); Kubernetes runs go to
// sagaKubeTo.
const (
	sagaFrom   = "v1.12.0"
	sagaTo     = "v1.13.0"
	sagaKube   = "v1.34.2"
	sagaKubeTo = "v1.35.0"
)

// sagaEnv is a tenant "acme" of emulated Talos nodes booted on sagaFrom with
// configs rendered from its PKI, its Machine objects in a real event store and
// read model, and upgrade sagas started on them through the real machinery
// client; it counts the Upgrade calls every saga makes, by node.
type sagaEnv struct {
	t      testing.TB
	ctx    context.Context
	store  *eventstore.Store
	cache  *projections.Cache
	pki    *talos.PKI
	em     *emulator.Emulator
	tenant string
	calls  *upgradeCalls
	// nodes are the machine names in creation order; ips their addresses.
	nodes []string
	ips   map[string]string
	sagas int
}

// upgradeCalls counts MachineService.Upgrade calls (and the installer
// images they name) and ApplyConfiguration calls by target address.
type upgradeCalls struct {
	mu     sync.Mutex
	n      map[string]int
	images map[string][]string
	apply  map[string]int
}

func (c *upgradeCalls) interceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	host, _, _ := net.SplitHostPort(strings.TrimPrefix(cc.Target(), "dns:///"))
	switch method {
	case "/machine.MachineService/Upgrade":
		c.mu.Lock()
		c.n[host]++
		if r, ok := req.(*machine.UpgradeRequest); ok {
			c.images[host] = append(c.images[host], r.GetImage())
		}
		c.mu.Unlock()
	case "/machine.MachineService/ApplyConfiguration":
		c.mu.Lock()
		c.apply[host]++
		c.mu.Unlock()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// byNode returns the Upgrade calls made to each node so far.
func (e *sagaEnv) upgradeCalls() map[string]int {
	e.calls.mu.Lock()
	defer e.calls.mu.Unlock()
	out := map[string]int{}
	for _, name := range e.nodes {
		if n := e.calls.n[e.ips[name]]; n > 0 {
			out[name] = n
		}
	}
	return out
}

// fastNodes are emulator stage delays of a few milliseconds.
func fastNodes(c *emulator.Config) {
	c.InstallDelay, c.RebootDelay, c.UpgradeDelay, c.ServiceStartDelay = 10*time.Millisecond, 20*time.Millisecond, 20*time.Millisecond, 10*time.Millisecond
}

// newSagaEnv boots cps control planes (cp-1.., etcd bootstrapped on cp-1, so
// it leads) and workers workers (w-1..) and waits until every node runs.
func newSagaEnv(t testing.TB, cps, workers int, nodeDelays func(*emulator.Config)) *sagaEnv {
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
	pki := talos.NewPKI(talos.PKIConfig{Cache: cache, Secrets: sealed})

	emCfg := emulator.Config{Addressing: emulator.AddressingLoopback, TalosVersion: sagaFrom}
	fastNodes(&emCfg)
	if nodeDelays != nil {
		nodeDelays(&emCfg)
	}
	em, err := emulator.New(emCfg)
	require.NoError(t, err)
	emDone := make(chan error, 1)
	go func() { emDone <- em.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-emDone) })
	<-em.Ready()
	if !em.Loopback() {
		t.Skip("the emulator needs a loopback IP per node here (Linux)")
	}

	e := &sagaEnv{t: t, ctx: ctx, store: env.Store, cache: cache, pki: pki, em: em, tenant: "acme",
		calls: &upgradeCalls{n: map[string]int{}, images: map[string][]string{}, apply: map[string]int{}}, ips: map[string]string{}}
	e.execute(domain.Command{Op: domain.OpCreate, Ref: domain.Ref{Kind: domain.TenantKind.Kind, Name: e.tenant},
		Object: &domain.Object{Spec: json.RawMessage(`{"talosVersion":"` + sagaFrom + `","kubernetesVersion":"` + sagaKube + `"}`)}})
	// The configs carry sagaKube, as the first apply records it.
	e.execute(domain.Command{Op: domain.OpUpdateStatus, Ref: domain.Ref{Kind: domain.TenantKind.Kind, Name: e.tenant},
		Object: &domain.Object{Status: json.RawMessage(`{"kubernetesVersion":"` + sagaKube + `"}`)}})
	e.execute(domain.Command{Op: domain.OpCreate, Ref: e.ref(domain.NodeGroupKind, "cp"),
		Object: &domain.Object{Spec: json.RawMessage(fmt.Sprintf(`{"role":"controlplane","count":%d,"provider":"emu"}`, cps))}})
	e.execute(domain.Command{Op: domain.OpCreate, Ref: e.ref(domain.NodeGroupKind, "workers"),
		Object: &domain.Object{Spec: json.RawMessage(fmt.Sprintf(`{"role":"worker","count":%d,"provider":"emu","updateStrategy":{"maxParallelism":1}}`, workers))}})
	tenant := e.get(domain.Ref{Kind: domain.TenantKind.Kind, Name: e.tenant})
	var tn domain.Tenant
	require.NoError(t, json.Unmarshal(tenant, &tn))
	bundle, err := pki.Bundle(ctx, e.tenant)
	require.NoError(t, err)

	type planned struct{ name, group, role string }
	var plan []planned
	for i := 1; i <= cps; i++ {
		plan = append(plan, planned{fmt.Sprintf("cp-%d", i), "cp", domain.RoleControlPlane})
	}
	for i := 1; i <= workers; i++ {
		plan = append(plan, planned{fmt.Sprintf("w-%d", i), "workers", domain.RoleWorker})
	}
	for _, p := range plan {
		a, err := em.ReserveAddress(ctx, emulator.AddressSpec{Name: p.name})
		require.NoError(t, err)
		e.ips[p.name] = a.Address
		e.nodes = append(e.nodes, p.name)
	}
	configs := map[string][]byte{}
	for _, role := range []string{domain.RoleControlPlane, domain.RoleWorker} {
		ng := &domain.NodeGroup{Metadata: domain.ObjectMeta{Name: "ng", Tenant: e.tenant}, Spec: domain.NodeGroupSpec{Role: role, Count: 1, Provider: "emu"}}
		cfg, err := talos.Render(talos.RenderInput{Tenant: &tn, NodeGroup: ng, ControlPlaneAddress: e.ips["cp-1"], Bundle: bundle})
		require.NoError(t, err)
		configs[role] = cfg
	}
	// Control planes first: they bring the OS CA the workers' certificates are issued from.
	for _, p := range plan {
		_, err := em.Create(ctx, emulator.NodeSpec{Name: p.name, Cluster: e.tenant, UserData: configs[p.role], Address: e.ips[p.name]})
		require.NoError(t, err)
		spec, err := json.Marshal(domain.MachineSpec{NodeGroup: p.group, Role: p.role, Address: e.ips[p.name]})
		require.NoError(t, err)
		e.execute(domain.Command{Op: domain.OpCreate, Ref: e.ref(domain.MachineKind, p.name), Object: &domain.Object{Spec: spec}})
	}
	endpoint := net.JoinHostPort(e.ips["cp-1"], "50000")
	raw, err := talos.Talosconfig(bundle, e.tenant, []string{endpoint})
	require.NoError(t, err)
	tc, err := clientconfig.FromBytes(raw)
	require.NoError(t, err)
	c, err := client.New(ctx, client.WithConfig(tc), client.WithEndpoints(endpoint))
	require.NoError(t, err)
	defer c.Close()
	sagaEventually(t, 15*time.Second, "etcd bootstrapped", func() bool { return c.Bootstrap(ctx, &machine.BootstrapRequest{}) == nil })
	sagaEventually(t, 30*time.Second, "every node running", func() bool {
		for _, n := range em.List() {
			if n.Phase != emulator.PhaseRunning {
				return false
			}
		}
		return true
	})
	return e
}

func (e *sagaEnv) ref(kind *domain.KindInfo, name string) domain.Ref {
	return domain.Ref{Kind: kind.Kind, Tenant: e.tenant, Name: name}
}

// execute runs a command as a user would and waits for the read model.
func (e *sagaEnv) execute(cmd domain.Command) eventstore.Result {
	e.t.Helper()
	if cmd.Object != nil {
		cmd.Object.Metadata.Name, cmd.Object.Metadata.Tenant = cmd.Ref.Name, cmd.Ref.Tenant
	}
	cmd.Actor, cmd.Now, cmd.NewUID = "test", time.Now(), uuid.NewString()
	res, err := e.store.Execute(e.ctx, cmd, eventstore.UpdateOptions{Retries: 5})
	require.NoError(e.t, err)
	require.NoError(e.t, e.cache.WaitFor(e.ctx, res.Seq))
	return res
}

func (e *sagaEnv) get(ref domain.Ref) []byte {
	e.t.Helper()
	require.NoError(e.t, e.cache.Sync(e.ctx))
	raw, ok := e.cache.Get(ref)
	require.True(e.t, ok, "%s not in the read model", ref)
	return raw
}

// updateSpec replaces an object's spec as a PUT would.
func (e *sagaEnv) updateSpec(ref domain.Ref, spec string) {
	e.t.Helper()
	var obj domain.Object
	require.NoError(e.t, json.Unmarshal(e.get(ref), &obj))
	obj.Spec = json.RawMessage(spec)
	e.execute(domain.Command{Op: domain.OpUpdate, Ref: ref, Object: &obj})
}

// createUpgrade posts an Upgrade as a user would.
func (e *sagaEnv) createUpgrade(name, spec string) {
	e.t.Helper()
	e.execute(domain.Command{Op: domain.OpCreate, Ref: e.ref(domain.UpgradeKind, name), Object: &domain.Object{Spec: json.RawMessage(spec)}})
}

func (e *sagaEnv) upgrade(name string) domain.Upgrade {
	e.t.Helper()
	var u domain.Upgrade
	require.NoError(e.t, json.Unmarshal(e.get(e.ref(domain.UpgradeKind, name)), &u))
	return u
}

func (e *sagaEnv) machine(name string) domain.Machine {
	e.t.Helper()
	var m domain.Machine
	require.NoError(e.t, json.Unmarshal(e.get(e.ref(domain.MachineKind, name)), &m))
	return m
}

// observe makes a saga ask a health service of the tenant (talos/health,
// the owner of the machines' stage, readiness and version) to probe its
// machines after each step, as serve wires it.
func (e *sagaEnv) observe(c *upgrade.Config) {
	c.Observer = health.New(health.Config{Cache: e.cache, PKI: e.pki, Store: e.store, Timeout: 5 * time.Second})
}

// upgrades lists the tenant's Upgrade objects.
func (e *sagaEnv) upgrades() []domain.Upgrade {
	e.t.Helper()
	require.NoError(e.t, e.cache.Sync(e.ctx))
	res, err := e.cache.List(domain.UpgradeKind.Kind, projections.ListOptions{Tenant: e.tenant})
	require.NoError(e.t, err)
	var out []domain.Upgrade
	for _, raw := range res.Items {
		var u domain.Upgrade
		require.NoError(e.t, json.Unmarshal(raw, &u))
		out = append(out, u)
	}
	return out
}

// waitUpgrade waits until the upgrade satisfies cond and returns it.
func (e *sagaEnv) waitUpgrade(name string, what string, cond func(domain.Upgrade) bool) domain.Upgrade {
	e.t.Helper()
	var u domain.Upgrade
	sagaEventually(e.t, 60*time.Second, name+": "+what, func() bool {
		raw, ok := e.cache.Get(e.ref(domain.UpgradeKind, name))
		if !ok {
			return false
		}
		u = domain.Upgrade{}
		return json.Unmarshal(raw, &u) == nil && cond(u)
	})
	return u
}

func finished(u domain.Upgrade) bool { return u.Status.Final() }

// stepIs is a condition: the named machine's step is in phase.
func stepIs(machine, phase string) func(domain.Upgrade) bool {
	return func(u domain.Upgrade) bool {
		for _, m := range u.Status.Machines {
			if m.Name == machine {
				return m.Phase == phase
			}
		}
		return false
	}
}

// startSaga runs a saga (a replica) until stop or the end of the test.
func (e *sagaEnv) startSaga(mutate func(*upgrade.Config)) (saga *upgrade.Saga, stop func()) {
	e.t.Helper()
	e.sagas++
	cfg := upgrade.Config{Store: e.store, Cache: e.cache, Bundles: e.pki, Rotations: e.pki, Configs: talos.NewService(e.cache, e.pki), Holder: "saga-" + strconv.Itoa(e.sagas),
		CallTimeout: 2 * time.Second, PollInterval: 5 * time.Millisecond, PrecheckTimeout: 10 * time.Second,
		RebootTimeout: 10 * time.Second, HealthTimeout: 10 * time.Second, Resync: 200 * time.Millisecond, RetryBackoff: 100 * time.Millisecond,
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(e.calls.interceptor)}}
	if mutate != nil {
		mutate(&cfg)
	}
	saga = upgrade.New(cfg)
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- saga.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			require.NoError(e.t, <-done)
		})
	}
	e.t.Cleanup(stop)
	sagaEventually(e.t, 30*time.Second, "saga leading", saga.Leading)
	return saga, stop
}

// stepPhases replays the upgrade's events and returns, per machine, the
// phases its step went through in order (repeats folded).
func (e *sagaEnv) stepPhases(name string) map[string][]string {
	out := map[string][]string{}
	e.replayUpgrade(name, func(u domain.Upgrade) {
		for _, m := range u.Status.Machines {
			ph := out[m.Name]
			if len(ph) == 0 || ph[len(ph)-1] != m.Phase {
				out[m.Name] = append(ph, m.Phase)
			}
		}
	})
	return out
}

// replayUpgrade hands each recorded version of the upgrade to f, oldest first.
func (e *sagaEnv) replayUpgrade(name string, f func(domain.Upgrade)) {
	e.t.Helper()
	_, last, err := e.store.Bounds(e.ctx)
	require.NoError(e.t, err)
	cur, err := e.store.Follow(e.ctx, 1, []string{e.ref(domain.UpgradeKind, name).Subject()})
	require.NoError(e.t, err)
	defer cur.Stop()
	for {
		ctx, cancel := context.WithTimeout(e.ctx, 2*time.Second)
		rec, err := cur.Next(ctx)
		cancel()
		require.NoError(e.t, err)
		var u domain.Upgrade
		require.NoError(e.t, json.Unmarshal(upgradeJSON(rec.Event.Object), &u))
		f(u)
		if rec.Pending == 0 || rec.Seq >= last {
			return
		}
	}
}

func upgradeJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// sagaEventually polls cond until it holds or d passes; for conditions the
// saga and the emulator reach on their own timers, with nothing to wait on.
func sagaEventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
