package health_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/emulator"
	"github.com/rezuscloud/rezuscloud/emulator/talostest"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
	"github.com/rezuscloud/rezuscloud/talos/health"
)

// healthPort is the Talos API port of the emulated nodes (one loopback IP each).
const healthPort = talostest.Port

// healthEnv is a tenant of emulated Talos nodes booted with configs rendered
// from its PKI, its Machine objects in a real event store and read model, and
// a Service probing them through the real machinery client.
type healthEnv struct {
	t      testing.TB
	ctx    context.Context
	store  *eventstore.Store
	cache  *projections.Cache
	pki    *talos.PKI
	em     *emulator.Emulator
	clock  *manualClock
	calls  *callCounter
	svc    *health.Service
	tenant string
	// cluster is the tenant of emulated nodes the fields above are from.
	cluster *talostest.Cluster
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

func (c *callCounter) streamInterceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	c.mu.Lock()
	c.n[method]++
	c.mu.Unlock()
	return streamer(ctx, desc, cc, method, opts...)
}

// snapshot returns the counts so far, keyed by the service's last name and
// the method (MachineService/Version, State/Get).
func (c *callCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.n {
		svc, method, _ := strings.Cut(strings.TrimPrefix(k, "/"), "/")
		out[svc[strings.LastIndexByte(svc, '.')+1:]+"/"+method] = v
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
func newHealthEnv(t testing.TB, cps, workers int, mutate func(*health.Config)) *healthEnv {
	t.Helper()
	c := talostest.Start(t, cps, workers)
	h := &healthEnv{t: t, ctx: c.Ctx, store: c.Store, cache: c.Cache, pki: c.PKI, em: c.Em, cluster: c,
		clock: &manualClock{now: time.Now()}, calls: &callCounter{n: map[string]int{}}, tenant: c.Tenant}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := health.Config{Cache: c.Cache, PKI: c.PKI, Store: c.Store, Now: h.clock.Now, Port: healthPort, Log: quiet,
		// Healthy nodes answer well within it even on a loaded CI host
		// (1s failed there: every node "unreachable"); tests of nodes that
		// do not answer set their own.
		Timeout:     10 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(h.calls.interceptor), grpc.WithChainStreamInterceptor(h.calls.streamInterceptor)}}
	if mutate != nil {
		mutate(&cfg)
	}
	h.svc = health.New(cfg)
	return h
}

func (h *healthEnv) execute(cmd domain.Command) { h.cluster.Execute(cmd) }

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

func (h *healthEnv) fault(node string, f emulator.Faults) { h.cluster.Fault(node, f) }

func getAs[T any](t testing.TB, cache *projections.Cache, ref domain.Ref) *T {
	return talostest.GetAs[T](t, cache, ref)
}
