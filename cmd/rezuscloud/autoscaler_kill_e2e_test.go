//go:build e2e

package main

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	protos "github.com/rezuscloud/rezuscloud/autoscaling/externalgrpc"
)

// autoscalerClient dials the server's externalgrpc service with a client
// certificate issued to tenant through the API, as the autoscaler does.
func autoscalerClient(t *testing.T, p *proc, tenant string) protos.CloudProviderClient {
	t.Helper()
	code, creds := p.do(http.MethodPost, "/api/v1/tenants/"+tenant+"/autoscaler/certificates", `{"validity":"1h"}`)
	require.Equal(t, http.StatusCreated, code, creds)
	pair, err := tls.X509KeyPair([]byte(creds["certificate"].(string)), []byte(creds["key"].(string)))
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM([]byte(creds["ca"].(string))))
	endpoint := creds["endpoint"].(string)
	host, _, err := net.SplitHostPort(endpoint)
	require.NoError(t, err)
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{pair}, RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12})))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return protos.NewCloudProviderClient(conn)
}

// A scale-up the autoscaler asked for survives kill -9 of RezusCloud in
// the middle of the apply that builds it: after the restart the target is
// still 4, the machines are built once each (no index used twice, no
// emulator node left over) and the group never went above its target.
func TestAutoscalerTargetSurvivesKillNine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startInfraServer(t, dir, "--autoscaler-listen", "127.0.0.1:0")
	const tenant = "surge"
	code, body := p.do(http.MethodPost, "/api/v1/tenants", `{"metadata":{"name":"`+tenant+`"},"spec":{}}`)
	require.Equal(t, http.StatusCreated, code, body)
	for _, g := range []string{
		`{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":1,"provider":"emulated"}}`,
		`{"metadata":{"name":"workers"},"spec":{"role":"worker","count":1,"provider":"emulated","autoscaling":{"minCount":1,"maxCount":4}}}`,
	} {
		code, body = p.do(http.MethodPost, "/api/v1/tenants/"+tenant+"/nodegroups", g)
		require.Equal(t, http.StatusCreated, code, body)
	}
	p.settled(tenant, 2)
	before := len(p.applies(tenant))

	as := autoscalerClient(t, p, tenant)
	_, err := as.NodeGroupIncreaseSize(t.Context(), &protos.NodeGroupIncreaseSizeRequest{Id: "workers", Delta: 3})
	require.NoError(t, err)
	// Killed while the apply that builds the three machines changes things.
	p.eventually(2*time.Minute, "the scale-up's apply is applying", func() bool {
		applies := p.applies(tenant)
		return len(applies) > before && applies[len(applies)-1].Status.Phase == "Applying"
	})
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.done

	p2 := startInfraServer(t, dir, "--autoscaler-listen", "127.0.0.1:0")
	p2.settled(tenant, 5)
	require.Equal(t, 4, p2.nodeGroupCount(tenant, "workers"), "the target survived")
	as = autoscalerClient(t, p2, tenant)
	target, err := as.NodeGroupTargetSize(t.Context(), &protos.NodeGroupTargetSizeRequest{Id: "workers"})
	require.NoError(t, err)
	require.EqualValues(t, 4, target.TargetSize)
	nodes, err := as.NodeGroupNodes(t.Context(), &protos.NodeGroupNodesRequest{Id: "workers"})
	require.NoError(t, err)
	require.Len(t, nodes.Instances, 4)
	for _, in := range nodes.Instances {
		require.NotEqual(t, protos.InstanceStatus_instanceDeleting, in.Status.InstanceState, in.Id)
		require.Nil(t, in.Status.ErrorInfo, in.Id)
	}

	counts, _ := p2.nodeGroupHistory(tenant, "workers")
	require.Equal(t, []int{1, 4}, slices.Compact(counts), "one scale-up, to the target: %v", counts)
	created, deleted := p2.machineHistory(tenant)
	require.Empty(t, deleted)
	for _, name := range []string{"cp-0", "workers-0", "workers-1", "workers-2", "workers-3"} {
		require.Len(t, created[name], 1, "%s created once: %v", name, created)
	}
	require.Len(t, created, 5)
	require.Len(t, p2.emulatorNodes(), 5, "no machine was built twice or left behind")
}
