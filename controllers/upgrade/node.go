package upgrade

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/talos"
)

// upgradeAPIPort is the port of apid on every Talos node.
const upgradeAPIPort = 50000

// sagaCertTTL bounds the client certificate one run of the saga holds in memory.
const sagaCertTTL = 7 * 24 * time.Hour

// sagaNodes opens machinery clients to one tenant's nodes, over mTLS with an
// os:admin certificate issued from the tenant's bundle. A client to a node
// is kept for the run's next calls while it answers (reuse), and dropped on
// the first error: a node that rebooted is dialed afresh, reached as soon
// as it is back instead of after gRPC's reconnect backoff. A run's polls of
// 100 tenants' nodes at once were one TLS handshake each (issue 49: 14 % of
// the server's CPU in a fleet rollout, and the emulator's share again).
type sagaNodes struct {
	tenant   string
	ca       []byte
	cert     *x509.PEMEncodedCertificateAndKey
	endpoint func(m *domain.Machine) (string, error)
	timeout  time.Duration
	dialOpts []grpc.DialOption
	// reuse keeps clients between calls; off, every call dials.
	reuse bool

	mu    sync.Mutex
	conns map[string]*nodeConn
}

// nodeConn is a kept client and the calls using it: a dropped one is
// closed when its last call returns.
type nodeConn struct {
	c       *client.Client
	users   int
	dropped bool
}

func newSagaNodes(b *secrets.Bundle, tenant string, cfg *Config, reuse bool) (*sagaNodes, error) {
	cert, err := b.GenerateTalosAPIClientCertificateWithTTL(role.MakeSet(role.Admin), sagaCertTTL)
	if err != nil {
		return nil, fmt.Errorf("issuing the upgrade client certificate of tenant %s: %w", tenant, err)
	}
	dialOpts := append([]grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
		MinConnectTimeout: cfg.CallTimeout,
	})}, cfg.DialOptions...)
	return &sagaNodes{tenant: tenant, ca: b.Certs.OS.Crt, cert: cert, endpoint: cfg.Endpoint, timeout: cfg.CallTimeout, dialOpts: dialOpts,
		reuse: reuse, conns: map[string]*nodeConn{}}, nil
}

// trusting is a copy of ns that trusts ca and presents cert, dialing
// every call (a kept connection was opened with other credentials).
func (ns *sagaNodes) trusting(ca []byte, cert *x509.PEMEncodedCertificateAndKey) *sagaNodes {
	return &sagaNodes{tenant: ns.tenant, ca: ca, cert: cert, endpoint: ns.endpoint, timeout: ns.timeout, dialOpts: ns.dialOpts}
}

// machineEndpoint is the Talos API of a machine: its address on port 50000.
func machineEndpoint(m *domain.Machine) (string, error) {
	if m.Spec.Address == "" {
		return "", fmt.Errorf("machine %s has no address", m.Metadata.Name)
	}
	return net.JoinHostPort(m.Spec.Address, strconv.Itoa(upgradeAPIPort)), nil
}

// with runs f with a client to m, bounded by the call timeout.
func (ns *sagaNodes) with(ctx context.Context, m *domain.Machine, f func(context.Context, *client.Client) error) error {
	ep, err := ns.endpoint(m)
	if err != nil {
		return err
	}
	nc, err := ns.acquire(ctx, ep)
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", m.Metadata.Name, err)
	}
	cctx, cancel := context.WithTimeout(ctx, ns.timeout)
	defer cancel()
	err = f(cctx, nc.c)
	ns.release(ep, nc, err != nil)
	return err
}

// acquire is the kept client to ep, or a new one (kept when reuse is on).
func (ns *sagaNodes) acquire(ctx context.Context, ep string) (*nodeConn, error) {
	ns.mu.Lock()
	if nc := ns.conns[ep]; nc != nil {
		nc.users++
		ns.mu.Unlock()
		return nc, nil
	}
	ns.mu.Unlock()
	cfg := clientconfig.NewConfig(ns.tenant, []string{ep}, ns.ca, ns.cert)
	c, err := client.New(ctx, client.WithConfig(cfg), client.WithEndpoints(ep), client.WithGRPCDialOptions(ns.dialOpts...))
	if err != nil {
		return nil, err
	}
	nc := &nodeConn{c: c, users: 1, dropped: !ns.reuse}
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.reuse && ns.conns != nil && ns.conns[ep] == nil {
		ns.conns[ep] = nc
	} else {
		nc.dropped = true // another call kept one first, or the run closed
	}
	return nc, nil
}

// release ends a call on nc; failed drops the client (the next call dials).
func (ns *sagaNodes) release(ep string, nc *nodeConn, failed bool) {
	ns.mu.Lock()
	nc.users--
	if failed && !nc.dropped {
		nc.dropped = true
		if ns.conns[ep] == nc {
			delete(ns.conns, ep)
		}
	}
	closeNow := nc.dropped && nc.users == 0
	ns.mu.Unlock()
	if closeNow {
		_ = nc.c.Close()
	}
}

// close drops every kept client (each closes when its calls return); a
// call after it dials and closes its own.
func (ns *sagaNodes) close() {
	if ns == nil {
		return
	}
	ns.mu.Lock()
	var idle []*client.Client
	for ep, nc := range ns.conns {
		nc.dropped = true
		if nc.users == 0 {
			idle = append(idle, nc.c)
		}
		delete(ns.conns, ep)
	}
	ns.conns = nil
	ns.mu.Unlock()
	for _, c := range idle {
		_ = c.Close()
	}
}

// version is the Talos version the node runs, from its runtime.Version resource.
func (ns *sagaNodes) version(ctx context.Context, m *domain.Machine) (string, error) {
	var v string
	err := ns.with(ctx, m, func(ctx context.Context, c *client.Client) error {
		var err error
		v, err = talos.NodeVersion(ctx, c)
		return err
	})
	return v, err
}

// versionAndSchematic is the node's version and the Image Factory
// schematic its image was built from ("" when it reports none).
func (ns *sagaNodes) versionAndSchematic(ctx context.Context, m *domain.Machine) (v, schematic string, err error) {
	err = ns.with(ctx, m, func(ctx context.Context, c *client.Client) error {
		var err error
		if v, err = talos.NodeVersion(ctx, c); err != nil {
			return err
		}
		_, schematic, err = talos.NodeExtensions(ctx, c)
		return err
	})
	return v, schematic, err
}

// upgrade asks the node to install the image and reboot into it, keeping
// its data (preserve). MachineService.Upgrade is deprecated in favour of
// LifecycleService.Upgrade, which only stages the image and needs a
// separate reboot: two calls a crash can fall between, leaving a staged image
// the saga cannot see through the API. The single call is also the one every
// Talos version a run starts from serves.
func (ns *sagaNodes) upgrade(ctx context.Context, m *domain.Machine, image string) error {
	return ns.with(ctx, m, func(ctx context.Context, c *client.Client) error {
		//lint:ignore SA1019 see above: one call for install and reboot.
		resp, err := c.MachineClient.Upgrade(ctx, &machine.UpgradeRequest{Image: image, Preserve: true})
		_, err = client.FilterMessages(resp, err)
		return err
	})
}

// applyConfig hands the node a machine config with mode AUTO (in place when
// Talos can, a reboot when it must) and answers the mode Talos chose and its
// details.
func (ns *sagaNodes) applyConfig(ctx context.Context, m *domain.Machine, cfg []byte) (machine.ApplyConfigurationRequest_Mode, string, error) {
	var msg *machine.ApplyConfiguration
	err := ns.with(ctx, m, func(ctx context.Context, c *client.Client) error {
		resp, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: cfg, Mode: machine.ApplyConfigurationRequest_AUTO})
		if err != nil {
			return err
		}
		msg = firstMessage(resp.GetMessages())
		return nil
	})
	return msg.GetMode(), msg.GetModeDetails(), err
}

// rollback asks the node to boot its previous installation.
func (ns *sagaNodes) rollback(ctx context.Context, m *domain.Machine) error {
	return ns.with(ctx, m, func(ctx context.Context, c *client.Client) error { return c.Rollback(ctx) })
}

// health says what keeps the node from being healthy on version want ("" when
// it is; want "" takes any version): every service running and healthy and, on a control plane, its
// etcd member in the member list and without errors. The version, the
// services and the node's own member id are its COSI resources
// (runtime.Version, v1alpha1.Service, etcd.Member); the member list and the
// member's errors have no COSI resource, so they come from the etcd calls.
func (ns *sagaNodes) health(ctx context.Context, m *domain.Machine, want string) string {
	problem := ""
	err := ns.with(ctx, m, func(ctx context.Context, c *client.Client) error {
		got, err := talos.NodeVersion(ctx, c)
		if err != nil {
			return err
		}
		if want != "" && got != want {
			problem = fmt.Sprintf("runs %s, not %s", got, want)
			return nil
		}
		svcs, err := talos.NodeServices(ctx, c)
		if err != nil {
			return err
		}
		if problem = talos.ServicesProblem(svcs); problem != "" {
			return nil
		}
		if m.Spec.Role != domain.RoleControlPlane {
			return nil
		}
		id, err := talos.LocalEtcdMemberID(ctx, c)
		if state.IsNotFoundError(err) {
			problem = "it runs no etcd member"
			return nil
		}
		if err != nil {
			return fmt.Errorf("etcd member: %w", err)
		}
		st, err := c.EtcdStatus(ctx)
		if err != nil {
			return fmt.Errorf("etcd status: %w", err)
		}
		if errs := firstMessage(st.GetMessages()).GetMemberStatus().GetErrors(); len(errs) > 0 {
			problem = "etcd member errors: " + strings.Join(errs, "; ")
			return nil
		}
		members, err := c.EtcdMemberList(ctx, &machine.EtcdMemberListRequest{})
		if err != nil {
			return fmt.Errorf("etcd members: %w", err)
		}
		for _, mb := range firstMessage(members.GetMessages()).GetMembers() {
			if mb.GetId() == id {
				return nil
			}
		}
		problem = "its etcd member is not in the member list"
		return nil
	})
	if err != nil {
		return describeTalosErr(err)
	}
	return problem
}

// staticPodsProblem says which of the control plane's static pods do not
// run the images of Kubernetes version want ("" when they all do), from
// the kubelet's view (k8s.StaticPodStatus resources).
func (ns *sagaNodes) staticPodsProblem(ctx context.Context, m *domain.Machine, want string) string {
	var images map[string][]string
	err := ns.with(ctx, m, func(ctx context.Context, c *client.Client) error {
		var err error
		images, err = talos.StaticPodImages(ctx, c)
		return err
	})
	if err != nil {
		return describeTalosErr(err)
	}
	tag := ":v" + strings.TrimPrefix(want, "v") // Kubernetes images are tagged vX.Y.Z
	var bad []string
	for _, pod := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		imgs := images[pod]
		switch {
		case len(imgs) == 0:
			bad = append(bad, pod+" is not running")
		case !slices.ContainsFunc(imgs, func(img string) bool {
			return strings.HasSuffix(img, tag) || strings.HasSuffix(img, ":v"+strings.TrimPrefix(want, "v"))
		}):
			bad = append(bad, fmt.Sprintf("%s runs %s", pod, strings.Join(imgs, ", ")))
		}
	}
	if len(bad) == 0 {
		return ""
	}
	return fmt.Sprintf("static pods not on Kubernetes %s: %s", want, strings.Join(bad, "; "))
}

// etcdLeaderView is a control plane's view of etcd: members and the leader's id.
type etcdLeaderView struct {
	members []*machine.EtcdMember
	leader  uint64
}

// etcd reads the member list and the leader through one control plane
// (the etcd calls: no COSI resource lists the members or names the leader).
func (ns *sagaNodes) etcd(ctx context.Context, m *domain.Machine) (etcdLeaderView, error) {
	var v etcdLeaderView
	err := ns.with(ctx, m, func(ctx context.Context, c *client.Client) error {
		members, err := c.EtcdMemberList(ctx, &machine.EtcdMemberListRequest{})
		if err != nil {
			return fmt.Errorf("etcd members: %w", err)
		}
		v.members = firstMessage(members.GetMessages()).GetMembers()
		st, err := c.EtcdStatus(ctx)
		if err != nil {
			return fmt.Errorf("etcd status: %w", err)
		}
		v.leader = firstMessage(st.GetMessages()).GetMemberStatus().GetLeader()
		return nil
	})
	return v, err
}

// etcdHealthy says what keeps a member from serving ("" when it is
// healthy): its etcd service, as its v1alpha1.Service resource says, and the
// member's errors, which have no COSI resource (EtcdStatus).
func (ns *sagaNodes) etcdHealthy(ctx context.Context, m *domain.Machine) string {
	problem := ""
	err := ns.with(ctx, m, func(ctx context.Context, c *client.Client) error {
		svcs, err := talos.NodeServices(ctx, c)
		if err != nil {
			return err
		}
		for _, s := range svcs {
			if s.ID == "etcd" && s.Problem() != "" {
				problem = "etcd is " + s.Problem()
				return nil
			}
		}
		st, err := c.EtcdStatus(ctx)
		if err != nil {
			return fmt.Errorf("etcd status: %w", err)
		}
		if errs := firstMessage(st.GetMessages()).GetMemberStatus().GetErrors(); len(errs) > 0 {
			problem = "etcd member errors: " + strings.Join(errs, "; ")
		}
		return nil
	})
	if err != nil {
		return describeTalosErr(err)
	}
	return problem
}

// talosUnreachable reports whether err says the node could not be reached (or did
// not answer in time), as opposed to a node that answered with a refusal.
func talosUnreachable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF)
}

// talosUnimplemented reports whether the node does not serve the method.
func talosUnimplemented(err error) bool { return status.Code(err) == codes.Unimplemented }

// describeTalosErr turns a Talos API error into a short lower-case reason.
func describeTalosErr(err error) string {
	if err == nil {
		return ""
	}
	if s, ok := status.FromError(err); ok {
		if talosUnreachable(err) {
			return "unreachable: " + s.Message()
		}
		return s.Message()
	}
	return err.Error()
}

// firstMessage is the first message of an answer (nil when there is none: the
// generated getters take nil), as the saga talks to one node at a time.
func firstMessage[T any](msgs []*T) *T {
	if len(msgs) == 0 {
		return nil
	}
	return msgs[0]
}
