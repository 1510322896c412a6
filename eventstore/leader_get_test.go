package eventstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/eventstore"
)

// A stream without a leader leaves a leader read unanswered: every server
// listens on the API subject, so there is no "no responders" either. A
// caller without a deadline (the data-format check at start) waited for
// good: a replica of a fresh three-node cluster hung there for its whole
// 2-minute start (CI, TestThreeReplicasSurviveTheLossOfTheApplyingOne).
// The read ends with a NoLeaderError, which Load and ClusterNotReady
// retry and the API answers with 503 (the rolling upgrade e2e saw a 500).
func TestLeaderReadWithoutALeaderEnds(t *testing.T) {
	eventstore.SetLeaderGetTimeout(t, 200*time.Millisecond)
	srv, err := server.NewServer(&server.Options{DontListen: true, NoSigs: true})
	require.NoError(t, err)
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	require.True(t, srv.ReadyForConnections(10*time.Second))
	nc, err := nats.Connect("", nats.InProcessServer(srv))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	// What a server does while the stream has no leader: hears, never answers.
	heard := make(chan struct{}, 1)
	sub, err := nc.Subscribe("$JS.API.STREAM.MSG.GET.KV_x", func(*nats.Msg) {
		select {
		case heard <- struct{}{}:
		default:
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, nc.Flush())

	// Without a deadline (the data-format check at start), and with a long
	// one (an apply run's 30 minutes, which a run waited out in Planning).
	long, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	for _, ctx := range []context.Context{context.Background(), long} {
		_, err = eventstore.LeaderLastMsg(ctx, nc, "KV_x", "$KV.x.k")
		var noLeader *eventstore.NoLeaderError
		require.ErrorAs(t, err, &noLeader)
		require.ErrorIs(t, err, nats.ErrTimeout, "retried by Load as a timeout")
		require.True(t, eventstore.ClusterNotReady(err), "retried as a cluster not ready yet: %v", err)
		<-heard
	}
}

// The 503 of nats.go's own APIError (a KV watch's consumer returns it
// while the cluster has no quorum) is a cluster not ready, which a lease's
// work may end with without ending the server (CI: a replica cut off from
// the others exited on its module validator's queue watch).
func TestNATSAPIErrorUnavailableIsNotReady(t *testing.T) {
	err := fmt.Errorf("watching queue q: %w", &nats.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"})
	require.True(t, eventstore.ClusterNotReady(err))
	require.False(t, eventstore.ClusterNotReady(fmt.Errorf("x: %w", &nats.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use"})))
}
