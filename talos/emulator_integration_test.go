package talos_test

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/emulator"
	"github.com/rezuscloud/rezuscloud/talos"
)

// TestRenderedConfigBootsAnEmulatedNode joins this package to the emulator the
// way the product will: a tenant's bundle, a config rendered from it applied to
// a maintenance-mode node, then the tenant's talosconfig (from the same bundle)
// drives the node over mTLS through the real machinery client.
func TestRenderedConfigBootsAnEmulatedNode(t *testing.T) {
	em, err := emulator.New(emulator.Config{InstallDelay: 20 * time.Millisecond, RebootDelay: 20 * time.Millisecond,
		UpgradeDelay: 20 * time.Millisecond, ServiceStartDelay: 20 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- em.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	<-em.Ready()

	node, err := em.Create(ctx, emulator.NodeSpec{Name: "cp-1", Cluster: "acme"})
	require.NoError(t, err)
	host, _, err := net.SplitHostPort(node.Address)
	require.NoError(t, err)

	tenant := &domain.Tenant{Metadata: domain.ObjectMeta{Name: "acme"}, Spec: domain.TenantSpec{
		TalosVersion: "v1.13.0", KubernetesVersion: "v1.36.0",
		Network: domain.NetworkSpec{PodSubnets: []string{domain.DefaultPodSubnet}, ServiceSubnets: []string{domain.DefaultServiceSubnet}, DNSDomain: domain.DefaultDNSDomain},
	}}
	ng := &domain.NodeGroup{Metadata: domain.ObjectMeta{Name: "cp", Tenant: "acme"}, Spec: domain.NodeGroupSpec{Role: domain.RoleControlPlane, Count: 1, Provider: "emu"}}
	m := &domain.Machine{Metadata: domain.ObjectMeta{Name: "cp-1", Tenant: "acme"}, Spec: domain.MachineSpec{NodeGroup: "cp", Role: domain.RoleControlPlane, Address: host}}
	bundle, err := talos.NewBundle("v1.13.0", time.Now())
	require.NoError(t, err)
	cfg, err := talos.Render(talos.RenderInput{Tenant: tenant, NodeGroup: ng, Machine: m, ControlPlaneAddress: host, Bundle: bundle})
	require.NoError(t, err)

	insecure, err := client.New(ctx, client.WithEndpoints(node.Address),
		client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true})) //nolint:gosec // maintenance mode has no PKI yet.
	require.NoError(t, err)
	defer insecure.Close()
	_, err = insecure.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: cfg, Mode: machine.ApplyConfigurationRequest_REBOOT})
	require.NoError(t, err)

	raw, err := talos.Talosconfig(bundle, "acme", []string{node.Address})
	require.NoError(t, err)
	tc, err := clientconfig.FromBytes(raw)
	require.NoError(t, err)
	c, err := client.New(ctx, client.WithConfig(tc), client.WithEndpoints(node.Address))
	require.NoError(t, err)
	defer c.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		v, err := c.Version(ctx)
		if err == nil {
			require.Equal(t, "v1.13.0", v.Messages[0].Version.Tag)
			break
		}
		require.True(t, time.Now().Before(deadline), "node did not come up over mTLS: %v", err)
		time.Sleep(10 * time.Millisecond) // polling a simulated reboot; nothing to wait on
	}
	require.NoError(t, c.Bootstrap(ctx, &machine.BootstrapRequest{}))
	members, err := c.EtcdMemberList(ctx, &machine.EtcdMemberListRequest{})
	require.NoError(t, err)
	require.Len(t, members.Messages[0].Members, 1)
}
