package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/handlers"
)

// clusterFlags make the embedded NATS server one node of a cluster of
// replicas (docs/operations.md).
func clusterFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "cluster-name", Value: "rezuscloud", EnvVars: []string{"REZUSCLOUD_CLUSTER_NAME"}, Usage: "the embedded NATS cluster's name, the same on every replica (with --cluster-listen)"},
		&cli.StringFlag{Name: "cluster-listen", EnvVars: []string{"REZUSCLOUD_CLUSTER_LISTEN"}, Usage: "make the embedded NATS server one node of a cluster: its route listener (host:port, e.g. 0.0.0.0:6222); needs --peers and a shared --secrets-key-file or REZUSCLOUD_SECRETS_PASSPHRASE"},
		&cli.StringFlag{Name: "peers", EnvVars: []string{"REZUSCLOUD_PEERS"}, Usage: "the other replicas' route addresses, comma-separated host:port (with --cluster-listen)"},
		&cli.StringFlag{Name: "cluster-advertise", EnvVars: []string{"REZUSCLOUD_CLUSTER_ADVERTISE"}, Usage: "the route address (host:port) the other nodes learn for this node and reconnect to when a route drops; default --cluster-listen's. Behind NAT or proxies, the address they can reach"},
		&cli.StringFlag{Name: "node-name", EnvVars: []string{"REZUSCLOUD_NODE_NAME"}, Usage: "this replica's NATS server name, unique in the cluster and stable across restarts; default <host name>-<route port>"},
		allPeersFlag(),
	}
}

// clusterFlagsConfig is what the cluster flags say, before it is checked.
type clusterFlagsConfig struct {
	Name, Listen, NodeName string
	Peers                  []string
	Advertise              string
}

func clusterFlagsFrom(c *cli.Context) clusterFlagsConfig {
	peers := splitList(c.String("peers"))
	if all := splitList(c.String("all-peers")); len(all) > 0 {
		host, _ := os.Hostname()
		peers = append(peers, withoutSelf(all, host)...)
	}
	return clusterFlagsConfig{Name: c.String("cluster-name"), Listen: c.String("cluster-listen"), NodeName: c.String("node-name"), Peers: peers,
		Advertise: c.String("cluster-advertise")}
}

// checkCluster refuses contradicting flags and sets the replica count: with
// a cluster, streams and buckets get min(3, nodes) replicas unless
// --replicas says otherwise (replicasSet).
func checkCluster(cfg *serveConfig, replicasSet bool) error {
	cl := cfg.Cluster
	if cl.Listen == "" {
		if len(cl.Peers) > 0 {
			return errors.New("--peers needs --cluster-listen: the route listener of this replica")
		}
		if cl.NodeName != "" {
			return errors.New("--node-name needs --cluster-listen")
		}
		return nil
	}
	if cfg.NATSURL != "" {
		return errors.New("--cluster-listen makes this replica embed a node of a NATS cluster and --nats-url connects to an external one: give one of them")
	}
	if cfg.SecretsKeyFile == "" && cfg.SecretsPassphrase == "" {
		return errors.New("--cluster-listen needs the secrets key every replica shares: give the same --secrets-key-file (REZUSCLOUD_SECRETS_KEY_FILE) or REZUSCLOUD_SECRETS_PASSPHRASE to each (docs/operations.md)")
	}
	if err := (eventstore.ClusterConfig{Name: cl.Name, Listen: cl.Listen, Peers: cl.Peers, Secret: make([]byte, 32)}).Validate(); err != nil {
		return err
	}
	nodes := len(cl.Peers) + 1
	if !replicasSet {
		cfg.Replicas = min(3, nodes)
	}
	if cfg.Replicas < 1 || cfg.Replicas > nodes {
		return fmt.Errorf("--replicas %d: the cluster has %d nodes (this one and --peers)", cfg.Replicas, nodes)
	}
	return nil
}

// embeddedCluster is the cluster part of the embedded server's config: the
// flags, and the secret read from the secrets key.
func embeddedCluster(cfg serveConfig) (*eventstore.ClusterConfig, error) {
	if cfg.Cluster.Listen == "" {
		return nil, nil
	}
	secret, err := eventstore.ClusterSecret(sealerConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("reading the secrets key the replicas share (--secrets-key-file, REZUSCLOUD_SECRETS_KEY_FILE): %w; "+
			"create it once (head -c 32 /dev/urandom > key && chmod 600 key) and give every replica a copy", err)
	}
	return &eventstore.ClusterConfig{Name: cfg.Cluster.Name, Listen: cfg.Cluster.Listen, Peers: cfg.Cluster.Peers, Secret: secret,
		Advertise: cfg.Cluster.Advertise}, nil
}

// errStopped says the server was asked to stop before it was ready.
var errStopped = errors.New("stopped while starting")

// untilProvisioned runs provision until it succeeds. On a cluster that is
// still forming (no meta leader yet, too few peers for the streams'
// replicas) it waits and tries again, saying what it waits for in the log
// and on /readyz, instead of exiting: replicas start in any order.
func untilProvisioned(ctx context.Context, log *slog.Logger, emb *eventstore.Embedded, starting *handlers.Starting, provision func() error) error {
	var lastLog time.Time
	for {
		err := provision()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return errStopped
		}
		if emb == nil || !emb.ClusterStatus().Clustered || !eventstore.ClusterNotReady(err) {
			return err
		}
		st := emb.ClusterStatus()
		msg := st.String()
		starting.SetStatus(msg)
		if time.Since(lastLog) >= 5*time.Second {
			lastLog = time.Now()
			if st.RefusedRoutes > 0 {
				log.Error(msg, "err", err)
			} else {
				log.Info(msg, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return errStopped
		case <-time.After(time.Second):
		}
	}
}
