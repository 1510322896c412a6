package upgrade_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/rezuscloud/rezuscloud/controllers/upgrade"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/emulator"
	"github.com/rezuscloud/rezuscloud/talos"
)

// talosAnswers reports whether the node at ip answers a version call with the talosconfig raw.
func talosAnswers(ctx context.Context, raw []byte, ip string) error {
	tc, err := clientconfig.FromBytes(raw)
	if err != nil {
		return err
	}
	ep := net.JoinHostPort(ip, "50000")
	c, err := client.New(ctx, client.WithConfig(tc), client.WithEndpoints(ep))
	if err != nil {
		return err
	}
	defer c.Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = c.Version(cctx)
	return err
}

// TestRotationTakesEveryMachineThroughTheStages: rotating the Talos and
// Kubernetes CAs and the bootstrap token of a 3+2 cluster takes every
// machine through accept, swap and drop — control planes first, one at a
// time, each stage in place (no reboot) — stopping the saga in each stage
// while it applies a config; the run resumes each time and succeeds. At the end every node
// holds a config issued by the new CAs with nothing else accepted, the
// stored bundle is the new one, a talosconfig from before is refused by
// every node and one issued now is answered.
func TestRotationTakesEveryMachineThroughTheStages(t *testing.T) {
	e := newSagaEnv(t, 3, 2, nil)
	ctx := e.ctx
	before, err := e.pki.Bundle(ctx, e.tenant)
	require.NoError(t, err)
	oldTalosconfig, err := talos.Talosconfig(before, e.tenant, []string{net.JoinHostPort(e.ips["cp-1"], "50000")})
	require.NoError(t, err)

	e.createUpgrade("rotate", `{"rotate":["talos-ca","kubernetes-ca","bootstrap-token"]}`)
	// A crash in every stage: the saga is stopped while it applies a
	// machine's config of the stage (the call held until then), and
	// another one takes the run up.
	for _, stage := range []string{domain.RotationAccept, domain.RotationSwap, domain.RotationDrop} {
		held := make(chan struct{}, 1)
		_, stop := e.startSaga(func(c *upgrade.Config) {
			c.DialOptions = append(c.DialOptions, grpc.WithChainUnaryInterceptor(
				func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
					if strings.HasSuffix(method, "/ApplyConfiguration") {
						if u := e.upgrade("rotate"); u.Status.Rotation != nil && u.Status.Rotation.Stage == stage {
							select {
							case held <- struct{}{}:
							default:
							}
							<-ctx.Done()
							return ctx.Err()
						}
					}
					return invoker(ctx, method, req, reply, cc, opts...)
				}))
		})
		select {
		case <-held:
		case <-time.After(30 * time.Second):
			t.Fatalf("no config of stage %s was applied", stage)
		}
		stop()
	}
	e.startSaga(nil)
	u := e.waitUpgrade("rotate", "finished", finished)
	require.Equal(t, domain.UpgradeSucceeded, u.Status.Phase, "reason: %s", u.Status.Reason)
	require.Equal(t, &domain.RotationProgress{Stages: []string{"accept", "swap", "drop"}, Stage: "drop"}, u.Status.Rotation)
	require.Equal(t, []string{"cp-2", "cp-3", "cp-1", "w-1", "w-2"}, names(u))
	requireOneAtATime(t, u)

	after, err := e.pki.Bundle(ctx, e.tenant)
	require.NoError(t, err)
	require.NotEqual(t, before.Certs.OS.Crt, after.Certs.OS.Crt)
	require.NotEqual(t, before.Certs.K8s.Crt, after.Certs.K8s.Crt)
	require.NotEqual(t, before.Secrets.BootstrapToken, after.Secrets.BootstrapToken)
	require.Equal(t, before.Certs.Etcd.Crt, after.Certs.Etcd.Crt, "the etcd CA is not rotated")
	rot, err := e.pki.Rotation(ctx, e.tenant)
	require.NoError(t, err)
	require.Nil(t, rot, "the finished rotation is folded into the bundle")

	newTalosconfig, err := talos.Talosconfig(after, e.tenant, []string{net.JoinHostPort(e.ips["cp-1"], "50000")})
	require.NoError(t, err)
	desired, err := talos.NewService(e.cache, e.pki).Desired(ctx, e.tenant)
	require.NoError(t, err)
	for _, n := range e.nodes {
		m := e.machine(n)
		applied := domain.FindCondition(m.Status.Conditions, domain.ConditionConfigApplied)
		require.NotNil(t, applied, n)
		require.Equal(t, talos.ReasonAppliedInPlace, applied.Reason, "%s took every stage in place", n)
		raw, err := desired.Config(&m, sagaKube)
		require.NoError(t, err)
		st, err := e.em.Get(n)
		require.NoError(t, err)
		require.Equal(t, talos.ConfigHash(raw), st.ConfigHash, "%s holds its config of the last stage", n)
		cfg, err := configloader.NewFromBytes(raw)
		require.NoError(t, err)
		require.Equal(t, after.Certs.OS.Crt, cfg.Machine().Security().IssuingCA().Crt, n)
		require.Empty(t, cfg.Machine().Security().AcceptedCAs(), n)
		require.Equal(t, after.Certs.K8s.Crt, cfg.Cluster().IssuingCA().Crt, n)
		require.Empty(t, cfg.Cluster().AcceptedCAs(), n)
		require.Equal(t, after.Secrets.BootstrapToken, cfg.Cluster().Token().ID()+"."+cfg.Cluster().Token().Secret(), n)
		require.NoError(t, talosAnswers(ctx, newTalosconfig, e.ips[n]), "%s answers a talosconfig issued now", n)
		require.Error(t, talosAnswers(ctx, oldTalosconfig, e.ips[n]), "%s refuses the talosconfig from before", n)
	}
}

// TestRotationOfTheSameSecretsTakesUpAFailedOne: a rotation that another
// rotation of other secrets finds under way is refused before any machine
// is touched, naming the one under way.
func TestRotationRefusedWhileAnotherIsUnderWay(t *testing.T) {
	e := newSagaEnv(t, 1, 0, nil)
	_, err := e.pki.StartRotation(e.ctx, e.tenant, "earlier", []string{domain.SecretKubernetesCA})
	require.NoError(t, err)
	e.startSaga(nil)
	e.createUpgrade("aggregator", `{"rotate":["aggregator-ca"]}`)
	u := e.waitUpgrade("aggregator", "finished", finished)
	require.Equal(t, domain.UpgradeFailed, u.Status.Phase)
	require.Contains(t, u.Status.Reason, "a rotation of [kubernetes-ca] started by upgrade earlier is at stage accept")
	require.Zero(t, len(e.applyCalls()), "no machine was touched")
}

// TestRotationWaitsForANodeThatRefusesItsConfig: a node whose API answers
// Unavailable to ApplyConfiguration (its apid restarting) is asked again
// until it takes its config, the wait on view in its step; the run then
// succeeds.
func TestRotationWaitsForANodeThatRefusesItsConfig(t *testing.T) {
	e := newSagaEnv(t, 1, 1, nil)
	_, err := e.em.InjectFault("w-1", emulator.Faults{RefuseApply: true})
	require.NoError(t, err)
	e.startSaga(nil)
	e.createUpgrade("token", `{"rotate":["bootstrap-token"]}`)
	e.waitUpgrade("token", "w-1 waiting to take its config", func(u domain.Upgrade) bool {
		for _, m := range u.Status.Machines {
			if m.Name == "w-1" && m.Phase == domain.StepUpgrading && m.Wait != nil && strings.Contains(m.Message, "w-1 to take the stage's config") {
				return true
			}
		}
		return false
	})
	_, err = e.em.InjectFault("w-1", emulator.Faults{})
	require.NoError(t, err)
	u := e.waitUpgrade("token", "finished", finished)
	require.Equal(t, domain.UpgradeSucceeded, u.Status.Phase, "reason: %s", u.Status.Reason)
	require.Equal(t, &domain.RotationProgress{Stages: []string{"swap"}, Stage: "swap"}, u.Status.Rotation)
}
