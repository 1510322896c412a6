//go:build !e2e && !browser

package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/eventstore"
)

// Issue 13, defect 4: the event stream's consumer limit is --max-watches plus
// a reserve for the server's own consumers, and what a running server holds
// fits that reserve with room to spare (for replays and more replicas).
func TestInternalConsumersFitTheReserve(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, MaxPayload: 8 << 20})
	require.NoError(t, err)
	go ns.Start()
	require.True(t, ns.ReadyForConnections(10*time.Second))
	t.Cleanup(ns.Shutdown)

	p := startServer(t, t.TempDir(), "--nats-url", ns.ClientURL(), "--max-watches", "40")
	code, _ := p.do(http.MethodPost, "/api/v1/tenants", `{"metadata":{"name":"acme"}}`)
	require.Equal(t, http.StatusCreated, code)

	nc, err := nats.Connect(ns.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, eventstore.StreamName)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, 40+eventstore.InternalConsumerReserve, info.Config.MaxConsumers)
	var names []string
	for c := range st.ListConsumers(ctx).Info() {
		names = append(names, c.Name+" "+c.Config.Durable+" "+c.Config.FilterSubject)
	}
	t.Logf("%d consumers on %s with no watch open:\n%v", len(names), eventstore.StreamName, names)
	require.LessOrEqual(t, len(names), eventstore.InternalConsumerReserve/4,
		"the server's own consumers must fit a quarter of the reserve: raise InternalConsumerReserve (and say why)")
}
