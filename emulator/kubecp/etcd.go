package kubecp

import (
	"context"
	"crypto/tls"
	stdx509 "crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// Member is an etcd member as the others reach it.
type Member struct {
	Name      string
	PeerURL   string // https://<ip>:2380
	ClientURL string // https://<ip>:2379
}

// etcdRetry is how often membership changes are tried again while etcd
// refuses them for now (a learner not yet in sync, another learner joining).
const etcdRetry = 500 * time.Millisecond

// EtcdClient returns a client of the etcd cluster at endpoints
// (https://ip:2379) with a client certificate issued from ca. ctx bounds a
// first Status call, so an unreachable cluster is an error here; the client
// lives until Close.
func EtcdClient(ctx context.Context, ca CertAndKey, endpoints []string) (*clientv3.Client, error) {
	cert, err := issue(ca, certSpec{cn: "kubecp", client: true, ttl: 24 * time.Hour})
	if err != nil {
		return nil, err
	}
	cli, err := etcdClient(ca.Cert, cert, endpoints)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, ep := range endpoints {
		if _, err := cli.Status(ctx, ep); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ep, err))
			continue
		}
		return cli, nil
	}
	_ = cli.Close()
	return nil, fmt.Errorf("reaching etcd: %w", errors.Join(errs...))
}

func etcdClient(caPEM []byte, cert CertAndKey, endpoints []string) (*clientv3.Client, error) {
	pair, err := tls.X509KeyPair(cert.Cert, cert.Key)
	if err != nil {
		return nil, err
	}
	pool := stdx509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("the etcd CA is no PEM certificate")
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		TLS:         &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12},
		Logger:      zap.NewNop(),
		// gRPC's default reconnect backoff grows to two minutes: a client
		// made while its member starts would wait seconds after it is up.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, MaxDelay: time.Second},
			MinConnectTimeout: 2 * time.Second,
		})},
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client of %s: %w", strings.Join(endpoints, ","), err)
	}
	return cli, nil
}

// MemberRemove removes the member named name from the cluster cli talks
// to, as Talos's reset (leave) and `talosctl etcd remove-member` do. A
// cluster without that member is left alone, so it is safe to run twice.
func MemberRemove(ctx context.Context, cli *clientv3.Client, name string) error {
	list, err := cli.MemberList(ctx)
	if err != nil {
		return fmt.Errorf("removing etcd member %s: listing members: %w", name, err)
	}
	for _, m := range list.Members {
		if m.Name != name {
			continue
		}
		// etcd refuses a removal while the change would leave too few
		// members it has seen active (a member promoted a moment ago):
		// "unhealthy cluster" is a "not yet", as when adding one.
		for {
			_, err := cli.MemberRemove(ctx, m.ID)
			if err == nil || errors.Is(err, rpctypes.ErrMemberNotFound) {
				break
			}
			if !errors.Is(err, rpctypes.ErrUnhealthy) {
				return fmt.Errorf("removing etcd member %s (%x): %w", name, m.ID, err)
			}
			if serr := sleepCtx(ctx, etcdRetry); serr != nil {
				return fmt.Errorf("removing etcd member %s (%x): %w (last: %w)", name, m.ID, serr, err)
			}
		}
	}
	return nil
}

// hasEtcdData reports whether dir already holds an etcd member.
func hasEtcdData(dataDir string) bool {
	_, err := os.Stat(filepath.Join(dataDir, "etcd", "member"))
	return err == nil
}

// etcdArgs are Talos's etcd flags, with every URL on the node's own IP.
func etcdArgs(cfg Config, p nodePKI, initialCluster, state string) []string {
	client, peer := cfg.member().ClientURL, cfg.member().PeerURL
	return []string{
		"--name=" + cfg.Name,
		"--data-dir=" + filepath.Join(cfg.DataDir, "etcd"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=" + initialCluster,
		"--initial-cluster-state=" + state,
		"--client-cert-auth=true",
		"--trusted-ca-file=" + p.path("etcd-ca.crt"),
		"--cert-file=" + p.path("etcd-server.crt"),
		"--key-file=" + p.path("etcd-server.key"),
		"--peer-client-cert-auth=true",
		"--peer-trusted-ca-file=" + p.path("etcd-ca.crt"),
		"--peer-cert-file=" + p.path("etcd-peer.crt"),
		"--peer-key-file=" + p.path("etcd-peer.key"),
		"--snapshot-count=10000",
	}
}

// addLearner adds the node to the cluster cli talks to as a learner and
// returns the --initial-cluster it starts with (state existing), as
// `etcdctl member add` prints it. A member left by an earlier life of the
// node (same name, or same peer URL) is removed first, as Talos does
// before it joins; one added by an interrupted attempt and never started is
// reused.
func addLearner(ctx context.Context, cli *clientv3.Client, self Member) (string, error) {
	for {
		initial, err := tryAddLearner(ctx, cli, self)
		if err == nil {
			return initial, nil
		}
		// A cluster busy with another joiner says so; wait for it.
		if !errors.Is(err, rpctypes.ErrTooManyLearners) && !errors.Is(err, rpctypes.ErrUnhealthy) &&
			!errors.Is(err, rpctypes.ErrPeerURLExist) {
			return "", err
		}
		if err := sleepCtx(ctx, etcdRetry); err != nil {
			return "", fmt.Errorf("adding etcd member %s: %w (last: %w)", self.Name, ctx.Err(), err)
		}
	}
}

func tryAddLearner(ctx context.Context, cli *clientv3.Client, self Member) (string, error) {
	list, err := cli.MemberList(ctx)
	if err != nil {
		return "", fmt.Errorf("listing etcd members: %w", err)
	}
	var id uint64
	var members []*etcdserverpb.Member
	for _, m := range list.Members {
		samePeer := len(m.PeerURLs) == 1 && m.PeerURLs[0] == self.PeerURL
		switch {
		case samePeer && m.Name == "":
			id = m.ID // added before and never started: ours
		case samePeer || m.Name == self.Name:
			if _, err := cli.MemberRemove(ctx, m.ID); err != nil && !errors.Is(err, rpctypes.ErrMemberNotFound) {
				return "", fmt.Errorf("removing the stale etcd member %s (%x): %w", m.Name, m.ID, err)
			}
			continue
		}
		members = append(members, m)
	}
	if id == 0 {
		resp, err := cli.MemberAddAsLearner(ctx, []string{self.PeerURL})
		if err != nil {
			return "", fmt.Errorf("adding etcd learner %s: %w", self.Name, err)
		}
		id, members = resp.Member.ID, resp.Members
	}
	return initialCluster(members, id, self.Name), nil
}

func initialCluster(members []*etcdserverpb.Member, self uint64, name string) string {
	var parts []string
	for _, m := range members {
		n := m.Name
		if m.ID == self {
			n = name
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, n+"="+u)
		}
	}
	return strings.Join(parts, ",")
}

// promote promotes the learner self through cli, retrying while etcd says
// the learner has not caught up with the leader yet.
func promote(ctx context.Context, cli *clientv3.Client, name string) error {
	for {
		list, err := cli.MemberList(ctx)
		if err != nil {
			return fmt.Errorf("promoting etcd learner %s: listing members: %w", name, err)
		}
		var self *etcdserverpb.Member
		for _, m := range list.Members {
			if m.Name == name {
				self = m
			}
		}
		switch {
		case self == nil:
			return fmt.Errorf("promoting etcd learner %s: it is no member", name)
		case !self.IsLearner:
			return nil
		}
		_, err = cli.MemberPromote(ctx, self.ID)
		if err == nil {
			return nil
		}
		if !errors.Is(err, rpctypes.ErrMemberLearnerNotReady) {
			return fmt.Errorf("promoting etcd learner %s: %w", name, err)
		}
		if err := sleepCtx(ctx, etcdRetry); err != nil {
			return fmt.Errorf("promoting etcd learner %s: still not in sync with the leader: %w", name, err)
		}
	}
}

// etcdStatus is the node's own member's view: whether it has a leader,
// raises alarms, and is a learner.
func etcdStatus(ctx context.Context, cli *clientv3.Client, endpoint string) (*clientv3.StatusResponse, error) {
	st, err := cli.Status(ctx, endpoint)
	if err != nil {
		return nil, err
	}
	if st.Leader == 0 {
		return nil, errors.New("etcd has no leader")
	}
	if len(st.Errors) > 0 {
		return nil, fmt.Errorf("etcd reports: %s", strings.Join(st.Errors, "; "))
	}
	return st, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
