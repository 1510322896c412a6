// Package eventstoretest starts a real embedded NATS JetStream server in a test's
// temp dir and opens the event store on it. Tests use it instead of mocking NATS.
package eventstoretest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rezuscloud/rezuscloud/eventstore"
)

// Env is a running embedded server with an open store.
type Env struct {
	Dir      string
	Embedded *eventstore.Embedded
	Conn     *nats.Conn
	Store    *eventstore.Store
}

// Start starts a server under t.TempDir() (or dir, when given) and stops it when the test ends.
func Start(t testing.TB, dir ...string) *Env {
	t.Helper()
	d := ""
	if len(dir) > 0 {
		d = dir[0]
	} else {
		d = t.TempDir()
	}
	emb, err := eventstore.StartEmbedded(eventstore.EmbeddedConfig{DataDir: d})
	if err != nil {
		t.Fatalf("starting embedded nats: %v", err)
	}
	nc, err := emb.Connect("test")
	if err != nil {
		emb.Shutdown(context.Background())
		t.Fatalf("connecting: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := eventstore.Open(ctx, nc, eventstore.Config{})
	if err != nil {
		nc.Close()
		emb.Shutdown(context.Background())
		t.Fatalf("opening store: %v", err)
	}
	env := &Env{Dir: d, Embedded: emb, Conn: nc, Store: store}
	t.Cleanup(env.Stop)
	return env
}

// Stop closes the connection and shuts the server down; safe to call twice.
func (e *Env) Stop() {
	if e.Conn != nil {
		e.Conn.Close()
		e.Conn = nil
	}
	if e.Embedded != nil {
		e.Embedded.Shutdown(context.Background())
		e.Embedded = nil
	}
}
