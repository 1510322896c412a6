package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/urfave/cli/v2"
	"golang.org/x/sync/errgroup"

	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/handlers"
	"github.com/rezuscloud/rezuscloud/identity"
	"github.com/rezuscloud/rezuscloud/internal/proctree"
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
	"github.com/rezuscloud/rezuscloud/talos/backup"
	"github.com/rezuscloud/rezuscloud/talos/configsync"
	"github.com/rezuscloud/rezuscloud/talos/health"
	"github.com/rezuscloud/rezuscloud/talos/kubeclient"
	"github.com/rezuscloud/rezuscloud/talos/upgrade"
	"github.com/rezuscloud/rezuscloud/tfrunner"
	"github.com/rezuscloud/rezuscloud/webui"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the management plane (embedded NATS JetStream unless --nats-url is given)",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:8080", EnvVars: []string{"REZUSCLOUD_LISTEN"}, Usage: "HTTP listen address"},
			&cli.StringFlag{Name: "data-dir", Value: "./data", EnvVars: []string{"REZUSCLOUD_DATA_DIR"}, Usage: "data directory (embedded NATS under <data-dir>/nats)"},
			&cli.StringFlag{Name: "nats-url", EnvVars: []string{"REZUSCLOUD_NATS_URL"}, Usage: "external NATS cluster URL instead of the embedded server"},
			&cli.StringFlag{Name: "nats-creds", EnvVars: []string{"REZUSCLOUD_NATS_CREDS"}, Usage: "credentials file for --nats-url"},
			&cli.StringFlag{Name: "nats-listen", EnvVars: []string{"REZUSCLOUD_NATS_LISTEN"}, Usage: "open a client listener on the embedded NATS server (host:port); off by default"},
			&cli.IntFlag{Name: "replicas", Value: 1, EnvVars: []string{"REZUSCLOUD_REPLICAS"}, Usage: "JetStream replicas for streams and buckets (3 on a NATS cluster; with --cluster-listen the default is min(3, nodes))"},
			&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: []string{"REZUSCLOUD_LOG_LEVEL"}, Usage: "debug, info, warn or error"},
			&cli.StringFlag{Name: "admin-token", EnvVars: []string{"REZUSCLOUD_ADMIN_TOKEN"}, Usage: "break-glass admin bearer token for automation bootstrap; off unless set"},
			&cli.StringFlag{Name: "tls-cert", EnvVars: []string{"REZUSCLOUD_TLS_CERT"}, Usage: "serve HTTPS with this certificate (PEM)"},
			&cli.StringFlag{Name: "tls-key", EnvVars: []string{"REZUSCLOUD_TLS_KEY"}, Usage: "the certificate's private key (PEM)"},
			&cli.BoolFlag{Name: "tls-self-signed", EnvVars: []string{"REZUSCLOUD_TLS_SELF_SIGNED"}, Usage: "serve HTTPS with a certificate generated once under <data-dir>/tls (trust it with rezusctl --certificate-authority <data-dir>/tls/tls.crt)"},
			&cli.DurationFlag{Name: "audit-retention", Value: eventstore.DefaultAuditRetention, EnvVars: []string{"REZUSCLOUD_AUDIT_RETENTION"}, Usage: "how long audit records are kept"},
			&cli.Int64Flag{Name: "audit-max-bytes", Value: eventstore.DefaultAuditMaxBytes, EnvVars: []string{"REZUSCLOUD_AUDIT_MAX_BYTES"}, Usage: "the audit stream's size bound in bytes (at least 1 MiB); beyond it the oldest records go"},
			&cli.DurationFlag{Name: "body-read-timeout", Value: handlers.DefaultBodyReadTimeout, EnvVars: []string{"REZUSCLOUD_BODY_READ_TIMEOUT"}, Usage: "how long a client has to send a request body once its headers are in (headers: 10s); 0 turns it off"},
			&cli.StringFlag{Name: "secrets-key-file", EnvVars: []string{"REZUSCLOUD_SECRETS_KEY_FILE"}, Usage: "the key sealing secrets at rest, outside the data dir so a backup of it does not carry its key (created 0600 when missing; a key in <data-dir>/secrets.key is moved there); default <data-dir>/secrets.key"},
			&cli.IntFlag{Name: "automation-max-consumers", Value: eventstore.DefaultAutomationMaxConsumers, EnvVars: []string{"REZUSCLOUD_AUTOMATION_MAX_CONSUMERS"}, Usage: "how many JetStream consumers each automation credential may keep at once (its account's limit; for credentials issued from then on)"},
			&cli.IntFlag{Name: "max-watches", Value: handlers.DefaultMaxWatches, EnvVars: []string{"REZUSCLOUD_MAX_WATCHES"}, Usage: "how many watches and follows the server holds open at once (more get 429); the event stream's consumer limit is this plus a reserve for the server's own consumers"},
			&cli.DurationFlag{Name: "credential-ttl", Value: talos.DefaultUserCredentialTTL, EnvVars: []string{"REZUSCLOUD_CREDENTIAL_TTL"}, Usage: "lifetime of per-user cluster credentials (kubeconfig exec certificates, talosconfigs); at most 24h"},
			&cli.IntFlag{Name: "max-watches-per-user", Value: handlers.DefaultMaxWatchesPerUser, EnvVars: []string{"REZUSCLOUD_MAX_WATCHES_PER_USER"}, Usage: "how many watches and follows one user (all its tokens and sessions) holds open at once (more get 429)"},
			&cli.DurationFlag{Name: "session-ttl", Value: 12 * time.Hour, EnvVars: []string{"REZUSCLOUD_SESSION_TTL"}, Usage: "how long a login lasts"},
			&cli.IntFlag{Name: "gc-percent", Value: 50, Usage: "Go GC target (GOGC) when the GOGC environment variable is unset; 50 keeps the heap near 1.5x live data (see docs/benchmarks.md)"},
			&cli.StringFlag{Name: "trusted-proxies", EnvVars: []string{"REZUSCLOUD_TRUSTED_PROXIES"}, Usage: "reverse proxies (comma-separated CIDRs) whose X-Forwarded-For names the client, for the audit trail and the login limiter; default none: the peer's address counts and the header is ignored"},
			ssoFlags[0], ssoFlags[1], ssoFlags[2], ssoFlags[3], ssoFlags[4], ssoFlags[5], ssoFlags[6], ssoFlags[7],
			&cli.StringFlag{Name: "cpu-profile", Usage: "write a CPU profile to this file until shutdown (for benchmarking)"},
			&cli.StringFlag{Name: "mem-profile", Usage: "write a heap profile to this file at shutdown (for benchmarking)"},
		}, append(infraFlags(), clusterFlags()...)...),
		Action: func(c *cli.Context) error {
			log, err := newLogger(c.String("log-level"))
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if os.Getenv("GOGC") == "" {
				debug.SetGCPercent(c.Int("gc-percent"))
			}
			if path := c.String("cpu-profile"); path != "" {
				f, err := os.Create(path)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			if path := c.String("mem-profile"); path != "" {
				defer func() {
					if f, err := os.Create(path); err == nil {
						_ = pprof.Lookup("heap").WriteTo(f, 0)
						f.Close()
					}
				}()
			}
			cfg, err := serveConfigFrom(c)
			if err != nil {
				return err
			}
			return serve(ctx, log, cfg)
		},
	}
}

// serveConfigFrom reads serve's flags (and their environment variables), with
// every path made absolute from the working directory.
func serveConfigFrom(c *cli.Context) (serveConfig, error) {
	cfg := serveConfig{
		Listen: c.String("listen"), DataDir: c.String("data-dir"), NATSURL: c.String("nats-url"),
		NATSCreds: c.String("nats-creds"), NATSListen: c.String("nats-listen"), Replicas: c.Int("replicas"),
		ReplicasSet: c.IsSet("replicas"), Cluster: clusterFlagsFrom(c),
		TLS:        tlsFlags{CertFile: c.String("tls-cert"), KeyFile: c.String("tls-key"), SelfSigned: c.Bool("tls-self-signed")},
		AdminToken: c.String("admin-token"), SessionTTL: c.Duration("session-ttl"), AuditRetention: c.Duration("audit-retention"),
		AuditMaxBytes:   c.Int64("audit-max-bytes"),
		BodyReadTimeout: c.Duration("body-read-timeout"),
		MaxWatches:      c.Int("max-watches"), MaxWatchesPerUser: c.Int("max-watches-per-user"),
		CredentialTTL:          c.Duration("credential-ttl"),
		SigningKey:             os.Getenv("REZUSCLOUD_SESSION_SIGNING_KEY"),
		SecretsPassphrase:      os.Getenv("REZUSCLOUD_SECRETS_PASSPHRASE"),
		SecretsKeyFile:         c.String("secrets-key-file"),
		AutomationMaxConsumers: c.Int("automation-max-consumers"),
		Infra:                  infraConfigFrom(c),
		SSO:                    ssoConfigFrom(c),
	}
	for _, p := range splitList(c.String("trusted-proxies")) {
		_, n, err := net.ParseCIDR(p)
		if err != nil {
			return serveConfig{}, fmt.Errorf("--trusted-proxies: %q is not a CIDR (e.g. 10.0.0.0/8 or 192.0.2.7/32)", p)
		}
		cfg.TrustedProxies = append(cfg.TrustedProxies, n)
	}
	cwd, err := os.Getwd()
	if err != nil {
		return serveConfig{}, fmt.Errorf("finding the working directory for relative paths: %w", err)
	}
	cfg.absolutePaths(cwd)
	return cfg, nil
}

type serveConfig struct {
	Listen, DataDir, NATSURL, NATSCreds, NATSListen, AdminToken string
	// SigningKey overrides the generated session signing key (REZUSCLOUD_SESSION_SIGNING_KEY, >= 32 bytes).
	SigningKey string
	SessionTTL time.Duration
	// SecretsPassphrase seals secrets at rest (REZUSCLOUD_SECRETS_PASSPHRASE); when
	// empty the key in SecretsKeyFile does.
	SecretsPassphrase string
	// SecretsKeyFile is the sealing key's file (--secrets-key-file); empty
	// means <data-dir>/secrets.key.
	SecretsKeyFile string
	// AutomationMaxConsumers is each automation credential's consumer quota.
	AutomationMaxConsumers int
	TLS                    tlsFlags
	// BodyReadTimeout bounds the sending of a request body (handlers.BodyReadTimeout).
	BodyReadTimeout time.Duration
	// AuditRetention is how long audit records are kept.
	AuditRetention time.Duration
	// AuditMaxBytes bounds the audit stream's size.
	AuditMaxBytes int64
	// MaxWatches and MaxWatchesPerUser bound open watches and follows
	// (handlers.Config); MaxWatches also sets the event stream's consumer limit.
	MaxWatches, MaxWatchesPerUser int
	// CredentialTTL is the lifetime of per-user cluster credentials.
	CredentialTTL time.Duration
	// Replicas of streams and buckets; with Cluster and not ReplicasSet
	// (--replicas not given) it becomes min(3, nodes).
	Replicas    int
	ReplicasSet bool
	// Cluster makes the embedded NATS server one node of a cluster.
	Cluster clusterFlagsConfig
	// TrustedProxies are the reverse proxies whose X-Forwarded-For is believed.
	TrustedProxies []*net.IPNet
	// Infra configures the apply worker and the emulator.
	Infra infraConfig
	// SSO configures single sign-on and password login.
	SSO ssoConfig
	// ready, when set, receives the bound HTTP address once the server listens.
	ready func(addr string)
}

// sealerConfig says where the sealing key comes from: the passphrase, else
// --secrets-key-file (taking over a key left in the data dir), else the data dir.
func sealerConfig(cfg serveConfig) eventstore.SealerConfig {
	inDataDir := filepath.Join(cfg.DataDir, "secrets.key")
	if cfg.SecretsKeyFile == "" {
		return eventstore.SealerConfig{Passphrase: cfg.SecretsPassphrase, KeyFile: inDataDir}
	}
	return eventstore.SealerConfig{Passphrase: cfg.SecretsPassphrase, KeyFile: cfg.SecretsKeyFile, MoveKeyFrom: inDataDir}
}

func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}

// serve runs everything until ctx ends, then shuts down in order: stop
// accepting, end watches, finish in-flight requests, stop workers, flush NATS.
func serve(ctx context.Context, log *slog.Logger, cfg serveConfig) error {
	if cfg.SecretsKeyFile != "" && cfg.SecretsPassphrase != "" {
		return errors.New("--secrets-key-file and REZUSCLOUD_SECRETS_PASSPHRASE both say how to seal secrets: give one")
	}
	if cfg.CredentialTTL <= 0 || cfg.CredentialTTL > talos.MaxUserCredentialTTL {
		return fmt.Errorf("--credential-ttl (%s) must be more than 0 and at most %s", cfg.CredentialTTL, talos.MaxUserCredentialTTL)
	}
	if cfg.MaxWatches < 1 || cfg.MaxWatchesPerUser < 1 {
		return fmt.Errorf("--max-watches (%d) and --max-watches-per-user (%d) must be at least 1", cfg.MaxWatches, cfg.MaxWatchesPerUser)
	}
	if err := checkCluster(&cfg, cfg.ReplicasSet); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("creating data dir: %w", err)
	}
	if left := proctree.Orphans(); len(left) > 0 {
		// Provider plugins of a tofu that died with a server before us.
		proctree.Kill(left)
		log.Warn("ended processes a server that died left behind", "processes", fmt.Sprint(left))
	}
	tlsConfig, certFile, err := serverTLS(cfg.DataDir, cfg.TLS)
	if err != nil {
		return err
	}
	// The HTTP server listens before NATS is ready: a replica waiting for
	// its cluster answers probes (/readyz 503 with what it waits for).
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", cfg.Listen, err)
	}
	oidcCfg, ssoOn, err := cfg.SSO.oidcConfig(ln.Addr(), tlsConfig != nil)
	if err != nil {
		ln.Close()
		return err
	}
	starting := handlers.NewStarting()
	srv := &http.Server{Handler: starting, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, TLSConfig: tlsConfig}
	defer srv.Close()
	httpErr := make(chan error, 1)
	go func() {
		if tlsConfig != nil {
			httpErr <- srv.ServeTLS(ln, "", "")
		} else {
			httpErr <- srv.Serve(ln)
		}
	}()
	nc, emb, closeNATS, err := connectNATS(ctx, log, cfg)
	if err != nil {
		return err
	}
	defer closeNATS()

	var (
		store       *eventstore.Store
		audit       *eventstore.AuditLog
		automation  handlers.AutomationIssuer
		sealed      *eventstore.SealedSecrets
		stateStore  *eventstore.StateStore
		applyLogs   *tfrunner.Logs
		etcdBackups *eventstore.EtcdBackups
	)
	err = untilProvisioned(ctx, log, emb, starting, func() error {
		var err error
		if store, err = eventstore.Open(ctx, nc, eventstore.Config{Replicas: cfg.Replicas, MaxWatches: cfg.MaxWatches, Logger: log}); err != nil {
			return err
		}
		if audit, err = eventstore.OpenAudit(ctx, store, eventstore.AuditConfig{Retention: cfg.AuditRetention, MaxBytes: cfg.AuditMaxBytes, Logger: log}); err != nil {
			return err
		}
		// NATS credentials for external automation are issued only on a
		// single embedded server; with --nats-url, that cluster's operator
		// issues them, and the API says so. A cluster of embedded nodes
		// does not issue them yet: an account minted on one node would
		// be unknown to the others (docs/operations.md).
		if emb != nil && cfg.Cluster.Listen == "" {
			a, err := eventstore.OpenAutomation(ctx, store, emb, eventstore.AutomationConfig{Logger: log, MaxConsumers: cfg.AutomationMaxConsumers})
			if err != nil {
				return err
			}
			automation = a // not a nil *Automation in a non-nil interface
		}
		plainSecrets, err := eventstore.OpenSecrets(ctx, store)
		if err != nil {
			return err
		}
		if sealed, err = eventstore.OpenSealedSecrets(ctx, plainSecrets, sealerConfig(cfg)); err != nil {
			if errors.Is(err, eventstore.ErrWrongSealKey) {
				return fmt.Errorf("opening sealed secrets: %w; every replica needs the key the first one was given: "+
					"the same --secrets-key-file (REZUSCLOUD_SECRETS_KEY_FILE) or REZUSCLOUD_SECRETS_PASSPHRASE", err)
			}
			return fmt.Errorf("opening sealed secrets: %w", err)
		}
		if stateStore, err = eventstore.OpenStateStore(ctx, store); err != nil {
			return err
		}
		if applyLogs, err = tfrunner.OpenLogs(ctx, store); err != nil {
			return err
		}
		etcdBackups, err = eventstore.OpenEtcdBackups(ctx, store, sealed)
		return err
	})
	if errors.Is(err, errStopped) {
		log.Info("stopped before the server was ready")
		return nil
	}
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	holder := fmt.Sprintf("%s-%d", host, os.Getpid())
	cache := projections.NewCache(store, log)
	projector := projections.NewProjector(store, log, holder)
	finalizer := &projections.TenantFinalizer{Cache: cache, Store: store, Log: log}
	var ids *identity.Service
	err = untilProvisioned(ctx, log, emb, starting, func() error {
		var err error
		ids, err = identity.NewService(ctx, identity.Config{SecureCookies: tlsConfig != nil, Secrets: sealed,
			SessionTTL: cfg.SessionTTL, SigningKey: []byte(cfg.SigningKey), StaticToken: cfg.AdminToken, Log: log,
			DisablePasswordLogin: !cfg.SSO.PasswordLogin,
		}, store, cache)
		return err
	})
	if errors.Is(err, errStopped) {
		log.Info("stopped before the server was ready")
		return nil
	}
	if err != nil {
		return err
	}
	if ssoOn {
		if err := ids.EnableSSO(oidcCfg); err != nil {
			return err
		}
		log.Info("single sign-on on", "issuer", oidcCfg.Issuer, "callback", oidcCfg.RedirectURL, "passwordLogin", cfg.SSO.PasswordLogin)
	}
	pki := talos.NewPKI(talos.PKIConfig{Cache: cache, Secrets: sealed, Log: log})
	talosSvc := talos.NewService(cache, pki)
	kubeClients := kubeclient.New(talosSvc)
	healthSvc := health.New(health.Config{Cache: cache, PKI: pki, Store: store, Log: log,
		Kube: kubeClients, NoKube: noKube(drainSkip(cfg.Infra))})
	upgrades := upgrade.New(upgrade.Config{Store: store, Cache: cache, Bundles: pki, Configs: talosSvc, Holder: holder, Log: log,
		Kube: kubeClients, DrainSkip: drainSkip(cfg.Infra)})
	if p := cfg.Infra.StatePassphrase; p != "" {
		if _, err := tfrunner.EncryptionConfig(p); err != nil {
			return fmt.Errorf("REZUSCLOUD_STATE_PASSPHRASE: %w", err)
		}
	}
	apiDeps := handlers.Deps{
		Store: store, Cache: cache, Projector: projector, Finalizer: finalizer, Identity: ids, Audit: audit, Automation: automation, Talos: talosSvc, Log: log,
		State: stateStore, ApplyLogs: applyLogs, Health: healthSvc, MachineLogs: talos.NewLogReader(talos.LogConfig{Cache: cache, PKI: pki}),
		CancelApply: func(ctx context.Context, tenant, apply string) error { return tfrunner.Cancel(ctx, nc, tenant, apply) },
		Backup:      handlers.BackupFunc(onlineBackup(nc, emb, cfg.DataDir)),
		EtcdBackups: etcdBackups,
		KubeAccess:  kubeAccess{clients: kubeClients, noKube: noKube(drainSkip(cfg.Infra))},
	}
	if err := apiDeps.Validate(); err != nil {
		return err
	}
	// Module providers are checked against the providers tofu can install.
	modules, err := tfrunner.NewModuleChecker(cfg.Infra.ProviderMirror, cfg.Infra.AllowModuleExec)
	if err != nil {
		log.Warn("module providers' sources are not checked", "err", err)
	}
	workDir := filepath.Join(cfg.DataDir, "tofu")
	sandbox, err := tofuSandbox(ctx, log, cfg, workDir)
	if err != nil {
		return err
	}
	modules.Unsandboxed = sandbox == nil && cfg.Infra.TofuSandbox != "off"
	modules.NoMirror = cfg.Infra.ProviderMirror == "" && !cfg.Infra.AllowProviderDownloads
	api := handlers.New(handlers.Config{Version: version, ConsistentReads: cfg.NATSURL != "" || cfg.Cluster.Listen != "", RequireEncryptedState: true,
		MaxWatches: cfg.MaxWatches, MaxWatchesPerUser: cfg.MaxWatchesPerUser, Modules: modules, TrustedProxies: cfg.TrustedProxies,
		CredentialTTL: cfg.CredentialTTL, SSOErrorPage: webui.Prefix + "/login"}, apiDeps)

	// The state page decrypts state with the apply worker's keys (made below,
	// before the server answers any request).
	var worker *tfrunner.Worker
	decryptState := func(ctx context.Context, tenant string, blob []byte) ([]byte, error) {
		return worker.DecryptState(ctx, tenant, blob)
	}
	ui := webui.New(webui.Config{SecureCookies: tlsConfig != nil, Log: log}, webui.Deps{API: api.Handler(), Identity: ids, Cache: cache, DecryptState: decryptState, Streams: api})

	workCtx, stopWork := context.WithCancel(context.Background())
	defer stopWork()
	g, gctx := errgroup.WithContext(workCtx)
	g.Go(func() error { return cache.Run(gctx) })
	g.Go(func() error { return projector.Run(gctx) })
	g.Go(func() error { return finalizer.Run(gctx) })
	g.Go(func() error { return pki.Run(gctx) })
	ids.ExpectBootstrap()
	g.Go(func() error { return bootstrapAdmin(gctx, log, cache, ids, cfg) })
	var backendCA string
	if tlsConfig != nil && certFile != "" {
		pem, err := os.ReadFile(certFile)
		if err != nil {
			return fmt.Errorf("reading the certificate for tofu: %w", err)
		}
		backendCA = string(pem)
	}
	workerCfg := tfrunner.Config{
		Store: store, Cache: cache, Bundles: pki, Logs: applyLogs,
		Tofu:    tfrunner.Tofu{Bin: cfg.Infra.Tofu, Mirror: cfg.Infra.ProviderMirror, Sandbox: sandbox},
		WorkDir: workDir, BackendURL: backendURL(ln.Addr(), tlsConfig != nil), BackendCAPEM: backendCA,
		Credentials: ids, ProviderCredentials: ids, State: tfrunner.StoreState(stateStore),
		StatePassphrase: cfg.Infra.StatePassphrase, StateKeys: eventstore.NewStateKeys(sealed), Holder: holder, Log: log, Metal: talos.NodeAPI{}, Nodes: talos.NodeAPI{}, Upgrades: upgrades,
		Debounce: cfg.Infra.ApplyDebounce, Concurrency: cfg.Infra.ApplyConcurrency, Timeout: cfg.Infra.ApplyTimeout, Resync: cfg.Infra.Resync,
		Modules: modules, Observer: healthSvc, Kube: kubeClients, DrainSkip: drainSkip(cfg.Infra),
	}
	if err := workerCfg.Validate(); err != nil {
		return err
	}
	worker = tfrunner.NewWorker(workerCfg)
	if _, err := worker.Tofu().Path(); err != nil {
		log.Warn("applies will fail until tofu is available", "err", err)
	}
	g.Go(func() error { return worker.Run(gctx) })
	// tofu validate of module providers' modules, after every change.
	validatorCfg := tfrunner.ValidatorConfig{Store: store, Cache: cache, Tofu: workerCfg.Tofu, WorkDir: workerCfg.WorkDir, Holder: holder, Log: log}
	if err := validatorCfg.Validate(); err != nil {
		return err
	}
	validator := tfrunner.NewModuleValidator(validatorCfg)
	g.Go(func() error { return validator.Run(gctx) })
	g.Go(func() error { return upgrades.Run(gctx) })
	// Day 2: every running machine's config through the Talos API.
	configCfg := configsync.Config{Store: store, Cache: cache, Talos: talosSvc, Holder: holder, Log: log,
		Kube: kubeClients, DrainSkip: drainSkip(cfg.Infra)}
	if err := configCfg.Validate(); err != nil {
		return err
	}
	configs := configsync.New(configCfg)
	g.Go(func() error { return configs.Run(gctx) })
	// etcd backups of tenants, their schedules and restores.
	// A snapshot being taken is copied beside the data (it holds the
	// tenant's secrets), not into the shared temp dir; copies a crash left
	// behind are removed here.
	spoolDir, err := privateTempDir(filepath.Join(cfg.DataDir, "tmp"), "etcd-backup-*.db")
	if err != nil {
		return err
	}
	backupCfg := backup.Config{Store: store, Cache: cache, Backups: etcdBackups, PKI: pki, Holder: holder, Log: log, TempDir: spoolDir}
	if err := backupCfg.Validate(); err != nil {
		return err
	}
	backups := backup.New(backupCfg)
	g.Go(func() error { return backups.Run(gctx) })
	if cfg.Infra.WithEmulator {
		endpoint, err := startEmulator(gctx, log, cfg.DataDir, cfg.Infra, g.Go)
		if err != nil {
			return err
		}
		g.Go(func() error { return registerEmulatedProvider(gctx, store, cache, endpoint) })
	}
	// The sampler of refused anonymous requests outlives the workers: it
	// stops after the HTTP server's last request and before the audit log closes.
	samplerCtx, stopSampler := context.WithCancel(context.Background())
	defer stopSampler()
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		_ = api.RunAuditSampler(samplerCtx)
	}()
	starting.Ready(handlers.BodyReadTimeout(ui.Handler(api.Handler()), cfg.BodyReadTimeout))
	log.Info("serving", "addr", ln.Addr().String(), "dataDir", cfg.DataDir, "tls", tlsConfig != nil, "certificate", certFile)
	if cfg.ready != nil {
		cfg.ready(ln.Addr().String())
	}

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err := <-httpErr:
		runErr = fmt.Errorf("http server: %w", err)
	case <-gctx.Done():
		runErr = g.Wait()
	}
	api.StopWatches()
	ui.Close()
	shCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := srv.Shutdown(shCtx); err != nil {
		log.Warn("http shutdown", "err", err)
	}
	stopSampler()
	<-samplerDone
	if err := audit.Close(shCtx); err != nil {
		log.Warn("audit log flush", "err", err)
	}
	stopWork()
	if err := g.Wait(); err != nil && runErr == nil && !errors.Is(err, context.Canceled) {
		runErr = err
	}
	closeNATS()
	log.Info("stopped")
	return runErr
}

// bootstrapAdmin creates the first admin once the read model has caught up and
// shows there are no users. The generated password goes to a 0600 file, never
// to the log.
func bootstrapAdmin(ctx context.Context, log *slog.Logger, cache *projections.Cache, ids *identity.Service, cfg serveConfig) error {
	for !cache.Ready() {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(20 * time.Millisecond):
		}
	}
	file := filepath.Join(cfg.DataDir, "initial-admin-password")
	// A cluster slow to place the lease bucket (an election, a loaded
	// machine) is waited for, as the other parts' provisioning is: giving up
	// stopped a replica in CI. Bootstrap is safe to redo.
	var created bool
	err := eventstore.UntilClusterReady(ctx, func() error {
		var err error
		created, err = ids.Bootstrap(ctx, os.Getenv("REZUSCLOUD_ADMIN_PASSWORD"), file)
		return err
	})
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating the first admin: %w", err)
	}
	if created {
		if os.Getenv("REZUSCLOUD_ADMIN_PASSWORD") != "" {
			log.Info("created user admin with the password from REZUSCLOUD_ADMIN_PASSWORD")
		} else {
			log.Info("created user admin; its initial password is in a file readable only by this user", "file", file)
		}
	}
	return nil
}

// connectNATS connects to --nats-url or starts the embedded server under the
// data dir (returned too; nil with --nats-url). The returned func drains the
// connection and stops the embedded server; it is safe to call twice.
func connectNATS(ctx context.Context, log *slog.Logger, cfg serveConfig) (*nats.Conn, *eventstore.Embedded, func(), error) {
	if cfg.NATSURL != "" {
		opts := []nats.Option{nats.Name("rezuscloud"), nats.MaxReconnects(-1)}
		if cfg.NATSCreds != "" {
			opts = append(opts, nats.UserCredentials(cfg.NATSCreds))
		}
		nc, err := nats.Connect(cfg.NATSURL, opts...)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("connecting to %s: %w", cfg.NATSURL, err)
		}
		log.Info("connected to external NATS", "url", nc.ConnectedUrlRedacted())
		var once sync.Once
		return nc, nil, func() { once.Do(func() { drain(log, nc) }) }, nil
	}
	cluster, err := embeddedCluster(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	emb, err := eventstore.StartEmbedded(eventstore.EmbeddedConfig{DataDir: cfg.DataDir, Listen: cfg.NATSListen, Logger: log,
		ServerName: cfg.Cluster.NodeName, Cluster: cluster})
	if err != nil {
		return nil, nil, nil, err
	}
	nc, err := emb.Connect("rezuscloud")
	if err != nil {
		emb.Shutdown(ctx)
		return nil, nil, nil, fmt.Errorf("connecting to embedded NATS: %w", err)
	}
	if cluster != nil {
		log.Info("embedded NATS started as a cluster node", "dir", filepath.Join(cfg.DataDir, "nats"), "clientURL", emb.ClientURL(),
			"cluster", cluster.Name, "routes", cluster.Listen, "peers", cluster.Peers, "replicas", cfg.Replicas)
	} else {
		log.Info("embedded NATS started", "dir", filepath.Join(cfg.DataDir, "nats"), "clientURL", emb.ClientURL())
	}
	var once sync.Once
	return nc, emb, func() {
		once.Do(func() {
			drain(log, nc)
			shCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			emb.Shutdown(shCtx)
		})
	}, nil
}

// onlineBackup writes a backup of the running server's data for the admin
// API: through its own connection, with the embedded server's trust material.
func onlineBackup(nc *nats.Conn, emb *eventstore.Embedded, dataDir string) func(context.Context, io.Writer) error {
	keysDir := ""
	if emb != nil {
		keysDir = filepath.Join(dataDir, eventstore.KeysDir)
	}
	return func(ctx context.Context, w io.Writer) error {
		_, err := eventstore.WriteBackup(ctx, nc, w, backupConfig("online", keysDir))
		return err
	}
}

// drain flushes what the connection has pending and closes it.
func drain(log *slog.Logger, nc *nats.Conn) {
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	if err := nc.Drain(); err != nil {
		log.Warn("nats drain", "err", err)
		nc.Close()
		return
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		nc.Close()
	}
}

// privateTempDir makes dir (0700) and removes what a crashed process left in
// it under pattern.
func privateTempDir(dir, pattern string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("creating %s: %w", dir, err)
	}
	stale, err := filepath.Glob(filepath.Join(dir, pattern))
	if err != nil {
		return "", err
	}
	for _, f := range stale {
		if err := os.Remove(f); err != nil {
			return "", fmt.Errorf("removing %s, left by an earlier run: %w", f, err)
		}
	}
	return dir, nil
}
