package handlers_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/emulator/talostest"
	"github.com/rezuscloud/rezuscloud/eventstore"
	"github.com/rezuscloud/rezuscloud/handlers"
)

// TestRenderedConfigsLeaveTheKeysOut replays finding 1 of the 2026-12-06
// review: a user with edit on a tenant downloaded the control plane's
// rendered config and took the cluster, etcd, OS, service-account and
// aggregator CA keys from it (with the first, a system:masters certificate
// for ten years). Now a rendered config, and a patch's diff of one, leave
// every key, token and secret out for everyone unless a global admin asks
// for them (includeSecrets=true, audited as MachineConfigSecrets); a tenant
// admin by binding or an editor asking is refused.
func TestRenderedConfigsLeaveTheKeysOut(t *testing.T) {
	s := newTalosStack(t)
	s.acme()
	ed := bearer(s.createBoundUser("ed", domain.RoleNone, `[{"role":"edit","tenants":["acme"]}]`))
	tina := bearer(s.createBoundUser("tina", domain.RoleNone, `[{"role":"admin","tenants":["acme"]}]`))
	boss := bearer(s.createBoundUser("boss", domain.RoleAdmin, `[]`))
	globalEditor := bearer(s.createBoundUser("gail", domain.RoleEdit, `[]`))

	for _, who := range []struct {
		name string
		auth []string
	}{{"tenant editor", ed}, {"tenant admin", tina}, {"global editor", globalEditor}, {"global admin", boss}} {
		for _, path := range []string{"/api/v1/tenants/acme/machines/cp1/config", "/api/v1/tenants/acme/nodegroups/cp/config",
			"/api/v1/tenants/acme/machines/w1/config"} {
			r := s.do(http.MethodGet, path, nil, who.auth...)
			require.Equal(t, http.StatusOK, r.Code, "%s %s: %s", who.name, path, r.Body)
			talostest.RequireNoKeyMaterial(t, r.Body)
			cfg, err := configloader.NewFromBytes(r.Body)
			require.NoError(t, err, "a redacted config still loads")
			require.Empty(t, cfg.Cluster().IssuingCA().Key, "%s %s: the cluster CA key", who.name, path)
			require.NotEmpty(t, cfg.Cluster().IssuingCA().Crt, "certificates stay")
			require.Contains(t, r.Header.Get("X-Rezus-Secrets-Left-Out"), "machine.token")
			require.Contains(t, string(r.Body), "# RezusCloud left out the secrets of this config")
			if strings.Contains(path, "cp") {
				for _, p := range []string{"cluster.ca.key", "cluster.etcd.ca.key", "machine.ca.key", "cluster.serviceAccount.key", "cluster.aggregatorCA.key"} {
					require.Contains(t, r.Header.Get("X-Rezus-Secrets-Left-Out"), p)
					require.Contains(t, string(r.Body), "#   "+p+"\n", "the render says what it left out")
				}
			}
		}
		if who.name != "global admin" {
			r := s.do(http.MethodGet, "/api/v1/tenants/acme/machines/cp1/config?includeSecrets=true", nil, who.auth...)
			requireStatus(t, r, http.StatusForbidden, domain.ReasonForbidden)
			require.NotContains(t, string(r.Body), "PRIVATE KEY")
		}
	}

	// A diff's context lines come from the same redacted configs (the
	// patch's line follows machine.ca.key).
	s.mustCreate("/api/v1/tenants/acme/configpatches", map[string]any{"metadata": map[string]any{"name": "near-the-keys"},
		"spec": map[string]any{"format": "strategic", "enabled": false, "patch": "machine:\n  certSANs: [cp.acme.example]\n"}})
	r := s.do(http.MethodGet, "/api/v1/tenants/acme/machines/cp1/config?diff=near-the-keys", nil, ed...)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	require.Contains(t, string(r.Body), "+        - cp.acme.example")
	require.Contains(t, string(r.Body), "\n         key: \"\"\n", "the line before, machine.ca.key, is context")
	talostest.RequireNoKeyMaterial(t, r.Body)

	// The global admin's deliberate read has the keys, and is its own audit kind.
	r = s.do(http.MethodGet, "/api/v1/tenants/acme/machines/cp1/config?includeSecrets=true", nil, boss...)
	require.Equal(t, http.StatusOK, r.Code, string(r.Body))
	full, err := configloader.NewFromBytes(r.Body)
	require.NoError(t, err)
	require.Contains(t, string(full.Cluster().IssuingCA().Key), "PRIVATE KEY")
	require.Empty(t, r.Header.Get("X-Rezus-Secrets-Left-Out"))
	requireStatus(t, s.do(http.MethodGet, "/api/v1/tenants/acme/machines/cp1/config?includeSecrets=yes", nil, boss...),
		http.StatusBadRequest, domain.ReasonBadRequest)

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		recs, _, err := s.audit.Query(context.Background(), eventstore.AuditQuery{Limit: 1000, Kind: handlers.CredentialMachineConfigSecrets})
		require.NoError(c, err)
		codes := map[string][]int{}
		for _, rec := range recs {
			codes[rec.Actor] = append(codes[rec.Actor], rec.Code)
		}
		assert.Equal(c, map[string][]int{"ed": {403}, "tina": {403}, "gail": {403}, "boss": {200}}, codes)
	}, 10*time.Second, 5*time.Millisecond)
}
