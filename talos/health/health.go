package health

import (
	"context"
	"crypto/tls"
	stdx509 "crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"golang.org/x/sync/singleflight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/projections"
)

// Actor is the actor of the status events a health probe writes.
const Actor = "system:health"

// BundleSource gives a tenant's secrets bundle; *talos.PKI is the one used.
type BundleSource interface {
	Bundle(ctx context.Context, tenant string) (*secrets.Bundle, error)
}

// Config configures a Service. Cache, PKI and Store are required;
// every other field's default is documented beside it.
type Config struct {
	Cache *projections.Cache
	PKI   BundleSource
	// Store receives the status events of the write-back.
	Store *eventstore.Store
	// Log defaults to slog.Default().
	Log *slog.Logger
	// Now is the clock of the cache, lastSeen and condition times; default time.Now.
	Now func() time.Time
	// Timeout bounds the probe of one machine (every call to it); default 3 s.
	// A hung or unreachable machine costs the answer no more than this.
	Timeout time.Duration
	// TTL is how long a probe's answer is served from memory; default 15 s.
	TTL time.Duration
	// Parallelism bounds the machines of one probe dialled at once; default 64.
	// Machines beyond it wait for a free slot, control planes first.
	Parallelism int
	// Port is the Talos API port of every machine; default 50000.
	Port int
	// LastSeenEvery is how often a machine's status.lastSeen moves when
	// nothing else about it changed; default 1 minute.
	LastSeenEvery time.Duration
	// WriteTimeout bounds writing a probe's observations back; default 10 s.
	WriteTimeout time.Duration
	// DialOptions are added to every connection to a machine (tests count the
	// calls with an interceptor).
	DialOptions []grpc.DialOption
	// Kube reaches a tenant's Kubernetes API server: the probe adds its
	// readiness and every machine's Node. Without it, health is Talos's alone.
	Kube KubeSource
	// NoKube says why a tenant's machines run no Kubernetes ("" when they
	// do): the light emulator. Nil: every tenant's do.
	NoKube func(tenant string) string
}

func (c *Config) setDefaults() {
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Timeout == 0 {
		c.Timeout = 3 * time.Second
	}
	if c.TTL == 0 {
		c.TTL = 15 * time.Second
	}
	if c.Parallelism == 0 {
		c.Parallelism = 64
	}
	if c.Port == 0 {
		c.Port = 50000
	}
	if c.LastSeenEvery == 0 {
		c.LastSeenEvery = time.Minute
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 10 * time.Second
	}
}

// Service answers how healthy a tenant's cluster is by probing its
// machines through the real Talos API (mTLS, an os:reader certificate from the
// tenant's PKI), on demand only: there is no background scraping. Answers are
// kept in memory for TTL, concurrent requests for one tenant share one probe,
// and what a probe learns that matters (version, stage, readiness) is written
// back to the Machine and Tenant statuses as events.
//
// The memory is a cache of observations, not state: a replica that restarts,
// or another replica, simply probes again.
type Service struct {
	cfg    Config
	flight singleflight.Group

	mu     sync.Mutex
	recent map[string]domain.TenantHealth
}

// New returns a Service.
func New(cfg Config) *Service {
	cfg.setDefaults()
	return &Service{cfg: cfg, recent: map[string]domain.TenantHealth{}}
}

// Probe answers a tenant's health: a probe of its machines younger than TTL,
// else a new one; refresh skips the remembered answer. A caller that arrives
// while a probe of the tenant is under way (refreshing or not) waits for it
// rather than starting another, so a burst of requests costs one round of
// Talos calls. A caller whose ctx ends stops waiting, while the probe, bounded
// by Timeout per machine, finishes for the others and the cache. An unknown
// tenant is NotFound.
func (s *Service) Probe(ctx context.Context, tenant string, refresh bool) (domain.TenantHealth, error) {
	if _, ok := s.cfg.Cache.Get(domain.Ref{Kind: domain.TenantKind.Kind, Name: tenant}); !ok {
		s.mu.Lock()
		delete(s.recent, tenant)
		s.mu.Unlock()
		return domain.TenantHealth{}, domain.NewNotFound(domain.TenantKind.Kind, tenant)
	}
	if !refresh {
		if h, ok := s.cached(tenant); ok {
			return h, nil
		}
	}
	// The probe outlives the caller that started it: others may be waiting.
	base := context.WithoutCancel(ctx)
	ch := s.flight.DoChan(tenant, func() (any, error) { return s.probe(base, tenant) })
	select {
	case <-ctx.Done():
		return domain.TenantHealth{}, ctx.Err()
	case r := <-ch:
		if r.Err != nil {
			return domain.TenantHealth{}, r.Err
		}
		return r.Val.(domain.TenantHealth), nil
	}
}

func (s *Service) cached(tenant string) (domain.TenantHealth, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.recent[tenant]
	if !ok {
		return h, false
	}
	if s.cfg.Now().Sub(h.ObservedAt) >= s.cfg.TTL {
		delete(s.recent, tenant)
		return h, false
	}
	h.Cached = true
	return h, true
}

// probe probes every machine of the tenant, writes back what changed and
// remembers the answer.
func (s *Service) probe(ctx context.Context, tenant string) (domain.TenantHealth, error) {
	start := s.cfg.Now()
	began := time.Now()
	machines, err := projections.List[domain.Machine](s.cfg.Cache, domain.MachineKind, projections.ListOptions{Tenant: tenant})
	if err != nil {
		return domain.TenantHealth{}, err
	}
	var tlsCfg *tls.Config
	if len(machines) > 0 {
		if tlsCfg, err = s.clientTLS(ctx, tenant); err != nil {
			return domain.TenantHealth{}, err
		}
	}
	var kube kubeObservation
	kubeDone := make(chan struct{})
	go func() {
		defer close(kubeDone)
		if len(machines) > 0 {
			kube = s.observeKube(ctx, tenant)
		}
	}()
	obs := s.observe(ctx, tlsCfg, machines)
	<-kubeDone
	h := assess(tenant, obs, kube, start, time.Since(began))
	s.writeBack(ctx, tenant, h)
	s.mu.Lock()
	for t, old := range s.recent {
		if s.cfg.Now().Sub(old.ObservedAt) >= s.cfg.TTL {
			delete(s.recent, t) // tenants nobody asks about any more
		}
	}
	s.recent[tenant] = h
	s.mu.Unlock()
	return h, nil
}

// clientTLS is the mTLS configuration of a probe: the tenant's OS CA as the
// only trusted root and a short-lived os:reader client certificate, the least
// role that can read versions, services and etcd members.
func (s *Service) clientTLS(ctx context.Context, tenant string) (*tls.Config, error) {
	b, err := s.cfg.PKI.Bundle(ctx, tenant)
	if err != nil {
		return nil, err
	}
	crt, err := b.GenerateTalosAPIClientCertificateWithTTL(role.MakeSet(role.Reader), time.Hour)
	if err != nil {
		return nil, fmt.Errorf("issuing the health probe's client certificate for tenant %s: %w", tenant, err)
	}
	pair, err := tls.X509KeyPair(crt.Crt, crt.Key)
	if err != nil {
		return nil, fmt.Errorf("loading the health probe's client certificate for tenant %s: %w", tenant, err)
	}
	roots := stdx509.NewCertPool()
	if !roots.AppendCertsFromPEM(b.Certs.OS.Crt) {
		return nil, fmt.Errorf("the os ca of tenant %s is not a pem certificate", tenant)
	}
	return &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// observe probes the machines, at most Parallelism at once, control planes
// first; the result is in the machines' order.
func (s *Service) observe(ctx context.Context, tlsCfg *tls.Config, machines []domain.Machine) []observation {
	order := make([]int, len(machines))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return compareMachines(&machines[a], &machines[b]) })
	obs := make([]observation, len(machines))
	next := make(chan int, len(order))
	for _, i := range order {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range min(s.cfg.Parallelism, len(machines)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				obs[i] = s.observeMachine(ctx, tlsCfg, machines[i])
			}
		}()
	}
	wg.Wait()
	return obs
}

// observeMachine asks one machine for its version, its services and, on a
// control plane, its etcd member and the cluster's members, all within Timeout.
func (s *Service) observeMachine(ctx context.Context, tlsCfg *tls.Config, m domain.Machine) observation {
	o := observation{Machine: m}
	if m.Spec.Address == "" {
		o.Err = "it has no address yet"
		return o
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	c, err := client.New(ctx, client.WithEndpoints(net.JoinHostPort(m.Spec.Address, strconv.Itoa(s.cfg.Port))),
		client.WithTLSConfig(tlsCfg), client.WithGRPCDialOptions(s.cfg.DialOptions...))
	if err != nil {
		o.Err = err.Error()
		return o
	}
	defer c.Close() //nolint:errcheck // nothing was written through it
	// What the node's controllers hold (COSI resources, as Omni reads them):
	// its version, its services and, on a control plane, its own etcd member.
	v, err := safe.StateGet[*runtime.Version](ctx, c.COSI, runtime.NewVersion().Metadata())
	if err != nil {
		o.Err = s.describe(err)
		return o
	}
	o.Version = v.TypedSpec().Version
	// The extensions (`talosctl get extensions`); the factory's "schematic"
	// extension carries the ID of the image's schematic. A node that does
	// not serve them is judged without.
	if exts, err := safe.StateListAll[*runtime.ExtensionStatus](ctx, c.COSI); err == nil {
		for x := range exts.All() {
			md := x.TypedSpec().Metadata
			if md.Name == "schematic" {
				o.Schematic = md.Version
			} else if len(o.Extensions) < domain.MaxSchematicExtensions {
				o.Extensions = append(o.Extensions, md.Name)
			}
		}
	}
	svcs, err := safe.StateListAll[*v1alpha1.Service](ctx, c.COSI)
	if err != nil {
		o.Err = s.describe(err)
		return o
	}
	o.Services = map[string]domain.ServiceHealth{}
	var bad []string
	for sv := range svcs.All() {
		spec := sv.TypedSpec()
		h := domain.ServiceHealth{ID: sv.Metadata().ID(), State: "Running", Healthy: spec.Healthy && !spec.Unknown}
		if !spec.Running {
			h.State = "Stopped"
		}
		if h.State != "Running" || !h.Healthy {
			bad = append(bad, h.ID)
		}
		o.Services[h.ID] = h
	}
	if len(bad) > 0 {
		s.explain(ctx, c, o.Services, bad)
	}
	if m.Spec.Role != domain.RoleControlPlane {
		return o
	}
	local, err := safe.StateGet[*etcd.Member](ctx, c.COSI, etcd.NewMember(etcd.NamespaceName, etcd.LocalMemberID).Metadata())
	switch {
	case err == nil:
		o.MemberID, _ = etcd.ParseMemberID(local.TypedSpec().MemberID)
	case !state.IsNotFoundError(err): // NotFound: it runs no member
		o.MembersErr = s.describe(err)
		return o
	}
	// No COSI resource lists the cluster's members: the etcd call does.
	ml, err := c.EtcdMemberList(ctx, &machine.EtcdMemberListRequest{})
	if err != nil {
		o.MembersErr = s.describe(err)
		return o
	}
	for _, msg := range ml.GetMessages() {
		for _, mb := range msg.GetMembers() {
			o.Members = append(o.Members, etcdMember{ID: mb.GetId(), Name: mb.GetHostname(), PeerURLs: mb.GetPeerUrls(), Learner: mb.GetIsLearner()})
		}
	}
	return o
}

// explain fills in the state and last health message of the services that
// are not running healthy: the Service resource says only whether, so the
// service list (ServiceList) says why. It is asked only then, and a failure
// leaves the resource's verdict as it was.
func (s *Service) explain(ctx context.Context, c *client.Client, svcs map[string]domain.ServiceHealth, bad []string) {
	sl, err := c.ServiceList(ctx)
	if err != nil {
		return
	}
	for _, msg := range sl.GetMessages() {
		for _, si := range msg.GetServices() {
			h, ok := svcs[si.GetId()]
			if !ok || !slices.Contains(bad, h.ID) {
				continue
			}
			if si.GetState() != "" && (h.State != "Running" || si.GetState() != "Running") {
				h.State = si.GetState()
			}
			h.Message = si.GetHealth().GetLastMessage()
			svcs[h.ID] = h
		}
	}
}

// describe says in a few words why a call failed.
func (s *Service) describe(err error) string {
	if errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded {
		return "no answer within " + s.cfg.Timeout.String()
	}
	st, ok := status.FromError(err)
	if !ok {
		return err.Error()
	}
	// gRPC wraps transport failures as `connection error: desc = "..."`; the quoted part says it.
	msg := st.Message()
	if desc, found := strings.CutPrefix(msg, "connection error: desc = "); found {
		if u, err := strconv.Unquote(desc); err == nil {
			return u
		}
		return desc
	}
	return msg
}
