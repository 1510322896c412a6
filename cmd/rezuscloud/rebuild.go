package main

import (
	"context"
	"fmt"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/handlers"
	"github.com/rezuscloud/rezuscloud/projections"
)

func rebuildCommand() *cli.Command {
	return &cli.Command{
		Name:  "rebuild-projections",
		Usage: "drop the KV projections and replay the event stream into them (stop the server first when using the embedded NATS)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data-dir", Value: "./data", EnvVars: []string{"REZUSCLOUD_DATA_DIR"}},
			&cli.StringFlag{Name: "nats-url", EnvVars: []string{"REZUSCLOUD_NATS_URL"}},
			&cli.IntFlag{Name: "replicas", Value: 1, EnvVars: []string{"REZUSCLOUD_REPLICAS"}},
			// As serve has it: opening the store sets the stream's consumer limit.
			&cli.IntFlag{Name: "max-watches", Value: handlers.DefaultMaxWatches, EnvVars: []string{"REZUSCLOUD_MAX_WATCHES"}},
		},
		Action: func(c *cli.Context) error {
			ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			log, _ := newLogger("info")
			nc, _, closeNATS, err := connectNATS(ctx, log, serveConfig{DataDir: c.String("data-dir"), NATSURL: c.String("nats-url")})
			if err != nil {
				return err
			}
			defer closeNATS(context.Background())
			store, err := eventstore.Open(ctx, nc, eventstore.Config{Replicas: c.Int("replicas"), MaxWatches: c.Int("max-watches"), Logger: log})
			if err != nil {
				return err
			}
			p := projections.NewProjector(store, log, "rebuild")
			if err := p.Rebuild(ctx); err != nil {
				return err
			}
			_, last, err := store.Bounds(ctx)
			if err != nil {
				return err
			}
			runCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- p.Run(runCtx) }()
			start := time.Now()
			for p.Checkpoint() < last {
				select {
				case err := <-done:
					return fmt.Errorf("projector stopped: %v", err)
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(20 * time.Millisecond):
				}
			}
			cancel()
			<-done
			fmt.Printf("rebuilt the projections from %d events in %s\n", last, time.Since(start).Round(time.Millisecond))
			return nil
		},
	}
}
