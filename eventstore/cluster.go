package eventstore

import (
	"context"
	"crypto/hkdf"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// Three rezuscloud processes can form their own NATS cluster: each embeds
// one node and routes to the others, so high availability needs no external
// NATS. What the nodes must agree on is derived from one secret that every
// replica is given anyway, the secrets key (--secrets-key-file or the
// passphrase), so nothing has to be copied from one node to another:
//
//   - the operator and account seeds (the JWT trust of operator mode): every
//     node signs the same accounts, so a stream of the REZUS account is the
//     same stream on every node;
//   - the routes' mutual TLS (route_tls.go) and their credentials: a route
//     without a certificate of the cluster's CA, or without the
//     credentials, is refused, so only holders of the secrets key can join,
//     and nothing crosses a route unencrypted.
//
// A replica given another key cannot join (its routes are refused); it logs
// that and waits instead of forming a cluster of its own.

// ClusterConfig makes the embedded server one node of a NATS cluster.
type ClusterConfig struct {
	// Name is the cluster's name, the same on every node.
	Name string
	// Listen is the route listener, host:port.
	Listen string
	// Peers are the other nodes' route addresses, host:port each.
	Peers []string
	// Secret is the material every node shares (ClusterSecret); the seeds
	// and the route credentials are derived from it. Required.
	Secret []byte
	// Advertise is the route address the other nodes learn for this node
	// (gossiped with its routes) and reconnect to when a route drops;
	// empty: Listen. Nodes behind NAT or proxies advertise what the others
	// reach. (NATS's cluster no_advertise is about client URLs, not this.)
	Advertise string
}

// Validate reports a configuration that cannot form a cluster. Errors name
// the serve flags the fields come from.
func (c ClusterConfig) Validate() error {
	if c.Name == "" {
		return errors.New("--cluster-name is required with --cluster-listen")
	}
	if strings.ContainsAny(c.Name, " \t.*>") {
		return fmt.Errorf("--cluster-name %q: use letters, digits, '-' and '_'", c.Name)
	}
	if _, _, err := splitHostPort(c.Listen); err != nil || c.Listen == "" {
		return fmt.Errorf("--cluster-listen %q: want host:port: %v", c.Listen, err)
	}
	if len(c.Peers) == 0 {
		return errors.New("--peers is required with --cluster-listen: the route addresses (host:port) of the other replicas")
	}
	seen := map[string]bool{}
	for _, p := range c.Peers {
		host, port, err := net.SplitHostPort(p)
		if err != nil || host == "" {
			return fmt.Errorf("--peers: %q is not host:port", p)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("--peers: %q has a bad port", p)
		}
		if seen[p] {
			return fmt.Errorf("--peers: %q is given twice", p)
		}
		seen[p] = true
		if isOwnAddress(c.Listen, host, port) {
			return fmt.Errorf("--peers: %q is this replica's own --cluster-listen address; list only the other replicas", p)
		}
	}
	if len(c.Secret) < 32 {
		return errors.New("cluster: the shared secret is missing (give every replica the same --secrets-key-file or REZUSCLOUD_SECRETS_PASSPHRASE)")
	}
	return nil
}

// isOwnAddress reports whether a peer address is our own route listener:
// the same port on the listen host, on our host name, or on a local address
// when we listen on all of them. It does not resolve names, so that a peer
// whose DNS record does not exist yet (a StatefulSet starting) is accepted.
func isOwnAddress(listen, host, port string) bool {
	lhost, lport, err := net.SplitHostPort(listen)
	if err != nil || lport != port {
		return false
	}
	if strings.EqualFold(host, lhost) {
		return true
	}
	if own, err := os.Hostname(); err == nil && strings.EqualFold(host, own) {
		return true
	}
	lip := net.ParseIP(lhost)
	anyAddr := lhost == "" || (lip != nil && lip.IsUnspecified())
	ip := net.ParseIP(host)
	switch {
	case ip == nil:
		return strings.EqualFold(host, "localhost") && (anyAddr || (lip != nil && lip.IsLoopback()))
	case !anyAddr:
		return lip != nil && lip.Equal(ip)
	case ip.IsLoopback() || ip.IsUnspecified():
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// clusterSecretSalt makes a passphrase's cluster secret unlike its sealing
// key (that one is salted per install, with a salt kept in NATS, which a
// node cannot read before it has joined).
const clusterSecretSalt = "rezuscloud cluster secret v1"

// ClusterSecret is the material a cluster's nodes derive their shared seeds
// and route credentials from: the sealing key file's key, or a key derived
// from the passphrase. The key file must exist: a key a replica would create
// for itself could not be the others'.
func ClusterSecret(cfg SealerConfig) ([]byte, error) {
	if cfg.Passphrase != "" {
		it := cfg.Iterations
		if it == 0 {
			it = DefaultPBKDF2Iterations
		}
		return pbkdf2.Key(sha256.New, cfg.Passphrase, []byte(clusterSecretSalt), it, 32)
	}
	if cfg.KeyFile == "" {
		return nil, errors.New("a secrets passphrase or a key file is required")
	}
	return readKeyFile(cfg.KeyFile)
}

// derive is a 32-byte key for one use of the cluster secret.
func derive(secret []byte, use string) ([]byte, error) {
	return hkdf.Key(sha256.New, secret, nil, "rezuscloud cluster: "+use, 32)
}

// derivedSeeds are the trust seeds of a cluster node, by key file name.
func derivedSeeds(secret []byte) (map[string][]byte, error) {
	seeds := map[string][]byte{}
	for _, k := range []struct {
		file   string
		prefix nkeys.PrefixByte
	}{
		{"operator.nk", nkeys.PrefixByteOperator},
		{"sys.nk", nkeys.PrefixByteAccount},
		{"rezus.nk", nkeys.PrefixByteAccount},
		{"automation.nk", nkeys.PrefixByteAccount},
		{"automation-signer.nk", nkeys.PrefixByteAccount},
	} {
		raw, err := derive(secret, "nkey "+k.file)
		if err != nil {
			return nil, err
		}
		kp, err := nkeys.FromRawSeed(k.prefix, raw)
		if err != nil {
			return nil, err
		}
		seed, err := kp.Seed()
		if err != nil {
			return nil, err
		}
		seeds[k.file] = append([]byte(nil), seed...)
		kp.Wipe()
	}
	return seeds, nil
}

// routeUser is the user name routes present; the password is derived.
const routeUser = "rezuscloud-route"

func routePassword(secret []byte) (string, error) {
	k, err := derive(secret, "route password")
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(k), nil
}

// clusterOptions sets the route listener, the routes to the peers and their
// credentials on the server's options.
func clusterOptions(opts *server.Options, c ClusterConfig) error {
	host, port, err := splitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("--cluster-listen %q: %w", c.Listen, err)
	}
	pass, err := routePassword(c.Secret)
	if err != nil {
		return err
	}
	tlsCfg, err := routeTLS(c.Secret, opts.ServerName)
	if err != nil {
		return err
	}
	opts.Cluster = server.ClusterOpts{Name: c.Name, Host: host, Port: port, Username: routeUser, Password: pass,
		TLSConfig: tlsCfg, TLSTimeout: 5, Advertise: c.Advertise}
	for _, p := range c.Peers {
		opts.Routes = append(opts.Routes, &url.URL{Scheme: "nats", User: url.UserPassword(routeUser, pass), Host: p})
	}
	return nil
}

// ClusterStatus is what a node knows of its cluster, for the log line and
// /readyz while it waits.
type ClusterStatus struct {
	// Clustered is false for a single server.
	Clustered bool
	// Size is the number of nodes configured (peers and this one).
	Size int
	// Connected is how many peers this node has routes to.
	Connected int
	// MetaLeader is the server name of the JetStream meta leader, "" while
	// none is elected.
	MetaLeader string
	// RefusedRoutes counts routes refused for bad credentials: a sign that
	// a node was given another secrets key.
	RefusedRoutes int64
}

// String says what the node waits for, in words for the log and /readyz.
func (s ClusterStatus) String() string {
	what := "to elect a meta leader"
	if s.MetaLeader != "" {
		what = "to place streams (meta leader " + s.MetaLeader + ")"
	}
	msg := fmt.Sprintf("waiting for the JetStream cluster %s (%d of %d peers connected)", what, s.Connected+1, s.Size)
	if s.RefusedRoutes > 0 {
		msg += fmt.Sprintf("; %d routes were refused for bad credentials: every replica needs the same --secrets-key-file (REZUSCLOUD_SECRETS_KEY_FILE) or REZUSCLOUD_SECRETS_PASSPHRASE", s.RefusedRoutes)
	}
	return msg
}

// ClusterStatus reports the node's view of its cluster.
func (e *Embedded) ClusterStatus() ClusterStatus {
	if e.clusterSize == 0 {
		return ClusterStatus{}
	}
	st := ClusterStatus{Clustered: true, Size: e.clusterSize, RefusedRoutes: e.refusedRoutes.Load()}
	if rz, err := e.srv.Routez(nil); err == nil {
		names := map[string]bool{}
		for _, r := range rz.Routes {
			names[r.RemoteName] = true
		}
		st.Connected = len(names)
	}
	if jsz, err := e.srv.Jsz(nil); err == nil && jsz.Meta != nil {
		st.MetaLeader = jsz.Meta.Leader
	}
	return st
}

// routeRefusals counts log lines of refused route credentials, the only
// place the server reports them.
type routeRefusals struct{ n *atomic.Int64 }

func (r routeRefusals) observe(line string) {
	if strings.Contains(line, "Route Error 'Authorization Violation'") ||
		(strings.Contains(line, "rid:") && strings.Contains(line, server.ErrAuthentication.Error())) ||
		(strings.Contains(line, "rid:") && strings.Contains(line, "TLS route handshake error")) {
		r.n.Add(1)
	}
}

// ClusterNotReady reports whether err is what JetStream answers while its
// cluster forms: no responders, a request that timed out, "temporarily
// unavailable", or no peers to place a replicated stream on yet. Provisioning
// that failed so is worth retrying; anything else is not.
func ClusterNotReady(err error) bool {
	if temporarilyUnavailable(err) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.ErrorCode(server.JSClusterNoPeersErrF) ||
		apiErr.ErrorCode == jetstream.ErrorCode(server.JSClusterNotAvailErr) ||
		apiErr.ErrorCode == jetstream.ErrorCode(server.JSInsufficientResourcesErr))
}

// UntilClusterReady runs op until it succeeds, fails for another reason than
// ClusterNotReady, or ctx ends, pausing a second between tries. Long-running
// parts provision with it, so a cluster that is slow to answer for a while
// (an election, a loaded machine) does not stop the server.
func UntilClusterReady(ctx context.Context, op func() error) error {
	for {
		err := op()
		if err == nil || !ClusterNotReady(err) || ctx.Err() != nil {
			return err
		}
		if sleepCtx(ctx, time.Second) != nil {
			return err
		}
	}
}
