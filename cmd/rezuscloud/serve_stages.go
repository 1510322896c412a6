package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	"github.com/rezuscloud/rezuscloud/autoscaling"
	applyworker "github.com/rezuscloud/rezuscloud/controllers/apply"
	"github.com/rezuscloud/rezuscloud/controllers/backup"
	"github.com/rezuscloud/rezuscloud/controllers/configsync"
	"github.com/rezuscloud/rezuscloud/controllers/modulecheck"
	"github.com/rezuscloud/rezuscloud/controllers/remediation"
	"github.com/rezuscloud/rezuscloud/controllers/rollout"
	"github.com/rezuscloud/rezuscloud/controllers/upgrade"
	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/handlers"
	"github.com/rezuscloud/rezuscloud/identity"
	"github.com/rezuscloud/rezuscloud/internal/controller"
	"github.com/rezuscloud/rezuscloud/internal/proctree"
	"github.com/rezuscloud/rezuscloud/kube/kubeclient"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/providers"
	"github.com/rezuscloud/rezuscloud/talos"
	"github.com/rezuscloud/rezuscloud/talos/factory"
	"github.com/rezuscloud/rezuscloud/talos/health"
	"github.com/rezuscloud/rezuscloud/tofu"
	"github.com/rezuscloud/rezuscloud/webui"
)

// serveRun is one run of serve: what each start-up stage made, for the stages
// after it and for the shutdown.
type serveRun struct {
	cfg serveConfig
	log *slog.Logger

	// listen
	tlsConfig *tls.Config
	certFile  string
	ln        net.Listener
	starting  *handlers.Starting
	srv       *http.Server
	httpErr   chan error
	oidc      identity.OIDCConfig
	ssoOn     bool

	// connectNATS
	nc        *nats.Conn
	emb       *eventstore.Embedded
	closeNATS func(context.Context)

	// openStores
	replicas    *eventstore.Replicas
	tenants     *controller.Tenants
	store       *eventstore.Store
	audit       *eventstore.AuditLog
	automation  handlers.AutomationIssuer
	sealed      *eventstore.SealedSecrets
	stateStore  *eventstore.StateStore
	applyLogs   *tofu.Logs
	etcdBackups *eventstore.EtcdBackups

	// checkFormat: the data's format record, for raising its lowest reader
	// when a cluster's schema level rises.
	format *eventstore.FormatRecord

	// openIdentity
	holder    string
	cache     *projections.Cache
	projector *projections.Projector
	finalizer *projections.TenantFinalizer
	ids       *identity.Service

	// buildServices
	pki *talos.PKI
	// autoscalerPKI issues the cluster-autoscaler's certificates; nil without --autoscaler-listen.
	autoscalerPKI *autoscaling.PKI
	autoscalerLn  net.Listener
	talosSvc      *talos.Service
	kubeClients   *kubeclient.Clients
	healthSvc     *health.Service
	upgrades      *upgrade.Saga
	schematics    *schematicRegistrar
	modules       providers.ModuleChecker
	sandbox       *tofu.Sandbox
	workDir       string
	api           *handlers.API
	ui            *webui.UI
	worker        *applyworker.Worker

	// startWorkers
	stopSampler func()
	samplerDone chan struct{}
	// stopLeases ends the workers that hold leases (controllers, sagas,
	// the apply worker, the projector), which then release them; leased
	// counts those still running.
	stopLeases func()
	leased     sync.WaitGroup
}

// checkServeConfig refuses flags that cannot work together, and settles the
// replicas of a cluster of embedded nodes.
func checkServeConfig(cfg *serveConfig) error {
	if cfg.SecretsKeyFile != "" && cfg.SecretsPassphrase != "" {
		return errors.New("--secrets-key-file and REZUSCLOUD_SECRETS_PASSPHRASE both say how to seal secrets: give one")
	}
	if cfg.CredentialTTL <= 0 || cfg.CredentialTTL > talos.MaxUserCredentialTTL {
		return fmt.Errorf("--credential-ttl (%s) must be more than 0 and at most %s", cfg.CredentialTTL, talos.MaxUserCredentialTTL)
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = DefaultShutdownGrace
	}
	if cfg.ShutdownGrace < 0 {
		return fmt.Errorf("--shutdown-grace (%s) must not be negative", cfg.ShutdownGrace)
	}
	if l := cfg.WriteSchemaLevel; l != 0 && (l < domain.MinSchemaLevel || l > domain.SchemaLevel) {
		return fmt.Errorf("--write-schema-level (%d) must be between %d and %d", l, domain.MinSchemaLevel, domain.SchemaLevel)
	}
	if cfg.MaxWatches < 1 || cfg.MaxWatchesPerUser < 1 {
		return fmt.Errorf("--max-watches (%d) and --max-watches-per-user (%d) must be at least 1", cfg.MaxWatches, cfg.MaxWatchesPerUser)
	}
	if u, err := url.Parse(cfg.Infra.ImageFactory); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return fmt.Errorf("--image-factory %q must be the factory's http(s) URL with a host and no path, e.g. https://factory.talos.dev", cfg.Infra.ImageFactory)
	}
	return checkCluster(cfg, cfg.ReplicasSet)
}

// prepareDataDir makes the data dir and ends what a server that died left
// running: provider plugins of a tofu that died with it.
func (s *serveRun) prepareDataDir() error {
	if err := os.MkdirAll(s.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("creating data dir: %w", err)
	}
	if left := proctree.Orphans(); len(left) > 0 {
		proctree.Kill(left)
		s.log.Warn("ended processes a server that died left behind", "processes", fmt.Sprint(left))
	}
	return nil
}

// listen opens the HTTP listener and serves the starting page on it before
// NATS is ready: a replica waiting for its cluster answers probes (/readyz
// 503 with what it waits for).
func (s *serveRun) listen() error {
	var err error
	if s.tlsConfig, s.certFile, err = serverTLS(s.cfg.DataDir, s.cfg.TLS); err != nil {
		return err
	}
	if s.ln, err = net.Listen("tcp", s.cfg.Listen); err != nil {
		return fmt.Errorf("listening on %s: %w", s.cfg.Listen, err)
	}
	if s.oidc, s.ssoOn, err = s.cfg.SSO.oidcConfig(s.ln.Addr(), s.tlsConfig != nil); err != nil {
		s.ln.Close()
		return err
	}
	// The bound address, said before start-up goes on: with --listen on
	// port 0 (as the tests run it) only this line tells where it listens.
	s.log.Info("listening", "addr", s.ln.Addr().String(), "tls", s.tlsConfig != nil)
	s.starting = handlers.NewStarting()
	s.srv = &http.Server{Handler: s.starting, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, TLSConfig: s.tlsConfig}
	s.httpErr = make(chan error, 1)
	go func() {
		if s.tlsConfig != nil {
			s.httpErr <- s.srv.ServeTLS(s.ln, "", "")
		} else {
			s.httpErr <- s.srv.Serve(s.ln)
		}
	}()
	return nil
}

// connectNATS starts the embedded NATS server (or node of a cluster) or
// connects to --nats-url.
func (s *serveRun) connectNATS(ctx context.Context) error {
	var err error
	s.nc, s.emb, s.closeNATS, err = connectNATS(ctx, s.log, s.cfg)
	return err
}

// openStores provisions the streams and buckets: events, audit, automation
// credentials, sealed secrets, Terraform state, apply logs, etcd backups.
func (s *serveRun) openStores(ctx context.Context) error {
	cfg, log := s.cfg, s.log
	host, _ := os.Hostname()
	s.holder = fmt.Sprintf("%s-%d", host, os.Getpid())
	// The store writes the schema level every running replica reads,
	// known from the heartbeats before the first write.
	repCfg := eventstore.ReplicasConfig{Holder: s.holder, Release: build().Version, WriteLevel: cfg.WriteSchemaLevel, Logger: log,
		Tenants: func() int {
			if s.tenants == nil {
				return 0
			}
			return s.tenants.Count()
		}}
	if s.emb != nil {
		repCfg.NATSServer, repCfg.Peers = s.emb.ServerName(), s.emb.PeerNames
	}
	var err error
	if s.replicas, err = eventstore.NewReplicas(repCfg); err != nil {
		return err
	}
	return untilProvisioned(ctx, log, s.emb, s.starting, func() error {
		var err error
		if s.store, err = eventstore.Open(ctx, s.nc, eventstore.Config{Replicas: cfg.Replicas, MaxWatches: cfg.MaxWatches, Logger: log,
			Schema: s.replicas, Release: build().Version}); err != nil {
			return err
		}
		if err := s.replicas.Start(ctx, s.store); err != nil {
			return err
		}
		if s.audit, err = eventstore.OpenAudit(ctx, s.store, eventstore.AuditConfig{Retention: cfg.AuditRetention, MaxBytes: cfg.AuditMaxBytes, Logger: log}); err != nil {
			return err
		}
		// NATS credentials for external automation are issued only on a
		// single embedded server; with --nats-url, that cluster's operator
		// issues them, and the API says so. A cluster of embedded nodes
		// does not issue them yet: an account minted on one node would
		// be unknown to the others (docs/operations.md).
		if s.emb != nil && cfg.Cluster.Listen == "" {
			a, err := eventstore.OpenAutomation(ctx, s.store, s.emb, eventstore.AutomationConfig{Logger: log, MaxConsumers: cfg.AutomationMaxConsumers})
			if err != nil {
				return err
			}
			s.automation = a // not a nil *Automation in a non-nil interface
		}
		plainSecrets, err := eventstore.OpenSecrets(ctx, s.store)
		if err != nil {
			return err
		}
		if s.sealed, err = eventstore.OpenSealedSecrets(ctx, plainSecrets, sealerConfig(cfg)); err != nil {
			if errors.Is(err, eventstore.ErrWrongSealKey) {
				return fmt.Errorf("opening sealed secrets: %w; every replica needs the key the first one was given: "+
					"the same --secrets-key-file (REZUSCLOUD_SECRETS_KEY_FILE) or REZUSCLOUD_SECRETS_PASSPHRASE", err)
			}
			return fmt.Errorf("opening sealed secrets: %w", err)
		}
		if s.stateStore, err = eventstore.OpenStateStore(ctx, s.store); err != nil {
			return err
		}
		if s.applyLogs, err = tofu.OpenLogs(ctx, s.store); err != nil {
			return err
		}
		s.etcdBackups, err = eventstore.OpenEtcdBackups(ctx, s.store, s.sealed)
		return err
	})
}

// openIdentity makes the read model and the identity service (users,
// sessions, tokens), and turns single sign-on on when configured.
func (s *serveRun) openIdentity(ctx context.Context) error {
	cfg, log := s.cfg, s.log
	s.cache = projections.NewCache(s.store, log)
	s.projector = projections.NewProjector(s.store, log, s.holder)
	s.finalizer = &projections.TenantFinalizer{Cache: s.cache, Store: s.store, Log: log}
	err := untilProvisioned(ctx, log, s.emb, s.starting, func() error {
		var err error
		s.ids, err = identity.NewService(ctx, identity.Config{SecureCookies: s.tlsConfig != nil, Secrets: s.sealed,
			SessionTTL: cfg.SessionTTL, SigningKey: []byte(cfg.SigningKey), StaticToken: cfg.AdminToken, Log: log,
			DisablePasswordLogin: !cfg.SSO.PasswordLogin,
		}, s.store, s.cache)
		return err
	})
	if err != nil || !s.ssoOn {
		return err
	}
	if err := s.ids.EnableSSO(s.oidc); err != nil {
		return err
	}
	log.Info("single sign-on on", "issuer", s.oidc.Issuer, "callback", s.oidc.RedirectURL, "passwordLogin", cfg.SSO.PasswordLogin)
	return nil
}

// buildServices makes the Talos services, the API and the web UI.
func (s *serveRun) buildServices(ctx context.Context) error {
	cfg, log := s.cfg, s.log
	s.pki = talos.NewPKI(talos.PKIConfig{Cache: s.cache, Secrets: s.sealed, Store: s.store, Log: log})
	s.talosSvc = talos.NewService(s.cache, s.pki).WithImageFactory(cfg.Infra.ImageFactory)
	s.schematics = &schematicRegistrar{}
	if !cfg.Infra.emulated() || cfg.Infra.ImageFactorySet {
		s.schematics.set(factory.New(cfg.Infra.ImageFactory, nil))
	}
	s.kubeClients = kubeclient.New(s.talosSvc)
	s.healthSvc = health.New(health.Config{Cache: s.cache, PKI: s.pki, Store: s.store, Log: log,
		Kube: s.kubeClients, NoKube: noKube(drainSkip(cfg.Infra))})
	// The tenants this replica works, shared with the other replicas.
	tenantsCfg := controller.TenantsConfig{Store: s.store, Members: s.replicas, Log: log,
		Names: func() []string { return s.cache.Names(domain.TenantKind.Kind) }}
	if err := tenantsCfg.Validate(); err != nil {
		return err
	}
	s.tenants = controller.NewTenants(tenantsCfg)
	s.upgrades = upgrade.New(upgrade.Config{Store: s.store, Cache: s.cache, Bundles: s.pki, Rotations: s.pki, Configs: s.talosSvc, Holder: s.holder, Tenants: s.tenants, Log: log,
		Observer: s.healthSvc, Kube: s.kubeClients, DrainSkip: drainSkip(cfg.Infra), Concurrency: cfg.Infra.UpgradeConcurrency,
		ImageFactory: cfg.Infra.ImageFactory, Schematics: s.schematics})
	if p := cfg.Infra.StatePassphrase; p != "" {
		if _, err := tofu.EncryptionConfig(p); err != nil {
			return fmt.Errorf("REZUSCLOUD_STATE_PASSPHRASE: %w", err)
		}
	}
	nc, emb := s.nc, s.emb
	var autoscalerCerts handlers.AutoscalerCertificates
	if cfg.Autoscaler.Listen != "" {
		// Open now: the endpoint the certificates' answers name is the
		// bound address when the flag's port is 0.
		ln, err := net.Listen("tcp", cfg.Autoscaler.Listen)
		if err != nil {
			return fmt.Errorf("--autoscaler-listen: %w", err)
		}
		endpoint := cfg.Autoscaler.Endpoint
		if cfg.Autoscaler.EndpointDefault {
			endpoint = ln.Addr().String()
		}
		s.autoscalerLn = ln
		s.autoscalerPKI = autoscaling.NewPKI(s.sealed, nil)
		autoscalerCerts = handlers.NewAutoscalerCertificates(s.autoscalerPKI, endpoint)
	}
	apiDeps := handlers.Deps{
		Store: s.store, Cache: s.cache, Projector: s.projector, Finalizer: s.finalizer, Identity: s.ids, Audit: s.audit, Automation: s.automation,
		Talos: s.talosSvc, Log: log, State: s.stateStore, ApplyLogs: s.applyLogs, Health: s.healthSvc,
		MachineLogs: talos.NewLogReader(talos.LogConfig{Cache: s.cache, PKI: s.pki}),
		CancelApply: func(ctx context.Context, tenant, name string) error { return applyworker.Cancel(ctx, nc, tenant, name) },
		Backup:      handlers.BackupFunc(onlineBackup(nc, emb, cfg.DataDir)),
		EtcdBackups: s.etcdBackups,
		Replicas:    s.replicas,
		Autoscaler:  autoscalerCerts,
		KubeAccess:  kubeAccess{clients: s.kubeClients, noKube: noKube(drainSkip(cfg.Infra))},
		// The apply worker is made by startWorkers, before the server
		// answers any request.
		PlanChange: func(ctx context.Context, tenant string, ch talos.Change) (*domain.ImpactPlan, error) {
			return s.worker.PlanChange(ctx, tenant, ch)
		},
	}
	if err := apiDeps.Validate(); err != nil {
		return err
	}
	// Module providers are checked against the providers tofu can install.
	var err error
	s.modules, err = providers.NewModuleChecker(cfg.Infra.ProviderMirror, cfg.Infra.AllowModuleExec)
	if err != nil {
		log.Warn("module providers' sources are not checked", "err", err)
	}
	s.workDir = filepath.Join(cfg.DataDir, "tofu")
	if s.sandbox, err = tofuSandbox(ctx, log, cfg, s.workDir); err != nil {
		return err
	}
	s.modules.Unsandboxed = s.sandbox == nil && cfg.Infra.TofuSandbox != "off"
	s.modules.NoMirror = cfg.Infra.ProviderMirror == "" && !cfg.Infra.AllowProviderDownloads
	s.api = handlers.New(handlers.Config{Version: build().Version, ConsistentReads: cfg.NATSURL != "" || cfg.Cluster.Listen != "", RequireEncryptedState: true,
		MaxWatches: cfg.MaxWatches, MaxWatchesPerUser: cfg.MaxWatchesPerUser, Modules: s.modules, TrustedProxies: cfg.TrustedProxies,
		CredentialTTL: cfg.CredentialTTL, SSOErrorPage: webui.Prefix + "/login", MetalAddresses: cfg.MetalAddresses}, apiDeps)
	// The state page decrypts state with the apply worker's keys (made by
	// startWorkers, before the server answers any request).
	decryptState := func(ctx context.Context, tenant string, blob []byte) ([]byte, error) {
		return s.worker.DecryptState(ctx, tenant, blob)
	}
	s.ui = webui.New(webui.Config{SecureCookies: s.tlsConfig != nil, Log: log, Version: build().Version},
		webui.Deps{API: s.api.Handler(), Identity: s.ids, Cache: s.cache, DecryptState: decryptState, Streams: s.api})
	return nil
}

// startWorkers starts every long-running part in g: the read model, the
// projector and the tenant finalizer, the PKI, the first admin, the apply
// worker, the module validator, the upgrade saga, day-2 config, etcd
// backups and the emulator; then opens the API on the listener.
func (s *serveRun) startWorkers(gctx context.Context, g *errgroup.Group) error {
	cfg, log := s.cfg, s.log
	// Leased work stops first when the server goes lame duck, while the read
	// model and the API go on serving.
	leaseCtx, stopLeases := context.WithCancel(gctx)
	s.stopLeases = stopLeases
	goLeased := func(run func(context.Context) error) {
		s.leased.Add(1)
		g.Go(func() error {
			defer s.leased.Done()
			return run(leaseCtx)
		})
	}
	g.Go(func() error { return s.replicas.Run(gctx) })
	g.Go(func() error { return s.followFormat(gctx) })
	g.Go(func() error { return s.cache.Run(gctx) })
	goLeased(s.projector.Run)
	goLeased(s.tenants.Run)
	g.Go(func() error { return s.finalizer.Run(gctx) })
	g.Go(func() error { return s.pki.Run(gctx) })
	if s.autoscalerPKI != nil {
		svc, err := autoscaling.NewService(autoscaling.Config{Cache: s.cache, Store: s.store, PKI: s.autoscalerPKI, Log: log})
		if err != nil {
			return err
		}
		if err := startAutoscaler(gctx, g, log, cfg.Autoscaler, s.autoscalerLn, svc, s.autoscalerPKI); err != nil {
			return err
		}
	}
	s.ids.ExpectBootstrap()
	g.Go(func() error { return bootstrapAdmin(gctx, log, s.cache, s.ids, cfg) })
	var backendCA string
	if s.tlsConfig != nil && s.certFile != "" {
		pem, err := os.ReadFile(s.certFile)
		if err != nil {
			return fmt.Errorf("reading the certificate for tofu: %w", err)
		}
		backendCA = string(pem)
	}
	workerCfg := applyworker.Config{
		Store: s.store, Cache: s.cache, Bundles: s.pki, Logs: s.applyLogs,
		Tofu:    tofu.Binary{Bin: cfg.Infra.Tofu, Mirror: cfg.Infra.ProviderMirror, Sandbox: s.sandbox},
		WorkDir: s.workDir, BackendURL: backendURL(s.ln.Addr(), s.tlsConfig != nil), BackendCAPEM: backendCA,
		Credentials: s.ids, ProviderCredentials: s.ids, State: applyworker.StoreState(s.stateStore),
		StatePassphrase: cfg.Infra.StatePassphrase, StateKeys: eventstore.NewStateKeys(s.sealed), Holder: s.holder, Tenants: s.tenants, Log: log,
		Metal: talos.NodeAPI{Addresses: &cfg.MetalAddresses}, Built: talos.NodeAPI{}, MetalAddresses: cfg.MetalAddresses, Nodes: talos.NodeAPI{}, Upgrades: s.upgrades,
		ImageFactory: cfg.Infra.ImageFactory, Schematics: s.schematics,
		Debounce: cfg.Infra.ApplyDebounce, Concurrency: cfg.Infra.ApplyConcurrency, Timeout: cfg.Infra.ApplyTimeout, Resync: cfg.Infra.Resync,
		Modules: s.modules, Observer: s.healthSvc, Kube: s.kubeClients, DrainSkip: drainSkip(cfg.Infra),
		DriftInterval: cfg.Infra.DriftInterval, DriftMinInterval: cfg.Infra.DriftMinInterval,
		ConfigDrift: talos.ConfigDriftChecker{Service: s.talosSvc, Nodes: talos.NodeAPI{},
			Recorder: talos.ConfigRecorder{Store: s.store, Actor: applyworker.WorkerActor, Hint: s.cache}, Schematics: s.upgrades},
	}
	if err := workerCfg.Validate(); err != nil {
		return err
	}
	s.worker = applyworker.NewWorker(workerCfg)
	if _, err := s.worker.Tofu().Path(); err != nil {
		log.Warn("applies will fail until tofu is available", "err", err)
	}
	goLeased(s.worker.Run)
	// tofu validate of module providers' modules, after every change.
	validatorCfg := modulecheck.ValidatorConfig{Store: s.store, Cache: s.cache, Tofu: workerCfg.Tofu, WorkDir: workerCfg.WorkDir, Holder: s.holder, Log: log}
	if err := validatorCfg.Validate(); err != nil {
		return err
	}
	validator := modulecheck.NewModuleValidator(validatorCfg)
	goLeased(validator.Run)
	goLeased(s.upgrades.Run)
	// Day 2: every running machine's config through the Talos API.
	configCfg := configsync.Config{Store: s.store, Cache: s.cache, Talos: s.talosSvc, Holder: s.holder, Tenants: s.tenants, Log: log,
		Kube: s.kubeClients, DrainSkip: drainSkip(cfg.Infra)}
	if err := configCfg.Validate(); err != nil {
		return err
	}
	configs := configsync.New(configCfg)
	goLeased(configs.Run)
	// etcd backups of tenants, their schedules and restores. A snapshot
	// being taken is copied beside the data (it holds the tenant's
	// secrets), not into the shared temp dir; copies a crash left behind
	// are removed here.
	spoolDir, err := privateTempDir(filepath.Join(cfg.DataDir, "tmp"), "etcd-backup-*.db")
	if err != nil {
		return err
	}
	backupCfg := backup.Config{Store: s.store, Cache: s.cache, Backups: s.etcdBackups, PKI: s.pki, Holder: s.holder, Tenants: s.tenants, Log: log, TempDir: spoolDir}
	if err := backupCfg.Validate(); err != nil {
		return err
	}
	backups := backup.New(backupCfg)
	goLeased(backups.Run)
	remediationCfg := remediation.Config{Store: s.store, Cache: s.cache, Prober: s.healthSvc, Holder: s.holder, Tenants: s.tenants, Log: log, Interval: cfg.Infra.RemediationInterval}
	if err := remediationCfg.Validate(); err != nil {
		return err
	}
	remediations := remediation.New(remediationCfg)
	goLeased(remediations.Run)
	// Rollouts of one change across many tenants, in waves.
	rolloutCfg := rollout.Config{Store: s.store, Cache: s.cache, Prober: s.healthSvc, Configs: s.talosSvc, Holder: s.holder, Log: log, Interval: cfg.Infra.RolloutInterval}
	if err := rolloutCfg.Validate(); err != nil {
		return err
	}
	rollouts := rollout.New(rolloutCfg)
	goLeased(rollouts.Run)
	if cfg.Infra.emulated() {
		var api emulatorAPI
		if a := cfg.Infra.Apart; a != nil {
			api = a.API
			log.Info("building on the node emulator run apart", "api", api.URL, "light", a.Light)
		} else if api, err = startEmulator(gctx, log, cfg.DataDir, cfg.Infra, g.Go); err != nil {
			return err
		}
		if !cfg.Infra.ImageFactorySet {
			// No factory is reachable from here: the emulator stands in.
			s.schematics.set(factory.New(api.URL, nil))
			log.Info("schematics are registered with the emulator's stand-in for the image factory", "url", api.URL)
		}
		g.Go(func() error { return registerEmulatedProvider(gctx, s.store, s.cache, s.ids, api) })
	}
	// The sampler of refused anonymous requests outlives the workers: it
	// stops after the HTTP server's last request and before the audit log closes.
	samplerCtx, stopSampler := context.WithCancel(context.Background())
	s.stopSampler, s.samplerDone = stopSampler, make(chan struct{})
	go func() {
		defer close(s.samplerDone)
		_ = s.api.RunAuditSampler(samplerCtx)
	}()
	s.starting.Ready(handlers.BodyReadTimeout(s.ui.Handler(s.api.Handler()), cfg.BodyReadTimeout))
	log.Info("serving", "addr", s.ln.Addr().String(), "dataDir", cfg.DataDir, "tls", s.tlsConfig != nil, "certificate", s.certFile)
	if cfg.ready != nil {
		cfg.ready(s.ln.Addr().String())
	}
	return nil
}

// run serves until ctx ends, the HTTP server fails or a worker does, then
// shuts down as a lame duck, within --shutdown-grace (see shutdown).
func (s *serveRun) run(ctx context.Context, g *errgroup.Group, gctx context.Context, stopWork func()) error {
	var runErr error
	select {
	case <-ctx.Done():
	case err := <-s.httpErr:
		runErr = fmt.Errorf("http server: %w", err)
	case <-gctx.Done():
		runErr = g.Wait()
	}
	if err := s.shutdown(g, stopWork); err != nil && runErr == nil {
		runErr = err
	}
	return runErr
}
