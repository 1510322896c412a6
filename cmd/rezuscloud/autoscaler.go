package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/rezuscloud/rezuscloud/autoscaling"
	"github.com/rezuscloud/rezuscloud/autoscaling/externalgrpc"
)

// autoscalerConfig is the cluster-autoscaler's externalgrpc listener.
type autoscalerConfig struct {
	// Listen is the gRPC listener's address; empty: not served.
	Listen string
	// Hosts are the names and addresses in the service's certificate.
	Hosts []string
	// Endpoint is the address autoscalers dial (the cloud-config's
	// address); EndpointDefault says it was not given: the bound address.
	Endpoint        string
	EndpointDefault bool
}

func autoscalerFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "autoscaler-listen", EnvVars: []string{"REZUSCLOUD_AUTOSCALER_LISTEN"}, Usage: "serve the cluster-autoscaler's externalgrpc cloud provider on this address (host:port; mutual TLS with a client certificate per tenant); off by default"},
		&cli.StringFlag{Name: "autoscaler-hosts", EnvVars: []string{"REZUSCLOUD_AUTOSCALER_HOSTS"}, Usage: "names and addresses (comma-separated) the autoscaler service's certificate carries; default localhost, 127.0.0.1, this host's name and the listen host"},
		&cli.StringFlag{Name: "autoscaler-endpoint", EnvVars: []string{"REZUSCLOUD_AUTOSCALER_ENDPOINT"}, Usage: "the address autoscalers dial (host:port), written into their cloud-config; default --autoscaler-listen"},
	}
}

func autoscalerConfigFrom(c *cli.Context) autoscalerConfig {
	cfg := autoscalerConfig{Listen: c.String("autoscaler-listen"), Hosts: splitList(c.String("autoscaler-hosts")), Endpoint: c.String("autoscaler-endpoint")}
	cfg.EndpointDefault = cfg.Endpoint == ""
	if len(cfg.Hosts) == 0 && cfg.Listen != "" {
		cfg.Hosts = []string{"localhost", "127.0.0.1"}
		if h, err := os.Hostname(); err == nil {
			cfg.Hosts = append(cfg.Hosts, h)
		}
		if h, _, err := net.SplitHostPort(cfg.Listen); err == nil && h != "" {
			cfg.Hosts = append(cfg.Hosts, h)
		}
	}
	return cfg
}

// startAutoscaler serves the externalgrpc service in g until ctx ends
// (every replica serves it: each answers from its read model and writes
// through the store).
func startAutoscaler(ctx context.Context, g *errgroup.Group, log *slog.Logger, cfg autoscalerConfig, ln net.Listener, svc *autoscaling.Service, pki *autoscaling.PKI) error {
	tlsCfg, err := pki.ServerTLS(ctx, cfg.Hosts)
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("the autoscaler service's certificate: %w", err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(tlsCfg)), grpc.MaxRecvMsgSize(1<<20),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: 15 * time.Minute}))
	externalgrpc.RegisterCloudProviderServer(srv, svc)
	log.Info("serving the cluster-autoscaler (externalgrpc)", "addr", ln.Addr().String(), "hosts", cfg.Hosts)
	g.Go(func() error {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("autoscaler service: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		done := make(chan struct{})
		go func() { srv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			srv.Stop()
		}
		return nil
	})
	return nil
}
