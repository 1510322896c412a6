package emulator

// The Talos API clients of a health check, and the part of apid they need:
// Talos's checks ask one endpoint for several nodes at once (the "nodes"
// metadata) or for another node (the "node" metadata), which a real apid
// proxies; an emulated node answers only for itself, so the check's client
// goes to each node itself and merges the answers as apid does.

import (
	"context"
	"crypto/tls"
	stdx509 "crypto/x509"
	"fmt"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// healthCertTTL is the life of the checks' client certificate: they
// connect once, as machined's LocalClientProvider's.
const healthCertTTL = 10 * time.Minute

// healthClients is the cluster.ClientProvider of one health check: a client
// of the node that runs it, with a certificate of the caller's roles from
// the node's OS CA (as machined's LocalClientProvider), whose calls for
// other nodes go to those nodes.
type healthClients struct {
	em    *Emulator
	self  NodeStatus
	cfg   config.Provider
	roles role.Set

	mu     sync.Mutex
	tls    *tls.Config
	client *client.Client
	conns  map[string]*grpc.ClientConn // by node IP
}

func newHealthClients(em *Emulator, self NodeStatus, cfg config.Provider, roles role.Set) *healthClients {
	return &healthClients{em: em, self: self, cfg: cfg, roles: roles, conns: map[string]*grpc.ClientConn{}}
}

// Client returns the client of the node the check runs on (endpoints are
// ignored, as machined's provider ignores them once it has a client).
func (h *healthClients) Client(...string) (*client.Client, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.client != nil {
		return h.client, nil
	}
	tc, err := h.tlsLocked()
	if err != nil {
		return nil, err
	}
	c, err := client.New(context.Background(), client.WithTLSConfig(tc), client.WithEndpoints(h.self.Address),
		client.WithGRPCDialOptions(grpc.WithChainUnaryInterceptor(h.unary), grpc.WithChainStreamInterceptor(h.stream)))
	if err != nil {
		return nil, err
	}
	h.client = c
	return c, nil
}

// Close closes the client and the connections to the other nodes.
func (h *healthClients) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		c.Close() //nolint:errcheck
	}
	h.conns = map[string]*grpc.ClientConn{}
	if h.client == nil {
		return nil
	}
	err := h.client.Close()
	h.client = nil
	return err
}

// tlsLocked is the TLS of every connection: a client certificate of the
// caller's roles, trusting the OS CA and the CAs the config accepts.
func (h *healthClients) tlsLocked() (*tls.Config, error) {
	if h.tls != nil {
		return h.tls, nil
	}
	sec := h.cfg.Machine().Security()
	ca := sec.IssuingCA()
	if ca == nil || len(ca.Key) == 0 {
		return nil, status.Error(codes.FailedPrecondition, "the node holds no OS CA key to issue the health check's certificate")
	}
	pem, err := secrets.NewAdminCertificateAndKey(h.em.cfg.Now(), ca, h.roles, healthCertTTL)
	if err != nil {
		return nil, fmt.Errorf("issuing the health check's certificate: %w", err)
	}
	cert, err := tls.X509KeyPair(pem.Crt, pem.Key)
	if err != nil {
		return nil, err
	}
	pool := stdx509.NewCertPool()
	pool.AppendCertsFromPEM(ca.Crt)
	for _, a := range sec.AcceptedCAs() {
		pool.AppendCertsFromPEM(a.Crt)
	}
	h.tls = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, RootCAs: pool}
	return h.tls, nil
}

// conn is a connection to the node at ip.
func (h *healthClients) conn(ip string) (*grpc.ClientConn, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := h.conns[ip]; ok {
		return c, nil
	}
	addr := ""
	for _, st := range h.em.List() {
		if a := nodeIP(st); a.IsValid() && a.String() == ip {
			addr = st.Address
		}
	}
	if addr == "" {
		return nil, status.Errorf(codes.Unavailable, "no node at %s", ip)
	}
	tc, err := h.tlsLocked()
	if err != nil {
		return nil, err
	}
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	if err != nil {
		return nil, err
	}
	h.conns[ip] = c
	return c, nil
}

// targets takes apid's routing metadata off ctx: the nodes of a one-to-many
// call, the node of a one-to-one call.
func targets(ctx context.Context) (out context.Context, nodes []string, node string) {
	md, ok := metadata.FromOutgoingContext(ctx)
	if !ok {
		return ctx, nil, ""
	}
	nodes, one := md.Get("nodes"), md.Get("node")
	if len(nodes) == 0 && len(one) == 0 {
		return ctx, nil, ""
	}
	md = md.Copy()
	md.Delete("nodes")
	md.Delete("node")
	if len(one) > 0 {
		node = one[0]
	}
	return metadata.NewOutgoingContext(ctx, md), nodes, node
}

// unary proxies a call for other nodes as apid does: one-to-one as it is,
// one-to-many to each node, the answers' messages merged, each with its
// node in metadata.hostname and a node's error as a message of its own.
func (h *healthClients) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	ctx, nodes, node := targets(ctx)
	if node != "" && len(nodes) == 0 {
		c, err := h.conn(node)
		if err != nil {
			return err
		}
		return c.Invoke(ctx, method, req, reply, opts...)
	}
	if len(nodes) == 0 {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	out, ok := reply.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "%s: the answer is no protobuf message", method)
	}
	parts := make([]proto.Message, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, target := range nodes {
		parts[i] = out.ProtoReflect().New().Interface()
		wg.Go(func() {
			c, err := h.conn(target)
			if err == nil {
				err = c.Invoke(ctx, method, req, parts[i], opts...)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, target := range nodes {
		if err := mergeMessages(out, target, parts[i], errs[i]); err != nil {
			return status.Errorf(codes.Internal, "%s: %v", method, err)
		}
	}
	return nil
}

// mergeMessages appends part's messages to out's, as apid's one-to-many
// proxy does: with target as each one's metadata.hostname, or one message
// carrying the target's error.
func mergeMessages(out proto.Message, target string, part proto.Message, callErr error) error {
	o := out.ProtoReflect()
	fd := o.Descriptor().Fields().ByName("messages")
	if fd == nil || !fd.IsList() || fd.Message() == nil {
		return fmt.Errorf("%s has no messages to merge", o.Descriptor().FullName())
	}
	mdField := fd.Message().Fields().ByName("metadata")
	if mdField == nil {
		return fmt.Errorf("%s has no metadata", fd.Message().FullName())
	}
	list := o.Mutable(fd).List()
	if callErr != nil {
		m := list.NewElement()
		meta := &common.Metadata{Hostname: target, Error: callErr.Error(), Status: status.Convert(callErr).Proto()}
		m.Message().Set(mdField, protoreflect.ValueOfMessage(meta.ProtoReflect()))
		list.Append(m)
		return nil
	}
	from := part.ProtoReflect().Get(fd).List()
	for i := range from.Len() {
		m := from.Get(i).Message()
		meta, _ := m.Mutable(mdField).Message().Interface().(*common.Metadata)
		if meta != nil {
			meta.Hostname = target
		}
		list.Append(protoreflect.ValueOfMessage(m))
	}
	return nil
}

// stream proxies a stream for one other node (a COSI read or watch) to it.
func (h *healthClients) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	ctx, nodes, node := targets(ctx)
	if node == "" && len(nodes) == 1 {
		node = nodes[0]
	}
	switch {
	case node != "":
		c, err := h.conn(node)
		if err != nil {
			return nil, err
		}
		return c.NewStream(ctx, desc, method, opts...)
	case len(nodes) > 1:
		return nil, status.Errorf(codes.Unimplemented, "%s: a stream from several nodes is not emulated", method)
	}
	return streamer(ctx, desc, cc, method, opts...)
}
