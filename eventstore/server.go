package eventstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
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
	// MaxPayload is the largest message; default 32 MiB, so Terraform state blobs fit.
	MaxPayload int32
	// Logger receives the server's notices and errors; nil means discard.
	Logger *slog.Logger
}

// Embedded is a running in-process NATS server with JetStream.
type Embedded struct {
	srv *server.Server
}

// DefaultMaxPayload lets a 32 MiB Terraform state blob fit in one message.
const DefaultMaxPayload = 32 << 20

// StartEmbedded starts a NATS server with JetStream under cfg.DataDir and waits until it is ready.
func StartEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("embedded nats: data dir is required")
	}
	if cfg.ServerName == "" {
		cfg.ServerName = "rezuscloud"
	}
	if cfg.MaxPayload == 0 {
		cfg.MaxPayload = DefaultMaxPayload
	}
	opts := &server.Options{
		ServerName:         cfg.ServerName,
		JetStream:          true,
		StoreDir:           filepath.Join(cfg.DataDir, "nats"),
		MaxPayload:         cfg.MaxPayload,
		MaxPending:         int64(cfg.MaxPayload) * 4,
		NoSigs:             true,
		DontListen:         cfg.Listen == "",
		JetStreamMaxMemory: 256 << 20,
	}
	if cfg.Listen != "" {
		host, port, err := splitHostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("embedded nats: listen address %q: %w", cfg.Listen, err)
		}
		opts.Host, opts.Port = host, port
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	if cfg.Logger != nil {
		srv.SetLoggerV2(&slogAdapter{l: cfg.Logger.With("component", "nats")}, false, false, false)
	}
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("embedded nats: not ready after 30s")
	}
	return &Embedded{srv: srv}, nil
}

// Connect opens an in-process client connection.
func (e *Embedded) Connect(name string) (*nats.Conn, error) {
	return nats.Connect("", nats.InProcessServer(e.srv), nats.Name(name), nats.MaxReconnects(-1))
}

// ClientURL is the URL external clients use, or "" when no listener was asked for.
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
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
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

// slogAdapter routes the NATS server's log lines into slog.
type slogAdapter struct{ l *slog.Logger }

func (a *slogAdapter) Noticef(format string, v ...any) { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Warnf(format string, v ...any)   { a.l.Warn(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Fatalf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Errorf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Debugf(format string, v ...any)  { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Tracef(format string, v ...any)  {}
