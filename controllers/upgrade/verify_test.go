package upgrade_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/rezuscloud/rezuscloud/controllers/upgrade"
	"github.com/rezuscloud/rezuscloud/domain"
)

// lyingNode makes the MachineService answers of the node at ip disagree
// with the node: swallow is a method acknowledged without reaching it, and
// Version claims version. The node's COSI resources still tell the truth,
// and the saga must go by them.
func lyingNode(ip, swallow, version string) grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		host, _, _ := net.SplitHostPort(strings.TrimPrefix(cc.Target(), "dns:///"))
		if host != ip {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		switch method {
		case swallow:
			if r, ok := reply.(*machine.ApplyConfigurationResponse); ok {
				r.Messages = []*machine.ApplyConfiguration{{Mode: machine.ApplyConfigurationRequest_NO_REBOOT, ModeDetails: "applied (not really)"}}
			}
			return nil
		case "/machine.MachineService/Version":
			if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
				return err
			}
			if r, ok := reply.(*machine.VersionResponse); ok && version != "" {
				for _, m := range r.GetMessages() {
					m.Version.Tag = version
				}
			}
			return nil
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
}

// TestUpgradeGoesByTheVersionResource: a node that never takes the upgrade
// (the call is acknowledged but never reaches it) while its Version call
// claims the target is not reported upgraded: its runtime.Version resource
// says it still runs the old version.
func TestUpgradeGoesByTheVersionResource(t *testing.T) {
	e := newSagaEnv(t, 1, 1, nil)
	e.startSaga(func(c *upgrade.Config) {
		e.observe(c)
		c.RebootTimeout, c.HealthTimeout = 500*time.Millisecond, 500*time.Millisecond
		c.DialOptions = append(c.DialOptions, lyingNode(e.ips["w-1"], "/machine.MachineService/Upgrade", sagaTo))
	})
	e.createUpgrade("to-113", `{"talosVersion":"`+sagaTo+`"}`)
	u := e.waitUpgrade("to-113", "finished", finished)

	require.Equal(t, domain.UpgradeFailed, u.Status.Phase, "reason: %s", u.Status.Reason)
	ph := phases(u)
	require.Equal(t, domain.StepDone, ph["cp-1"])
	require.NotEqual(t, domain.StepDone, ph["w-1"])
	st, err := e.em.Get("w-1")
	require.NoError(t, err)
	require.Equal(t, sagaFrom, st.Version, "the node never upgraded")
	require.Contains(t, u.Status.Machines[1].Error, sagaFrom, "the step says what the node runs")
	require.Equal(t, sagaFrom, e.machine("w-1").Status.TalosVersion, "the machine's status is the resource's version")
}

// TestKubernetesUpgradeGoesByTheStaticPods: a control plane whose config
// never changes (the apply is acknowledged but never reaches it) stays
// healthy on the old Kubernetes version; its step fails because its static
// pods, as the kubelet reports them, run the old images.
func TestKubernetesUpgradeGoesByTheStaticPods(t *testing.T) {
	e := newSagaEnv(t, 1, 1, nil)
	e.startSaga(func(c *upgrade.Config) {
		c.HealthTimeout, c.RebootTimeout = 500*time.Millisecond, 500*time.Millisecond
		c.DialOptions = append(c.DialOptions, lyingNode(e.ips["cp-1"], "/machine.MachineService/ApplyConfiguration", ""))
	})
	e.createUpgrade("kube", `{"kubernetesVersion":"`+sagaKubeTo+`"}`)
	u := e.waitUpgrade("kube", "finished", finished)

	require.Equal(t, domain.UpgradeFailed, u.Status.Phase, "reason: %s", u.Status.Reason)
	cp := u.Status.Machines[0]
	require.Equal(t, "cp-1", cp.Name)
	require.NotEqual(t, domain.StepDone, cp.Phase)
	require.Contains(t, cp.Error, "static pods not on Kubernetes "+sagaKubeTo)
	require.Contains(t, cp.Error, "kube-apiserver runs registry.k8s.io/kube-apiserver:"+sagaKube)
	st, err := e.em.Get("cp-1")
	require.NoError(t, err)
	require.Equal(t, sagaKube, st.KubernetesVersion, "the node never took the config")
}
