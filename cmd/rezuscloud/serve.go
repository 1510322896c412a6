package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
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
	"github.com/rezuscloud/rezuscloud/projections"
	"github.com/rezuscloud/rezuscloud/talos"
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
			&cli.IntFlag{Name: "write-schema-level", EnvVars: []string{"REZUSCLOUD_WRITE_SCHEMA_LEVEL"}, Usage: "the highest storage schema level this replica writes (1 = what 0.1.0 reads); default: the lowest level of the running replicas' heartbeats. Set it to 1 with --nats-url while a 0.1.0 replica runs: it does not beat and cannot be seen"},
			&cli.DurationFlag{Name: "session-ttl", Value: 12 * time.Hour, EnvVars: []string{"REZUSCLOUD_SESSION_TTL"}, Usage: "how long a login lasts"},
			&cli.IntFlag{Name: "gc-percent", Value: 50, Usage: "Go GC target (GOGC) when the GOGC environment variable is unset; 50 keeps the heap near 1.5x live data (see docs/benchmarks.md)"},
			&cli.StringFlag{Name: "trusted-proxies", EnvVars: []string{"REZUSCLOUD_TRUSTED_PROXIES"}, Usage: "reverse proxies (comma-separated CIDRs) whose X-Forwarded-For names the client, for the audit trail and the login limiter; default none: the peer's address counts and the header is ignored"},
			metalNetworksFlag,
			ssoFlags[0], ssoFlags[1], ssoFlags[2], ssoFlags[3], ssoFlags[4], ssoFlags[5], ssoFlags[6], ssoFlags[7],
			&cli.DurationFlag{Name: "shutdown-grace", Value: DefaultShutdownGrace, EnvVars: []string{"REZUSCLOUD_SHUTDOWN_GRACE"}, Usage: "how long a shutdown (SIGTERM) may take as a lame duck: not ready, leases handed over, watches ended resumably, in-flight requests finished, the NATS node stopped"},
			&cli.StringFlag{Name: "cpu-profile", Usage: "write a CPU profile to this file until shutdown (for benchmarking)"},
			&cli.StringFlag{Name: "mem-profile", Usage: "write a heap profile to this file at shutdown (for benchmarking)"},
		}, append(append(infraFlags(), clusterFlags()...), autoscalerFlags()...)...),
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
		WriteSchemaLevel:       c.Int("write-schema-level"),
		CredentialTTL:          c.Duration("credential-ttl"),
		ShutdownGrace:          c.Duration("shutdown-grace"),
		SigningKey:             os.Getenv("REZUSCLOUD_SESSION_SIGNING_KEY"),
		SecretsPassphrase:      os.Getenv("REZUSCLOUD_SECRETS_PASSPHRASE"),
		SecretsKeyFile:         c.String("secrets-key-file"),
		AutomationMaxConsumers: c.Int("automation-max-consumers"),
		Infra:                  infraConfigFrom(c),
		SSO:                    ssoConfigFrom(c),
		Autoscaler:             autoscalerConfigFrom(c),
	}
	for _, p := range splitList(c.String("trusted-proxies")) {
		_, n, err := net.ParseCIDR(p)
		if err != nil {
			return serveConfig{}, fmt.Errorf("--trusted-proxies: %q is not a CIDR (e.g. 10.0.0.0/8 or 192.0.2.7/32)", p)
		}
		cfg.TrustedProxies = append(cfg.TrustedProxies, n)
	}
	if path := c.String("emulator-env"); path != "" {
		if cfg.Infra.WithEmulator {
			return serveConfig{}, errors.New("--emulator-env and --with-emulator: one emulator, either apart or in this process")
		}
		apart, err := readEmulatorEnv(path)
		if err != nil {
			return serveConfig{}, err
		}
		cfg.Infra.Apart = apart
	}
	metal, err := metalAddressPolicy(c.String("metal-networks"), cfg.Infra.emulated())
	if err != nil {
		return serveConfig{}, err
	}
	cfg.MetalAddresses = metal
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
	// WriteSchemaLevel caps the storage schema level written
	// (eventstore.ReplicasConfig.WriteLevel); 0: the heartbeats decide.
	WriteSchemaLevel int
	// CredentialTTL is the lifetime of per-user cluster credentials.
	CredentialTTL time.Duration
	// ShutdownGrace bounds the lame-duck shutdown (lameduck.go); default
	// DefaultShutdownGrace.
	ShutdownGrace time.Duration
	// Replicas of streams and buckets; with Cluster and not ReplicasSet
	// (--replicas not given) it becomes min(3, nodes).
	Replicas    int
	ReplicasSet bool
	// Cluster makes the embedded NATS server one node of a cluster.
	Cluster clusterFlagsConfig
	// TrustedProxies are the reverse proxies whose X-Forwarded-For is believed.
	TrustedProxies []*net.IPNet
	// MetalAddresses is the rule for metal machine addresses
	// (--metal-networks, --with-emulator), for the API and the apply worker.
	MetalAddresses talos.AddressPolicy
	// Infra configures the apply worker and the emulator.
	Infra infraConfig
	// SSO configures single sign-on and password login.
	SSO ssoConfig
	// Autoscaler is the cluster-autoscaler's service (--autoscaler-listen).
	Autoscaler autoscalerConfig
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

// serve runs everything until ctx ends, then shuts down as a lame duck
// (lameduck.go): not ready, leases handed over, watches ended resumably,
// in-flight requests finished, workers stopped, the NATS node stopped.
// The start-up is a row of named stages (serve_stages.go), each building on
// what the one before made.
func serve(ctx context.Context, log *slog.Logger, cfg serveConfig) error {
	if err := checkServeConfig(&cfg); err != nil {
		return err
	}
	s := &serveRun{cfg: cfg, log: log}
	if err := s.prepareDataDir(); err != nil {
		return err
	}
	if err := s.listen(); err != nil {
		return err
	}
	defer s.srv.Close()
	if err := s.connectNATS(ctx); err != nil {
		return err
	}
	defer s.closeNATS(context.Background())
	err := s.openStores(ctx)
	if err == nil {
		err = s.checkFormat(ctx)
	}
	if err == nil {
		err = s.openIdentity(ctx)
	}
	if errors.Is(err, errStopped) {
		log.Info("stopped before the server was ready")
		return nil
	}
	if err != nil {
		return err
	}
	if err := s.buildServices(ctx); err != nil {
		return err
	}
	workCtx, stopWork := context.WithCancel(context.Background())
	defer stopWork()
	g, gctx := errgroup.WithContext(workCtx)
	if err := s.startWorkers(gctx, g); err != nil {
		return err
	}
	return s.run(ctx, g, gctx, stopWork)
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
// connection and stops the embedded server, a cluster node in NATS's lame
// duck mode, within its ctx and at most 20 s; it is safe to call twice.
func connectNATS(ctx context.Context, log *slog.Logger, cfg serveConfig) (*nats.Conn, *eventstore.Embedded, func(context.Context), error) {
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
		return nc, nil, func(context.Context) { once.Do(func() { drain(log, nc) }) }, nil
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
	return nc, emb, func(ctx context.Context) {
		once.Do(func() {
			drain(log, nc)
			shCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			emb.LameDuck(shCtx)
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
