package eventstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// EmbeddedConfig configures the in-process NATS server.
type EmbeddedConfig struct {
	// DataDir is the RezusCloud data dir; JetStream keeps its files under <DataDir>/nats.
	DataDir string
	// Listen, when set (host:port, port 0 for any), opens a client listener so
	// external automation can connect. Empty (the default) means in-process only.
	Listen string
	// ServerName names the server; default "rezuscloud".
	ServerName string
	// MaxPayload is the largest message; default DefaultMaxPayload (40 MiB), so
	// a Terraform state blob of MaxStateSize fits with its headers and framing.
	MaxPayload int32
	// Logger receives the server's notices and errors; nil means discard.
	Logger *slog.Logger
	// Cluster, when set, makes this server one node of a NATS cluster
	// (cluster.go); ServerName then defaults to <host name>-<route port>,
	// which must be unique in the cluster and stable across restarts.
	Cluster *ClusterConfig
}

// Embedded is a running in-process NATS server with JetStream, in operator
// (JWT) mode: see automation_trust.go for its accounts.
type Embedded struct {
	srv   *server.Server
	trust *trust
	// app is the JWT and seed of the server's own user of the REZUS account:
	// minted at every start, without restrictions, kept in memory only.
	appJWT  string
	appSeed []byte
	// sys is our connection to the system account, for account updates.
	sys *nats.Conn
	// updates serialises account updates so the server sees them in order.
	updates sync.Mutex
	// clusterSize is the number of nodes of the cluster, 0 for a single server.
	clusterSize int
	// refusedRoutes counts routes refused for bad credentials (cluster.go).
	refusedRoutes atomic.Int64
	// unlock releases the data dir's lock once the server has stopped.
	unlock func()
}

// DefaultMaxPayload lets a 32 MiB Terraform state blob (MaxStateSize) fit in one
// message with room to spare for headers and the direct-get reply's framing.
const DefaultMaxPayload = 40 << 20

// StartEmbedded starts a NATS server with JetStream under cfg.DataDir and waits until it is ready.
// The operator and account seeds live under <DataDir>/nats-keys (created on first start);
// JetStream data under <DataDir>/nats.
func StartEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("embedded nats: data dir is required")
	}
	var derived map[string][]byte
	if cfg.Cluster != nil {
		if err := cfg.Cluster.Validate(); err != nil {
			return nil, err
		}
		if cfg.ServerName == "" {
			host, _ := os.Hostname()
			_, port, _ := net.SplitHostPort(cfg.Cluster.Listen)
			cfg.ServerName = host + "-" + port
		}
		var err error
		if derived, err = derivedSeeds(cfg.Cluster.Secret); err != nil {
			return nil, fmt.Errorf("embedded nats: deriving the cluster's seeds: %w", err)
		}
	}
	if cfg.ServerName == "" {
		cfg.ServerName = "rezuscloud"
	}
	if cfg.MaxPayload == 0 {
		cfg.MaxPayload = DefaultMaxPayload
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded nats: creating the data dir: %w", err)
	}
	unlock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	e, err := startEmbedded(cfg, derived)
	if err != nil {
		unlock()
		return nil, err
	}
	e.unlock = unlock
	return e, nil
}

func startEmbedded(cfg EmbeddedConfig, derived map[string][]byte) (*Embedded, error) {
	tr, err := loadTrust(filepath.Join(cfg.DataDir, KeysDir), derived)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	storeDir := filepath.Join(cfg.DataDir, "nats")
	moved, err := migrateGlobalAccountStore(storeDir, tr.appPub)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	if moved && cfg.Logger != nil {
		cfg.Logger.Info("moved JetStream data from the global account to the application account", "account", tr.appPub)
	}
	opts := &server.Options{
		ServerName:         cfg.ServerName,
		JetStream:          true,
		StoreDir:           storeDir,
		MaxPayload:         cfg.MaxPayload,
		MaxPending:         int64(cfg.MaxPayload) * 4,
		NoSigs:             true,
		DontListen:         cfg.Listen == "",
		JetStreamMaxMemory: 256 << 20,
		TrustedOperators:   []*jwt.OperatorClaims{tr.operator},
		SystemAccount:      tr.sysPub,
		AccountResolver:    tr.resolver,
	}
	if cfg.Listen != "" {
		host, port, err := splitHostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("embedded nats: listen address %q: %w", cfg.Listen, err)
		}
		opts.Host, opts.Port = host, port
	}
	e := &Embedded{trust: tr}
	if cfg.Cluster != nil {
		if err := clusterOptions(opts, *cfg.Cluster); err != nil {
			return nil, fmt.Errorf("embedded nats: %w", err)
		}
		e.clusterSize = len(cfg.Cluster.Peers) + 1
		if cfg.Listen == "" {
			// The server starts routing only once its client listener is
			// open; a loopback one on any port takes no outside clients
			// (and every client needs a user JWT of our accounts).
			opts.DontListen, opts.Host, opts.Port = false, "127.0.0.1", server.RANDOM_PORT
		}
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	e.srv = srv
	// A cluster node reads its error lines for refused routes, with or
	// without a logger; a single server without one logs nothing, as before.
	if logger := cfg.Logger; logger != nil || cfg.Cluster != nil {
		if logger == nil {
			logger = slog.New(slog.DiscardHandler)
		}
		srv.SetLoggerV2(&slogAdapter{l: logger.With("component", "nats"), observe: routeRefusals{&e.refusedRoutes}.observe}, false, false, false)
	}
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("embedded nats: not ready after 30s")
	}
	if _, e.appJWT, e.appSeed, err = userJWT(tr.app, "rezuscloud", nil); err != nil {
		srv.Shutdown()
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	// Earlier versions wrote the server's full-access credentials here in
	// plain at every start; they are minted on demand now (MintCredentials).
	if err := os.Remove(legacyCredentialsPath(cfg.DataDir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		srv.Shutdown()
		return nil, fmt.Errorf("embedded nats: removing the old credentials file: %w", err)
	}
	if e.sys, err = e.connectAs(tr.sys, "rezuscloud-system"); err != nil {
		srv.Shutdown()
		return nil, fmt.Errorf("embedded nats: connecting to the system account: %w", err)
	}
	return e, nil
}

// Connect opens an in-process client connection to the application account,
// with full access to it.
func (e *Embedded) Connect(name string) (*nats.Conn, error) {
	return nats.Connect("", nats.InProcessServer(e.srv), nats.Name(name), nats.MaxReconnects(-1),
		nats.UserJWTAndSeed(e.appJWT, string(e.appSeed)))
}

// connectAs opens an in-process connection as a fresh user of an account.
func (e *Embedded) connectAs(account nkeys.KeyPair, name string, opts ...nats.Option) (*nats.Conn, error) {
	_, token, seed, err := userJWT(account, name, nil)
	if err != nil {
		return nil, err
	}
	opts = append([]nats.Option{nats.InProcessServer(e.srv), nats.Name(name), nats.MaxReconnects(-1),
		nats.UserJWTAndSeed(token, string(seed))}, opts...)
	return nats.Connect("", opts...)
}

// ClientURL is the URL external clients use, or "" when no listener was
// asked for (a cluster node always has one, on loopback unless Listen says otherwise).
func (e *Embedded) ClientURL() string {
	if e.srv.Addr() == nil {
		return ""
	}
	return e.srv.ClientURL()
}

// Shutdown stops the server after flushing JetStream to disk, and waits for it.
func (e *Embedded) Shutdown(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		if e.sys != nil {
			e.sys.Close()
		}
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
		if e.unlock != nil {
			e.unlock()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func splitHostPort(addr string) (string, int, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	var port int
	if _, err := fmt.Sscanf(portStr, "%d", &port); err != nil {
		return "", 0, fmt.Errorf("bad port %q", portStr)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	return host, port, nil
}

// slogAdapter routes the NATS server's log lines into slog; observe, when
// set, sees every error line.
type slogAdapter struct {
	l       *slog.Logger
	observe func(line string)
}

func (a *slogAdapter) Noticef(format string, v ...any) { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Warnf(format string, v ...any) {
	// The routes' certificate chains are verified (route_tls.go); only
	// their names are not, as routes dial addresses. NATS warns of any
	// InsecureSkipVerify as if nothing were.
	if format == routeInsecureWarning {
		return
	}
	a.l.Warn(fmt.Sprintf(format, v...))
}

// routeInsecureWarning is nats-server's warning of a route TLS config with
// InsecureSkipVerify (clusterTLSInsecureWarning).
const routeInsecureWarning = "TLS certificate chain and hostname of solicited routes will not be verified. DO NOT USE IN PRODUCTION!"

func (a *slogAdapter) Fatalf(format string, v ...any) { a.l.Error(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Errorf(format string, v ...any) {
	line := fmt.Sprintf(format, v...)
	if a.observe != nil {
		a.observe(line)
	}
	a.l.Error(line)
}
func (a *slogAdapter) Debugf(format string, v ...any) { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Tracef(format string, v ...any) {}
