package tfrunner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/eventstore/eventstoretest"
)

func TestCLIConfig(t *testing.T) {
	mirror := t.TempDir()
	for _, p := range []string{"registry.opentofu.org/rezuscloud/emulated/0.1.0/linux_amd64", "registry.opentofu.org/terraform-provider-openstack/openstack/3.4.0/linux_amd64"} {
		require.NoError(t, os.MkdirAll(filepath.Join(mirror, p), 0o755))
	}
	tests := []struct {
		name    string
		tofu    Tofu
		want    []string
		notWant []string
		err     string
	}{
		{"no mirror: every provider from its registry", Tofu{}, []string{`plugin_cache_dir = "/cache"`, "plugin_cache_may_break_dependency_lock_file = true"}, []string{"provider_installation"}, ""},
		{"mirror: its providers from it, the rest direct", Tofu{Mirror: mirror}, []string{
			`path    = "` + mirror + `"`,
			`include = ["registry.opentofu.org/rezuscloud/emulated", "registry.opentofu.org/terraform-provider-openstack/openstack"]`,
			`exclude = ["registry.opentofu.org/rezuscloud/emulated", "registry.opentofu.org/terraform-provider-openstack/openstack"]`,
		}, nil, ""},
		{"empty mirror is an error", Tofu{Mirror: t.TempDir()}, nil, nil, "holds no providers"},
		{"missing mirror is an error", Tofu{Mirror: filepath.Join(mirror, "nope")}, nil, nil, "reading provider mirror"},
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
	_, err := Tofu{Bin: filepath.Join(t.TempDir(), "tofu")}.Path()
	require.ErrorIs(t, err, ErrTofuMissing)
	require.ErrorContains(t, err, "--tofu")
	require.ErrorContains(t, err, "go tool task tools")
}

func TestUIWriterReadsTofuJSON(t *testing.T) {
	// Lines as `tofu apply -json` prints them (OpenTofu 1.10).
	lines := []string{
		`{"@level":"info","@message":"OpenTofu 1.10.10","@module":"tofu.ui","type":"version","tofu":"1.10.10","ui":"1.2"}`,
		`{"@level":"info","@message":"emulated_machine.ng_cp[\"cp-0\"]: Plan to create","type":"planned_change","change":{"resource":{"addr":"emulated_machine.ng_cp[\"cp-0\"]","module":"","resource_type":"emulated_machine"},"action":"create"}}`,
		`{"@level":"info","@message":"emulated_machine.ng_w[\"w-0\"]: Plan to replace","type":"planned_change","change":{"resource":{"addr":"emulated_machine.ng_w[\"w-0\"]"},"action":"replace"}}`,
		`{"@level":"info","@message":"Plan: 2 to add, 0 to change, 0 to destroy.","type":"change_summary","changes":{"add":2,"change":0,"import":0,"remove":0,"operation":"plan"}}`,
		`{"@level":"info","@message":"emulated_machine.ng_cp[\"cp-0\"]: Creating...","type":"apply_start"}`,
		`{"@level":"error","@message":"Error: Could not create emulated machine","type":"diagnostic","diagnostic":{"severity":"error","summary":"Could not create emulated machine","detail":"emulatednode \"x\" already exists","address":"emulated_machine.ng_cp[\"cp-0\"]"}}`,
		`{"@level":"info","@message":"Apply complete! Resources: 1 added, 0 changed, 0 destroyed.","type":"change_summary","changes":{"add":1,"change":0,"import":0,"remove":0,"operation":"apply"}}`,
		`not json at all`,
	}
	var log strings.Builder
	var phases []string
	u := &uiWriter{log: &log, setPhase: func(p string) { phases = append(phases, p) }}
	// Written in odd pieces, as a pipe delivers them.
	all := strings.Join(lines, "\n")
	for i := 0; i < len(all); i += 37 {
		_, _ = u.Write([]byte(all[i:min(i+37, len(all))]))
	}
	u.flush()
	require.Equal(t, []string{domain.ApplyApplying}, phases)
	require.Equal(t, domain.ApplyResources{Added: 1}, u.summary, "the apply's summary, not the plan's")
	require.Equal(t, domain.ApplyResources{Added: 2}, u.plan, "the plan's summary")
	require.Equal(t, []domain.DriftResource{{Address: `emulated_machine.ng_cp["cp-0"]`, Action: "create"}, {Address: `emulated_machine.ng_w["w-0"]`, Action: "replace"}}, u.changes)
	require.Equal(t, []string{`emulated_machine.ng_cp["cp-0"]: Could not create emulated machine: emulatednode "x" already exists`}, u.errors)
	require.Contains(t, log.String(), "Apply complete! Resources: 1 added")
	require.Contains(t, log.String(), "  emulatednode \"x\" already exists", "diagnostic details are logged")
	require.Contains(t, log.String(), "not json at all\n")
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
