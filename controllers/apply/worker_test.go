package apply

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
	"github.com/rezuscloud/rezuscloud/tofu"
)

func TestCLIConfig(t *testing.T) {
	mirror := t.TempDir()
	for _, p := range []string{"registry.opentofu.org/rezuscloud/emulated/0.1.0/linux_amd64", "registry.opentofu.org/terraform-provider-openstack/openstack/3.4.0/linux_amd64"} {
		require.NoError(t, os.MkdirAll(filepath.Join(mirror, p), 0o755))
	}
	tests := []struct {
		name    string
		tofu    tofu.Binary
		want    []string
		notWant []string
		err     string
	}{
		{"no mirror: every provider from its registry", tofu.Binary{}, []string{`plugin_cache_dir = "/cache"`, "plugin_cache_may_break_dependency_lock_file = true"}, []string{"provider_installation"}, ""},
		{"mirror: its providers from it, the rest direct", tofu.Binary{Mirror: mirror}, []string{
			`path    = "` + mirror + `"`,
			`include = ["registry.opentofu.org/rezuscloud/emulated", "registry.opentofu.org/terraform-provider-openstack/openstack"]`,
			`exclude = ["registry.opentofu.org/rezuscloud/emulated", "registry.opentofu.org/terraform-provider-openstack/openstack"]`,
		}, nil, ""},
		{"empty mirror is an error", tofu.Binary{Mirror: t.TempDir()}, nil, nil, "holds no providers"},
		{"missing mirror is an error", tofu.Binary{Mirror: filepath.Join(mirror, "nope")}, nil, nil, "reading provider mirror"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.tofu.CLIConfig("/cache")
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			for _, w := range tc.want {
				require.Contains(t, got, w)
			}
			for _, w := range tc.notWant {
				require.NotContains(t, got, w)
			}
		})
	}
}

func TestTofuMissingSaysHowToFixIt(t *testing.T) {
	_, err := tofu.Binary{Bin: filepath.Join(t.TempDir(), "tofu")}.Path()
	require.ErrorIs(t, err, tofu.ErrTofuMissing)
	require.ErrorContains(t, err, "--tofu")
	require.ErrorContains(t, err, "go tool task tools")
}

func TestEnqueueMergesSourcesAndKeepsFirst(t *testing.T) {
	env := eventstoretest.Start(t)
	ctx := context.Background()
	kv, err := openQueue(ctx, env.Store)
	require.NoError(t, err)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range domain.MaxApplySources + 5 {
		require.NoError(t, enqueue(ctx, kv, "acme", fmt.Sprintf("NodeGroup/w@%d", i), t0.Add(time.Duration(i)*time.Second)))
	}
	require.NoError(t, enqueue(ctx, kv, "acme", "NodeGroup/w@24", t0.Add(time.Hour)), "a repeated source is not listed twice")
	e, err := kv.Get(ctx, "acme")
	require.NoError(t, err)
	var q queueEntry
	require.NoError(t, json.Unmarshal(e.Value(), &q))
	require.Equal(t, t0, q.First.UTC())
	require.Equal(t, t0.Add(time.Hour), q.Last.UTC())
	require.Len(t, q.Sources, domain.MaxApplySources)
	require.Equal(t, "NodeGroup/w@5", q.Sources[0], "the oldest sources make room")
	require.Equal(t, "NodeGroup/w@24", q.Sources[len(q.Sources)-1])

	// Concurrent writers all land.
	errs := make(chan error, 10)
	for i := range 10 {
		go func() { errs <- enqueue(ctx, kv, "busy", fmt.Sprintf("s%d", i), t0) }()
	}
	for range 10 {
		require.NoError(t, <-errs)
	}
	e, err = kv.Get(ctx, "busy")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(e.Value(), &q))
	require.Len(t, q.Sources, 10)
}

func TestBackoffGrowsAndIsCapped(t *testing.T) {
	w := NewWorker(Config{BackoffBase: time.Second, BackoffMax: 30 * time.Second})
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 10: 30 * time.Second, 100: 30 * time.Second} {
		for range 20 {
			d := w.backoff(n)
			require.GreaterOrEqual(t, d, want/2, "retry %d", n)
			require.LessOrEqual(t, d, want, "retry %d", n)
		}
	}
}

func TestBackendConfig(t *testing.T) {
	w := NewWorker(Config{BackendURL: "https://127.0.0.1:8443/", BackendCAPEM: "PEM"})
	var cfg struct {
		Terraform struct {
			Backend struct {
				HTTP map[string]any `json:"http"`
			} `json:"backend"`
		} `json:"terraform"`
	}
	require.NoError(t, json.Unmarshal(w.backendConfig("acme"), &cfg))
	h := cfg.Terraform.Backend.HTTP
	require.Equal(t, "https://127.0.0.1:8443/tfstate/acme", h["address"])
	require.Equal(t, "https://127.0.0.1:8443/tfstate/acme/lock", h["lock_address"])
	require.Equal(t, "LOCK", h["lock_method"])
	require.Equal(t, "PEM", h["client_ca_certificate_pem"])
	require.NotContains(t, string(w.backendConfig("acme")), "password", "credentials go by environment only")
}
