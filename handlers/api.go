package handlers

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/identity"
	"github.com/rezuscloud/rezuscloud/internal/buildinfo"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/providers"
	"github.com/rezuscloud/rezuscloud/talos"
)

// Config tunes the API. The zero value is usable; each field documents its default.
type Config struct {
	// MaxBodyBytes bounds request bodies; default 1 MiB. Larger bodies get 413.
	MaxBodyBytes int64
	// CredentialTTL is the lifetime of per-user cluster credentials (the
	// kubeconfig exec plugin's certificates, talosconfigs); default 1h,
	// at most 24h (talos.MaxUserCredentialTTL).
	CredentialTTL time.Duration
	// SSOErrorPage is where a browser goes when a single sign-on callback
	// fails, with the message in ?sso_error= (the web UI's sign-in page);
	// empty answers the failure as a Status instead.
	SSOErrorPage string
	// MaxProviderBodyBytes bounds the bodies of Provider writes, which may
	// carry a module's files; default 3 MiB.
	MaxProviderBodyBytes int64
	// Modules checks module providers' modules when they are written (the
	// provider mirror, --allow-module-exec); the zero value checks all but
	// the provider sources.
	Modules providers.ModuleChecker
	// ReadAfterWriteTimeout is how long a write waits for this replica's read
	// model to include it before answering; default 5s.
	ReadAfterWriteTimeout time.Duration
	// ConsistentReads makes every read wait until the read model has caught up
	// with the stream, so a client reading from another replica sees its writes.
	// Off by default (one replica answers both); on when several replicas share NATS.
	ConsistentReads bool
	// HeartbeatInterval is the SSE comment keeping idle watches alive; default 15s.
	HeartbeatInterval time.Duration
	// BookmarkInterval is how often a watch sends a BOOKMARK; default 30s.
	BookmarkInterval time.Duration
	// WatchWriteTimeout drops a watch whose client does not take an event in time; default 30s.
	WatchWriteTimeout time.Duration
	// AccessRecheckInterval is how often an open watch or follow checks its
	// caller's access again (credential, user, bindings, tenant labels); it
	// ends the stream when access is gone. Default 2s.
	AccessRecheckInterval time.Duration
	// MaxWatches bounds concurrently open watches and follows (events, audit,
	// logs) on this server; more get 429 with Retry-After. Default
	// DefaultMaxWatches (1024). Give the event store the same number
	// (eventstore.Config.MaxWatches) so the stream's consumer limit keeps a
	// reserve for the internal consumers.
	MaxWatches int
	// MaxWatchesPerUser bounds the watches and follows one user holds open at
	// once, over all its tokens and sessions; more get 429 with Retry-After.
	// Default DefaultMaxWatchesPerUser (32).
	MaxWatchesPerUser int
	// AuditSampleSources bounds the sources whose refused unauthenticated
	// requests are counted apart in one minute (one audit record each with a
	// count); the rest share one record. Default DefaultAuditSampleSources (10000).
	AuditSampleSources int
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names the
	// client (--trusted-proxies): a request from one of them is the client's
	// at the rightmost address of the header that is not itself a trusted
	// proxy, for the audit trail and the login limiter. Empty (the default)
	// takes the peer's address and ignores the header, which any client can set.
	TrustedProxies []*net.IPNet
	// MetalAddresses is the rule for the machine addresses editors write (a
	// metal group's listed machines, a registered Machine's spec.address):
	// an IP address it refuses is refused at write (serve --metal-networks,
	// --with-emulator). The zero value is talos.AddressPolicy's default
	// (no loopback, link-local or cloud metadata addresses).
	MetalAddresses talos.AddressPolicy
	// Version is the release /version reports; default this source tree's
	// (internal/buildinfo/VERSION). The server passes its build's, which
	// -ldflags may have stamped.
	Version string
	// RequireEncryptedState makes the state backend refuse state tofu did not
	// encrypt; the server always sets it (the runner always passes
	// TF_ENCRYPTION). Default off, for tests that store plain state.
	RequireEncryptedState bool
	// Now is the clock; default time.Now.
	Now func() time.Time
	// NewUID makes object uids; default random UUIDs.
	NewUID func() string
}

func (c *Config) setDefaults() {
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.CredentialTTL <= 0 {
		c.CredentialTTL = talos.DefaultUserCredentialTTL
	}
	if c.CredentialTTL > talos.MaxUserCredentialTTL {
		c.CredentialTTL = talos.MaxUserCredentialTTL
	}
	if c.MaxProviderBodyBytes == 0 {
		c.MaxProviderBodyBytes = 3 << 20
	}
	if c.ReadAfterWriteTimeout == 0 {
		c.ReadAfterWriteTimeout = 5 * time.Second
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = 15 * time.Second
	}
	if c.BookmarkInterval == 0 {
		c.BookmarkInterval = 30 * time.Second
	}
	if c.WatchWriteTimeout == 0 {
		c.WatchWriteTimeout = 30 * time.Second
	}
	if c.AccessRecheckInterval == 0 {
		c.AccessRecheckInterval = 2 * time.Second
	}
	if c.MaxWatches == 0 {
		c.MaxWatches = DefaultMaxWatches
	}
	if c.MaxWatchesPerUser == 0 {
		c.MaxWatchesPerUser = DefaultMaxWatchesPerUser
	}
	if c.AuditSampleSources == 0 {
		c.AuditSampleSources = DefaultAuditSampleSources
	}
	if c.Version == "" {
		c.Version = buildinfo.Version()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.NewUID == nil {
		c.NewUID = func() string { return uuid.NewString() }
	}
}

// Readiness is what /readyz asks of the projector.
type Readiness interface {
	CaughtUp() bool
	Checkpoint() uint64
}

// Authenticator identifies the caller of a request, or fails with Unauthorized.
type Authenticator interface {
	Authenticate(r *http.Request) (identity.Identity, error)
}

// API serves the REST API.
type API struct {
	cfg       Config
	store     *eventstore.Store
	cache     *projections.Cache
	projector Readiness
	finalizer *projections.TenantFinalizer
	auth      Authenticator
	identity  *identity.Service
	audit     *eventstore.AuditLog
	log       *slog.Logger
	metrics   *metrics
	echo      *echo.Echo

	// refused samples refused unauthenticated requests for the audit log;
	// nil without one.
	refused *refusedSampler

	// streams counts open watches and follows against MaxWatches and
	// MaxWatchesPerUser.
	streams *streamLimiter

	// automation issues NATS credentials; nil on an external NATS.
	automation AutomationIssuer

	// talos renders configs and credentials; nil leaves their routes out.
	talos *talos.Service
	// dryRunner asks nodes how they would take a config (dry runs' impact).
	dryRunner talos.DryRunner
	// planChange plans a dry run's change with tofu (nil: no plan).
	planChange ChangePlanner
	// dryRunRoutes are the writes that serve ?dryRun=All ("METHOD path");
	// every other write refuses the parameter rather than write for real.
	dryRunRoutes map[string]bool
	// kubeAccess keeps the clusters' RBAC of per-user credentials; nil: not kept.
	kubeAccess KubeAccess

	// state keeps Terraform state; nil answers its routes with ServiceUnavailable.
	state *eventstore.StateStore

	applyLogs ApplyLogs
	cancelRun ApplyCanceler

	// health probes tenants; nil answers its route with ServiceUnavailable.
	health TenantHealthProber

	// machineLog reads machines' logs; nil answers its routes with ServiceUnavailable.
	machineLog MachineLogReader
	// backup writes archives of the server's data; nil answers its route with ServiceUnavailable.
	backup Backuper

	// etcdBackups opens backup objects; nil answers their routes with ServiceUnavailable.
	etcdBackups EtcdBackupObjects

	// stopping ends watches when the server shuts down.
	stopping context.Context
	stop     context.CancelFunc

	// lameDuck is set once the server is going away: /readyz answers 503
	// so balancers send new requests elsewhere, while this one still serves.
	lameDuck atomic.Bool

	// replicas are the heartbeats (Deps.Replicas); nil: this replica alone.
	replicas ReplicaViewer
	// autoscaler is Deps.Autoscaler.
	autoscaler AutoscalerCertificates
}

// New builds the API and its routes on d, which the caller has checked with
// Deps.Validate.
func New(cfg Config, d Deps) *API {
	cfg.setDefaults()
	if d.Log == nil {
		d.Log = slog.Default()
	}
	a := &API{cfg: cfg, store: d.Store, cache: d.Cache, projector: d.Projector, finalizer: d.Finalizer,
		auth: d.Auth, identity: d.Identity, audit: d.Audit, automation: d.Automation, log: d.Log, talos: d.Talos, dryRunner: d.ConfigDryRun, planChange: d.PlanChange, dryRunRoutes: map[string]bool{},
		applyLogs: d.ApplyLogs, cancelRun: d.CancelApply, state: d.State, health: d.Health,
		machineLog: d.MachineLogs, backup: d.Backup, etcdBackups: d.EtcdBackups, kubeAccess: d.KubeAccess, replicas: d.Replicas, autoscaler: d.Autoscaler}
	if d.Identity != nil {
		a.auth = d.Identity
	}
	a.streams = newStreamLimiter(cfg.MaxWatches, cfg.MaxWatchesPerUser)
	if a.audit != nil {
		a.refused = newRefusedSampler(cfg.AuditSampleSources, a.audit.Append)
	}
	a.stopping, a.stop = context.WithCancel(context.Background())
	a.metrics = newMetrics(a)
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = a.errorHandler
	// The client address (audit records, login rate limits) is the peer's:
	// headers such as X-Forwarded-For are set by the client and trusted only
	// from the configured proxies.
	e.IPExtractor = clientAddress(cfg.TrustedProxies)
	e.Use(a.recoverMiddleware, a.requestID, a.auditRequests, a.metrics.middleware, a.requestHygiene)
	a.echo = e
	a.routes()
	return a
}

// Handler is the http.Handler of the API.
func (a *API) Handler() http.Handler { return a.echo }

// Echo exposes the router so the web UI can add its pages.
func (a *API) Echo() *echo.Echo { return a.echo }

// StopWatches ends every open watch; call it when shutting down, before waiting
// for in-flight requests, since watches never finish on their own.
func (a *API) StopWatches() { a.stop() }

// LameDuck makes /readyz answer 503 from now on, saying the replica is
// shutting down, while every request is still served: the first step of a
// shutdown, so a load balancer drains this replica before it stops.
func (a *API) LameDuck() { a.lameDuck.Store(true) }

func (a *API) routes() {
	e := a.echo
	e.GET("/healthz", a.healthz)
	e.GET("/readyz", a.readyz)
	e.GET("/version", a.version)
	e.GET("/metrics", a.metricsHandler, a.authenticate, a.authorize)

	// Routes take the auth middleware one by one: an echo Group with middleware
	// registers catch-all routes that would turn 405 answers into 404s.
	g := &authed{e: e, prefix: "/api/v1", mw: []echo.MiddlewareFunc{a.authenticate, a.authorize}}
	a.accountRoutes(g)
	a.automationRoutes(g)
	g.GET("/audit", a.auditTrail)
	g.GET("/events", a.events)
	if a.talos != nil {
		a.talosRoutes(g)
	}
	a.applyRoutes(g)
	a.stateRoutes(g)
	a.credentialRoutes(g)
	a.healthRoutes(g)
	a.machineLogRoutes(g)
	a.upgradeRoutes(g)
	a.backupRoutes(g)
	a.etcdBackupRoutes(g)
	a.replicaRoutes(g)
	a.autoscalerRoutes(g)
	for _, k := range domain.Kinds() {
		r := &resource{api: a, kind: k, hooks: a.hooksFor(k)}
		var coll, item string
		if k.TenantScoped {
			coll = "/tenants/:tenant/" + k.Plural
			item = coll + "/:name"
			g.GET("/"+k.Plural, r.list) // across tenants
		} else if k == domain.TenantKind {
			coll, item = "/tenants", "/tenants/:tenant"
		} else {
			coll, item = "/"+k.Plural, "/"+k.Plural+"/:name"
		}
		g.GET(coll, r.list)
		g.POST(coll, r.create)
		g.GET(item, r.get)
		g.PUT(item, r.update)
		g.PATCH(item, r.patch)
		if k == domain.TenantKind || k == domain.NodeGroupKind || k == domain.ConfigPatchKind {
			// Their admission has no side effects (a user's stores a
			// password): what a dry run decides is all it does.
			a.dryRunRoutes[http.MethodPost+" "+g.prefix+coll] = true
			a.dryRunRoutes[http.MethodPut+" "+g.prefix+item] = true
			a.dryRunRoutes[http.MethodPatch+" "+g.prefix+item] = true
		}
		g.DELETE(item, r.delete)
		g.GET(item+"/status", r.get)
		g.PUT(item+"/status", r.updateStatus)
		g.PATCH(item+"/status", r.patchStatus)
	}
}

// authed registers routes under a prefix with one middleware.
type authed struct {
	e      *echo.Echo
	prefix string
	mw     []echo.MiddlewareFunc
}

func (g *authed) GET(p string, h echo.HandlerFunc)    { g.e.GET(g.prefix+p, h, g.mw...) }
func (g *authed) POST(p string, h echo.HandlerFunc)   { g.e.POST(g.prefix+p, h, g.mw...) }
func (g *authed) PUT(p string, h echo.HandlerFunc)    { g.e.PUT(g.prefix+p, h, g.mw...) }
func (g *authed) PATCH(p string, h echo.HandlerFunc)  { g.e.PATCH(g.prefix+p, h, g.mw...) }
func (g *authed) DELETE(p string, h echo.HandlerFunc) { g.e.DELETE(g.prefix+p, h, g.mw...) }

// clientAddress extracts the client's address: the peer's, or behind one of
// the trusted proxies the one X-Forwarded-For gives (echo walks the header
// from the right, skipping trusted hops, so a client cannot name itself).
func clientAddress(trusted []*net.IPNet) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, n := range trusted {
		opts = append(opts, echo.TrustIPRange(n))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}
