package autoscaling_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	protos "github.com/rezuscloud/rezuscloud/autoscaling/externalgrpc"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/rezuscloud/rezuscloud/autoscaling"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/projections"
)

type env struct {
	t     *testing.T
	ctx   context.Context
	store *eventstore.Store
	cache *projections.Cache
	pki   *autoscaling.PKI
	addr  string
}

// newEnv serves the service on a real TLS listener over a real store.
func newEnv(t *testing.T) *env {
	ctx, cancel := context.WithCancel(context.Background())
	es := eventstoretest.Start(t)
	cache := projections.NewCache(es.Store, nil)
	done := make(chan error, 1)
	go func() { done <- cache.Run(ctx) }()
	plain, err := eventstore.OpenSecrets(ctx, es.Store)
	require.NoError(t, err)
	sealed, err := eventstore.OpenSealedSecrets(ctx, plain, eventstore.SealerConfig{KeyFile: filepath.Join(t.TempDir(), "secrets.key")})
	require.NoError(t, err)
	pki := autoscaling.NewPKI(sealed, nil)
	svc, err := autoscaling.NewService(autoscaling.Config{Cache: cache, Store: es.Store, PKI: pki})
	require.NoError(t, err)
	tlsCfg, err := pki.ServerTLS(ctx, []string{"127.0.0.1"})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(tlsCfg)))
	protos.RegisterCloudProviderServer(srv, svc)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-served; cancel(); <-done })
	e := &env{t: t, ctx: ctx, store: es.Store, cache: cache, pki: pki, addr: ln.Addr().String()}
	for _, tn := range []string{"acme", "blue"} {
		e.create(domain.TenantRef(tn), `{}`)
		e.create(domain.ObjectRef(domain.ProviderKind, "", "emu-"+tn), `{"type":"emulated"}`)
		e.create(domain.ObjectRef(domain.NodeGroupKind, tn, "cp"), `{"role":"controlplane","count":1,"provider":"emu-`+tn+`"}`)
		e.create(domain.ObjectRef(domain.NodeGroupKind, tn, "workers"),
			`{"role":"worker","count":3,"provider":"emu-`+tn+`","autoscaling":{"minCount":1,"maxCount":4},"labels":{"pool":"w"},"taints":[{"key":"gpu","value":"yes","effect":"NoSchedule"}]}`)
		e.create(domain.ObjectRef(domain.NodeGroupKind, tn, "fixed"), `{"role":"worker","count":1,"provider":"emu-`+tn+`"}`)
		for _, m := range []string{"cp-0", "workers-0", "workers-1", "workers-2", "fixed-0"} {
			group, role := m[:len(m)-2], domain.RoleWorker
			if group == "cp" {
				role = domain.RoleControlPlane
			}
			e.create(domain.ObjectRef(domain.MachineKind, tn, m),
				`{"nodeGroup":"`+group+`","role":"`+role+`","hostname":"`+tn+`-`+m+`"}`)
		}
	}
	return e
}

func (e *env) create(ref domain.Ref, spec string) {
	e.t.Helper()
	res, err := e.store.Execute(e.ctx, domain.Command{Op: domain.OpCreate, Ref: ref, Actor: "test", Now: time.Now(), NewUID: uuid.NewString(),
		Object: &domain.Object{Metadata: domain.ObjectMeta{Name: ref.Name, Tenant: ref.Tenant}, Spec: json.RawMessage(spec)}}, eventstore.UpdateOptions{})
	require.NoError(e.t, err)
	require.NoError(e.t, e.cache.WaitFor(e.ctx, res.Seq))
}

// client dials with a certificate issued to tenant.
func (e *env) client(tenant string) (protos.CloudProviderClient, autoscaling.Credentials) {
	e.t.Helper()
	creds, err := e.pki.Issue(e.ctx, tenant, "admin", 0)
	require.NoError(e.t, err)
	return e.dial(creds.CertPEM, creds.KeyPEM, creds.CAPEM), creds
}

func (e *env) dial(certPEM, keyPEM, caPEM []byte) protos.CloudProviderClient {
	e.t.Helper()
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(e.t, err)
	pool := x509.NewCertPool()
	require.True(e.t, pool.AppendCertsFromPEM(caPEM))
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{pair}, RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})))
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = conn.Close() })
	return protos.NewCloudProviderClient(conn)
}

// group reads a node group's spec as stored.
func (e *env) group(tenant, name string) domain.NodeGroupSpec {
	e.t.Helper()
	rec, err := e.store.Load(e.ctx, domain.ObjectRef(domain.NodeGroupKind, tenant, name))
	require.NoError(e.t, err)
	var s domain.NodeGroupSpec
	require.NoError(e.t, json.Unmarshal(rec.Event.Object.Spec, &s))
	return s
}

func requireCode(t *testing.T, want codes.Code, err error) {
	t.Helper()
	st, ok := status.FromError(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, want, st.Code(), "%v", err)
}

// The autoscaler's view through one tenant's certificate: its autoscaled
// groups only, sized within their bounds, the very machine named removed.
func TestServiceScalesOneTenantsGroups(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx
	acme, _ := e.client("acme")

	groups, err := acme.NodeGroups(ctx, &protos.NodeGroupsRequest{})
	require.NoError(t, err)
	require.Len(t, groups.NodeGroups, 1, "only the autoscaled group; not the control plane, not the fixed group")
	require.Equal(t, "workers", groups.NodeGroups[0].Id)
	require.Equal(t, []int32{1, 4}, []int32{groups.NodeGroups[0].MinSize, groups.NodeGroups[0].MaxSize})

	for _, tc := range []struct {
		node *protos.ExternalGrpcNode
		want string
	}{
		{&protos.ExternalGrpcNode{ProviderID: "rezuscloud://acme/workers-1", Name: "acme-workers-1"}, "workers"},
		{&protos.ExternalGrpcNode{Name: "acme-workers-2"}, "workers"},
		{&protos.ExternalGrpcNode{Name: "acme-cp-0"}, ""},
		{&protos.ExternalGrpcNode{Name: "acme-fixed-0"}, ""},
		{&protos.ExternalGrpcNode{ProviderID: "rezuscloud://blue/workers-1", Name: "blue-workers-1"}, ""},
	} {
		res, err := acme.NodeGroupForNode(ctx, &protos.NodeGroupForNodeRequest{Node: tc.node})
		require.NoError(t, err)
		require.Equal(t, tc.want, res.NodeGroup.Id, "%v", tc.node)
	}

	// Increase within the bounds, then beyond: an error, not a clamp.
	_, err = acme.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: "workers", Delta: 1})
	require.NoError(t, err)
	require.Equal(t, 4, e.group("acme", "workers").Count)
	require.Equal(t, 3, e.group("blue", "workers").Count, "the other tenant's group of the same name is not touched")
	_, err = acme.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: "workers", Delta: 1})
	requireCode(t, codes.InvalidArgument, err)
	require.Equal(t, 4, e.group("acme", "workers").Count)
	_, err = acme.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: "fixed", Delta: 1})
	requireCode(t, codes.NotFound, err)

	// The target comes down by the machine not built (workers-3), never a built one.
	_, err = acme.NodeGroupDecreaseTargetSize(ctx, &protos.NodeGroupDecreaseTargetSizeRequest{Id: "workers", Delta: -2})
	requireCode(t, codes.FailedPrecondition, err)
	_, err = acme.NodeGroupDecreaseTargetSize(ctx, &protos.NodeGroupDecreaseTargetSizeRequest{Id: "workers", Delta: -1})
	require.NoError(t, err)
	require.Equal(t, &domain.Members{Indexes: []int{0, 1, 2}, Next: 4}, e.group("acme", "workers").Members)

	// Delete the middle machine: exactly it goes.
	_, err = acme.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: "workers",
		Nodes: []*protos.ExternalGrpcNode{{ProviderID: "rezuscloud://acme/workers-1", Name: "acme-workers-1"}}})
	require.NoError(t, err)
	spec := e.group("acme", "workers")
	require.Equal(t, 2, spec.Count)
	require.Equal(t, &domain.Members{Indexes: []int{0, 2}, Next: 4}, spec.Members)
	rec, err := e.store.Load(ctx, domain.ObjectRef(domain.NodeGroupKind, "acme", "workers"))
	require.NoError(t, err)
	require.Equal(t, "NodeGroupScaled", rec.Event.Type)
	require.Equal(t, "system:autoscaler:acme", rec.Event.Actor)
	require.NoError(t, e.cache.WaitFor(ctx, rec.Seq))

	// Below minCount, a machine of another group, another tenant's Node.
	_, err = acme.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: "workers",
		Nodes: []*protos.ExternalGrpcNode{{Name: "acme-workers-0"}, {Name: "acme-workers-2"}}})
	requireCode(t, codes.FailedPrecondition, err)
	_, err = acme.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: "workers",
		Nodes: []*protos.ExternalGrpcNode{{Name: "acme-fixed-0"}}})
	requireCode(t, codes.InvalidArgument, err)
	_, err = acme.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: "workers",
		Nodes: []*protos.ExternalGrpcNode{{ProviderID: "rezuscloud://blue/workers-0", Name: "blue-workers-0"}}})
	requireCode(t, codes.NotFound, err)
	require.Equal(t, 3, e.group("blue", "workers").Count)

	// The instances: workers-1 is deleting (its machine not destroyed yet).
	nodes, err := acme.NodeGroupNodes(ctx, &protos.NodeGroupNodesRequest{Id: "workers"})
	require.NoError(t, err)
	states := map[string]protos.InstanceStatus_InstanceState{}
	for _, in := range nodes.Instances {
		states[in.Id] = in.Status.InstanceState
	}
	require.Equal(t, map[string]protos.InstanceStatus_InstanceState{
		"rezuscloud://acme/workers-0": protos.InstanceStatus_instanceCreating, // built, its Node not ready yet
		"rezuscloud://acme/workers-2": protos.InstanceStatus_instanceCreating,
		"rezuscloud://acme/workers-1": protos.InstanceStatus_instanceDeleting,
	}, states)
	target, err := acme.NodeGroupTargetSize(ctx, &protos.NodeGroupTargetSizeRequest{Id: "workers"})
	require.NoError(t, err)
	require.Equal(t, int32(2), target.TargetSize)

	// A machine never built (its apply failed): the autoscaler gives it up
	// by the instance ID NodeGroupNodes gave, with no Node behind it.
	_, err = acme.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: "workers", Delta: 1})
	require.NoError(t, err)
	require.Equal(t, &domain.Members{Indexes: []int{0, 2, 4}, Next: 5}, e.group("acme", "workers").Members)
	_, err = acme.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: "workers",
		Nodes: []*protos.ExternalGrpcNode{{ProviderID: "rezuscloud://acme/workers-4", Name: "rezuscloud://acme/workers-4"}}})
	require.NoError(t, err)
	require.Equal(t, &domain.Members{Indexes: []int{0, 2}, Next: 5}, e.group("acme", "workers").Members)
	rec, err = e.store.Load(ctx, domain.ObjectRef(domain.NodeGroupKind, "acme", "workers"))
	require.NoError(t, err)
	require.NoError(t, e.cache.WaitFor(ctx, rec.Seq))
	// Not a member, or another tenant's: refused.
	for _, id := range []string{"rezuscloud://acme/workers-3", "rezuscloud://acme/workers-9", "rezuscloud://blue/workers-4"} {
		_, err = acme.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: "workers",
			Nodes: []*protos.ExternalGrpcNode{{ProviderID: id, Name: id}}})
		requireCode(t, codes.NotFound, err)
	}

	// The template: the emulated provider's capacity, the group's labels and taints.
	tmpl, err := acme.NodeGroupTemplateNodeInfo(ctx, &protos.NodeGroupTemplateNodeInfoRequest{Id: "workers"})
	require.NoError(t, err)
	var n corev1.Node
	require.NoError(t, n.Unmarshal(tmpl.NodeInfo))
	require.Equal(t, "4", n.Status.Capacity.Cpu().String())
	require.Equal(t, "8Gi", n.Status.Capacity.Memory().String())
	require.Equal(t, "w", n.Labels["pool"])
	require.Equal(t, []corev1.Taint{{Key: "gpu", Value: "yes", Effect: corev1.TaintEffectNoSchedule}}, n.Spec.Taints)
}

// A certificate is refused once revoked, and one of another CA never
// gets through the handshake.
func TestServiceRefusesRevokedAndForeignCertificates(t *testing.T) {
	e := newEnv(t)
	acme, creds := e.client("acme")
	_, err := acme.NodeGroups(e.ctx, &protos.NodeGroupsRequest{})
	require.NoError(t, err)
	listed, err := e.pki.List(e.ctx, "acme")
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.Equal(t, creds.Serial, listed[0].Serial)

	require.NoError(t, e.pki.Revoke(e.ctx, "acme", creds.Serial))
	_, err = acme.NodeGroups(e.ctx, &protos.NodeGroupsRequest{})
	requireCode(t, codes.PermissionDenied, err)
	_, err = acme.NodeGroupIncreaseSize(e.ctx, &protos.NodeGroupIncreaseSizeRequest{Id: "workers", Delta: 1})
	requireCode(t, codes.PermissionDenied, err)
	require.Equal(t, 3, e.group("acme", "workers").Count)

	// Another installation's CA: same names, other keys.
	other := autoscaling.NewPKI(newMemSecrets(), nil)
	foreign, err := other.Issue(e.ctx, "acme", "admin", 0)
	require.NoError(t, err)
	caPEM, err := e.pki.CAPEM(e.ctx)
	require.NoError(t, err)
	_, err = e.dial(foreign.CertPEM, foreign.KeyPEM, caPEM).NodeGroups(e.ctx, &protos.NodeGroupsRequest{})
	requireCode(t, codes.Unavailable, err) // the server ends the handshake

	_, err = e.pki.Issue(e.ctx, "acme", "admin", 2*autoscaling.MaxValidity)
	require.Error(t, err)
	require.Error(t, e.pki.Revoke(e.ctx, "acme", "ffff"))
}
