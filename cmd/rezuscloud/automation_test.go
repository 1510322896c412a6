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
	p := startServer(t, t.TempDir(), "--nats-listen", "127.0.0.1:0")
	code, body := p.do(http.MethodPost, "/api/v1/automation-credentials", `{"metadata":{"name":"ci-bot"}}`)
	require.Equal(t, http.StatusCreated, code, body)
	require.Regexp(t, `^nats://127\.0\.0\.1:[1-9][0-9]*$`, body["natsURL"], "the port the listener got, not the 0 it was asked for")
	require.Contains(t, p.log(), `"clientURL":"`+body["natsURL"].(string)+`"`, "the log says the same")
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
