//go:build !e2e && !browser

package main

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

func TestServeIssuesAutomationCredentials(t *testing.T) {
	natsAddr := freePort(t)
	p := startServer(t, t.TempDir(), "--nats-listen", natsAddr)
	code, body := p.do(http.MethodPost, "/api/v1/automation-credentials", `{"metadata":{"name":"ci-bot"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	require.Equal(t, "nats://"+natsAddr, body["natsURL"])
	file := filepath.Join(t.TempDir(), "ci.creds")
	require.NoError(t, os.WriteFile(file, []byte(body["creds"].(string)), 0o600))
	nc, err := nats.Connect(body["natsURL"].(string), nats.UserCredentials(file))
	require.NoError(t, err)
	defer nc.Close()
	sub, err := nc.SubscribeSync("rezus.evt.>")
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	code, _ = p.do(http.MethodPost, "/api/v1/tenants", `{"metadata":{"name":"acme"}}`)
	require.Equal(t, http.StatusCreated, code)
	m, err := sub.NextMsg(10 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "rezus.evt.tenant._.acme", m.Subject)
}
