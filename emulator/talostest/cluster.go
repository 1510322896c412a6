// Package talostest boots a tenant of emulated Talos nodes for tests of talos
// and its subpackages (health, logs): nodes booted with configs rendered from
// the tenant's PKI, etcd bootstrapped, and their Machine objects in a real
// event store and read model. Only tests import it.
package talostest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/emulator"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
)

// Port is the Talos API port of the emulated nodes (one loopback IP each).
const Port = 50000

// Cluster is a running tenant of emulated nodes; everything stops when the
// test ends.
type Cluster struct {
	T     testing.TB
	Ctx   context.Context
	Store *eventstore.Store
	Cache *projections.Cache
	PKI   *talos.PKI
	// Sealed is the sealed secret store the PKI keeps its bundles in.
	Sealed *eventstore.SealedSecrets
	Em     *emulator.Emulator
	Tenant string
}

// Start boots a tenant "acme" (phase Ready) of cps control planes and
// workers workers (cp-1.., w-1..), bootstraps etcd on cp-1 and waits until
// every node runs, on a store of its own. It skips the test where the
// emulator cannot have a loopback IP per node.
func Start(t testing.TB, cps, workers int) *Cluster {
	t.Helper()
	return StartOn(t, eventstoretest.Start(t).Store, cps, workers)
}

// StartOn is Start on a store the test already has (a conformance kit's):
// the tenant, its machines and its PKI's bundle (sealed with a key of the
// cluster's, see Cluster.Sealed) are written to store, so that controllers
// reading it reach the nodes. The store must hold no tenant "acme" yet.
func StartOn(t testing.TB, store *eventstore.Store, cps, workers int) *Cluster {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cache := projections.NewCache(store, nil)
	cacheDone := make(chan error, 1)
	go func() { cacheDone <- cache.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-cacheDone })
	plain, err := eventstore.OpenSecrets(ctx, store)
	require.NoError(t, err)
	sealed, err := eventstore.OpenSealedSecrets(ctx, plain, eventstore.SealerConfig{KeyFile: filepath.Join(t.TempDir(), "secrets.key")})
	require.NoError(t, err)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	pki := talos.NewPKI(talos.PKIConfig{Cache: cache, Secrets: sealed, Log: quiet})

	em, err := emulator.New(emulator.Config{Addressing: emulator.AddressingLoopback, Port: Port,
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

	c := &Cluster{T: t, Ctx: ctx, Store: store, Cache: cache, PKI: pki, Sealed: sealed, Em: em, Tenant: "acme"}
	c.Execute(domain.Command{Op: domain.OpCreate, Ref: domain.TenantRef(c.Tenant),
		Object: &domain.Object{Metadata: domain.ObjectMeta{Name: c.Tenant}, Spec: json.RawMessage(`{}`)}})
	c.SetTenantPhase("Ready")
	tenant := GetAs[domain.Tenant](t, cache, domain.TenantRef(c.Tenant))
	bundle, err := pki.Bundle(ctx, c.Tenant)
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
		ng := &domain.NodeGroup{Metadata: domain.ObjectMeta{Name: "ng", Tenant: c.Tenant}, Spec: domain.NodeGroupSpec{Role: role, Count: 1, Provider: "emu"}}
		cfg, err := talos.Render(talos.RenderInput{Tenant: tenant, NodeGroup: ng, ControlPlaneAddress: plan[0].ip, Bundle: bundle})
		require.NoError(t, err)
		configs[role] = cfg
	}
	// Control planes boot first: they bring the OS CA key workers' certificates are issued with.
	for _, p := range plan {
		_, err := em.Create(ctx, emulator.NodeSpec{Name: p.name, Cluster: c.Tenant, UserData: configs[p.role], Address: p.ip})
		require.NoError(t, err)
		spec, err := json.Marshal(domain.MachineSpec{NodeGroup: p.group, Role: p.role, Address: p.ip})
		require.NoError(t, err)
		c.Execute(domain.Command{Op: domain.OpCreate, Ref: domain.ObjectRef(domain.MachineKind, c.Tenant, p.name),
			Object: &domain.Object{Metadata: domain.ObjectMeta{Name: p.name, Tenant: c.Tenant}, Spec: spec}})
	}
	c.bootstrap(bundle, plan[0].ip)
	require.Eventually(t, func() bool {
		for _, n := range em.List() {
			if n.Phase != emulator.PhaseRunning {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond, "every node running")
	return c
}

// bootstrap starts etcd on the first control plane with an admin talosconfig.
func (c *Cluster) bootstrap(bundle *secrets.Bundle, ip string) {
	c.T.Helper()
	endpoint := net.JoinHostPort(ip, strconv.Itoa(Port))
	raw, err := talos.Talosconfig(bundle, c.Tenant, []string{endpoint})
	require.NoError(c.T, err)
	tc, err := clientconfig.FromBytes(raw)
	require.NoError(c.T, err)
	cl, err := client.New(c.Ctx, client.WithConfig(tc), client.WithEndpoints(endpoint))
	require.NoError(c.T, err)
	defer cl.Close()
	require.Eventually(c.T, func() bool { return cl.Bootstrap(c.Ctx, &machine.BootstrapRequest{}) == nil }, 15*time.Second, 10*time.Millisecond, "etcd bootstrapped")
}

// Execute runs cmd as "test" and waits until the read model has it.
func (c *Cluster) Execute(cmd domain.Command) {
	c.T.Helper()
	cmd.Actor, cmd.Now, cmd.NewUID = "test", time.Now(), uuid.NewString()
	res, err := c.Store.Execute(c.Ctx, cmd, eventstore.UpdateOptions{Retries: 5})
	require.NoError(c.T, err)
	require.NoError(c.T, c.Cache.WaitFor(c.Ctx, res.Seq))
}

// SetTenantPhase writes the tenant's status.phase.
func (c *Cluster) SetTenantPhase(phase string) {
	c.T.Helper()
	ref := domain.TenantRef(c.Tenant)
	cur := GetAs[domain.Tenant](c.T, c.Cache, ref)
	cur.Status.Phase = phase
	raw, err := json.Marshal(cur.Status)
	require.NoError(c.T, err)
	c.Execute(domain.Command{Op: domain.OpUpdateStatus, Ref: ref, Object: &domain.Object{Status: raw}})
}

// Fault injects f into node.
func (c *Cluster) Fault(node string, f emulator.Faults) {
	c.T.Helper()
	_, err := c.Em.InjectFault(node, f)
	require.NoError(c.T, err)
}

// GetAs reads ref from the read model, which must have it.
func GetAs[T any](t testing.TB, cache *projections.Cache, ref domain.Ref) *T {
	t.Helper()
	v, ok, err := projections.Get[T](cache, ref)
	require.NoError(t, err)
	require.True(t, ok, "%s not in the read model", ref)
	return v
}
