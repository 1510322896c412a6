//go:build history

package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRecordHistory drives a real server through every kind and lifecycle,
// through the public HTTP API alone (so it drives any release's binary), and
// saves its admin backup and a manifest into testdata/histories/<version>/:
//
//	REZUS_RECORD_HISTORY=1 go test -tags history -count=1 -run '^TestRecordHistory$' ./cmd/rezuscloud/
//
// REZUS_HISTORY_BINARY names another release's rezuscloud (default: this
// build), REZUS_HISTORY_VERSION and REZUS_HISTORY_COMMIT what it is when its
// /version does not say (default: its /version, and this tree's HEAD).
func TestRecordHistory(t *testing.T) {
	if os.Getenv("REZUS_RECORD_HISTORY") != "1" {
		t.Skip("set REZUS_RECORD_HISTORY=1 to record a history into testdata/histories")
	}
	const passphrase = "history-fixture-sealing-passphrase" // throwaway: test data
	bin := os.Getenv("REZUS_HISTORY_BINARY")
	data := filepath.Join(t.TempDir(), "data")
	p := startBinary(t, bin, []string{"REZUSCLOUD_SECRETS_PASSPHRASE=" + passphrase}, data,
		append(historyServerArgs(t), "--remediation-interval", "2s")...)
	start := time.Now()
	r := &recorder{p: p, t: t}

	m := historyManifest{Archive: "backup.tar.gz", SecretsPassphrase: passphrase, Tenant: "hist", Date: time.Now().UTC().Truncate(time.Second)}
	m.Version = os.Getenv("REZUS_HISTORY_VERSION")
	if m.Version == "" {
		m.Version = fmt.Sprint(p.object("/version")["version"])
	}
	m.Commit = os.Getenv("REZUS_HISTORY_COMMIT")
	if m.Commit == "" {
		out, err := exec.Command("git", "rev-parse", "HEAD").Output()
		require.NoError(t, err)
		m.Commit = strings.TrimSpace(string(out))
	}

	// Users: the admin gets a password; a user with no global role and a
	// binding on the tenant; a single sign-on user (its account at a
	// provider, which needs no provider to be stored); a group binding.
	const adminPassword, alicePassword = "history-admin-password", "history-alice-password"
	r.do(http.MethodPut, "/api/v1/users/admin/password", token, `{"password":"`+adminPassword+`"}`, http.StatusNoContent)
	r.create("users", "", "alice", token, `{"metadata":{"name":"alice"},"spec":{"role":"none","displayName":"Alice",
		"bindings":[{"role":"edit","tenants":["hist"]}],"password":"`+alicePassword+`"}}`)
	r.create("users", "", "sso-bob", token, `{"metadata":{"name":"sso-bob"},"spec":{"role":"view",
		"external":{"issuer":"https://idp.example.com","subject":"bob-0001"}}}`)
	r.create("groupbindings", "", "ops", token, `{"metadata":{"name":"ops"},"spec":{"groups":["ops"],"role":"view"}}`)
	r.refs = append(r.refs, historyObject{Kind: "User", Name: "admin", Path: "users/admin"})

	// API tokens: one made by the admin for itself, one by alice's session.
	adminToken := r.token(token, "admin-ci", `{"metadata":{"name":"admin-ci"},"spec":{"user":"admin","description":"recorded history"}}`)
	aliceSession := r.login("alice", alicePassword)
	aliceToken := r.token(aliceSession, "alice-ci", `{"metadata":{"name":"alice-ci"},"spec":{"description":"alice's automation"}}`)
	m.Users = []historyUser{
		{Name: "admin", Password: adminPassword, Token: adminToken, TokenName: "admin-ci", Role: "admin"},
		{Name: "alice", Password: alicePassword, Token: aliceToken, TokenName: "alice-ci", Role: "none"},
	}

	// Providers: a metal one and a module one (stored, not built with).
	// A release that knows a newer optional field records it (0.2.0:
	// Provider spec.versions, Rollout spec.progressDeadline); an earlier one
	// refuses it as unknown (400), and the object is made without.
	r.createNewer("providers", "", "dc", token, `{"metadata":{"name":"dc"},"spec":{"type":"metal","versions":{"talos":["v1.13.0","v1.13.1"]}}}`,
		`{"metadata":{"name":"dc"},"spec":{"type":"metal"}}`)
	files := map[string]string{}
	mod := filepath.Join("testdata", "module-emulated")
	entries, err := os.ReadDir(mod)
	require.NoError(t, err)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(mod, e.Name()))
		require.NoError(t, err)
		files[e.Name()] = string(b)
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"name": "mod"},
		"spec": map[string]any{"type": "module", "config": map[string]any{"api": "http://127.0.0.1:9"}, "module": map[string]any{"files": files},
			"credentialsRef": map[string]any{"name": "emulated"}}})
	require.NoError(t, err)
	r.create("providers", "", "mod", token, string(body))

	// The tenant: maintenance windows (always open), a drift check that
	// reports, a schematic, two node groups (one with a remediation policy
	// that never fires in a replay) and a config patch; built by alice.
	r.create("tenants", "", "hist", token, `{"metadata":{"name":"hist","labels":{"history":"recorded"}},"spec":{"talosVersion":"v1.13.0",
		"maintenance":{"windows":[{"start":"00:00","duration":"24h"}]},
		"driftCheck":{"interval":"24h","action":"report"},
		"schematic":{"extensions":["siderolabs/iscsi-tools"],"extraKernelArgs":["console=ttyS0"]}}}`)
	r.create("tenants/hist/nodegroups", "hist", "cp", aliceToken, `{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":1,"provider":"emulated"}}`)
	r.create("tenants/hist/nodegroups", "hist", "workers", aliceToken, `{"metadata":{"name":"workers"},"spec":{"role":"worker","count":1,"provider":"emulated",
		"remediation":{"unhealthyAfter":"2s","maxUnhealthy":1,"startupTimeout":"3m"}}}`)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"name": "kubelet-verbosity"},
		"spec": map[string]any{"patch": "machine:\n  kubelet:\n    extraArgs:\n      v: \"2\"\n", "target": map[string]any{"kind": "all"}}})
	require.NoError(t, err)
	r.create("tenants/hist/configpatches", "hist", "kubelet-verbosity", aliceToken, string(patch))
	r.settled("hist", 2)
	for _, mc := range p.items("/api/v1/tenants/hist/machines") {
		name := fmt.Sprint(field(mc, "metadata.name"))
		r.refs = append(r.refs, historyObject{Kind: "Machine", Tenant: "hist", Name: name, Path: "tenants/hist/machines/" + name})
	}
	for _, a := range p.items("/api/v1/tenants/hist/applies") {
		name := fmt.Sprint(field(a, "metadata.name"))
		r.refs = append(r.refs, historyObject{Kind: "Apply", Tenant: "hist", Name: name, Path: "tenants/hist/applies/" + name})
	}

	// A Talos upgrade (a patch version), made by the tenant's change.
	p.await(2*time.Minute, "the tenant is healthy", func() bool {
		code, h := p.do("GET", "/api/v1/tenants/hist/health?refresh=true", "")
		return code == http.StatusOK && h["state"] == "Ready"
	})
	r.do(http.MethodPatch, "/api/v1/tenants/hist", token, `{"spec":{"talosVersion":"v1.13.1"}}`, http.StatusOK)
	var upgrade string
	p.await(3*time.Minute, "the upgrade succeeded", func() bool {
		us := p.items("/api/v1/tenants/hist/upgrades")
		if len(us) != 1 {
			return false
		}
		upgrade = fmt.Sprint(field(us[0], "metadata.name"))
		require.NotEqual(t, "Failed", field(us[0], "status.phase"), "upgrade: %v", us[0]["status"])
		return field(us[0], "status.phase") == "Succeeded"
	})
	r.refs = append(r.refs, historyObject{Kind: "Upgrade", Tenant: "hist", Name: upgrade, Path: "tenants/hist/upgrades/" + upgrade})

	// An etcd backup, by alice.
	m.EtcdBackup = "manual-1"
	r.create("tenants/hist/etcdbackups", "hist", "manual-1", aliceToken, `{"metadata":{"name":"manual-1"},"spec":{}}`)
	p.await(time.Minute, "the etcd backup succeeded", func() bool {
		ph := field(p.object("/api/v1/tenants/hist/etcdbackups/manual-1"), "status.phase")
		require.NotEqual(t, "Failed", ph)
		return ph == "Succeeded"
	})
	code, snap, _ := p.send(http.MethodGet, "/api/v1/tenants/hist/etcdbackups/manual-1/snapshot", token, "")
	require.Equal(t, http.StatusOK, code)
	sum := sha256.Sum256(snap)
	m.EtcdBackupSha256 = hex.EncodeToString(sum[:])

	// A rollout over the tenants labelled for it: the tenant is at its
	// target already, so it is Done without a change.
	r.createNewer("rollouts", "", "fleet", token, `{"metadata":{"name":"fleet"},"spec":{"change":{"talosVersion":"v1.13.1"},
		"tenantSelector":"history=recorded","soak":"0s","progressDeadline":"1h"}}`,
		`{"metadata":{"name":"fleet"},"spec":{"change":{"talosVersion":"v1.13.1"},"tenantSelector":"history=recorded","soak":"0s"}}`)
	p.await(time.Minute, "the rollout succeeded", func() bool {
		return field(p.object("/api/v1/rollouts/fleet"), "status.phase") == "Succeeded"
	})

	// A remediation: the worker stops answering and is replaced. Then the
	// policy is made one that never fires in a replay (whose emulator does
	// not have the history's nodes).
	for _, mc := range p.items("/api/v1/tenants/hist/machines") {
		if field(mc, "spec.nodeGroup") == "workers" {
			host := fmt.Sprint(field(mc, "spec.hostname"))
			resp, err := http.DefaultClient.Do(p.emulatorRequest(http.MethodPut, "/v1/nodes/"+host+"/faults", strings.NewReader(`{"unreachable":true}`)))
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode, "fault of %s", host)
		}
	}
	var remediation string
	p.await(3*time.Minute, "the worker was replaced", func() bool {
		rs := p.items("/api/v1/tenants/hist/remediations")
		if len(rs) != 1 {
			return false
		}
		remediation = fmt.Sprint(field(rs[0], "metadata.name"))
		require.NotEqual(t, "Failed", field(rs[0], "status.phase"), "remediation: %v", rs[0]["status"])
		return field(rs[0], "status.phase") == "Succeeded"
	})
	r.refs = append(r.refs, historyObject{Kind: "Remediation", Tenant: "hist", Name: remediation, Path: "tenants/hist/remediations/" + remediation})
	r.do(http.MethodPatch, "/api/v1/tenants/hist/nodegroups/workers", token,
		`{"spec":{"remediation":{"unhealthyAfter":"24h","maxUnhealthy":1,"startupTimeout":"24h"}}}`, http.StatusOK)

	// A tenant created and deleted: its whole life is in the events only.
	r.do(http.MethodPost, "/api/v1/tenants", token, `{"metadata":{"name":"gone"},"spec":{}}`, http.StatusCreated)
	r.do(http.MethodDelete, "/api/v1/tenants/gone", token, "", http.StatusOK)

	// Everything settled: no apply, upgrade or config change under way.
	r.settled("hist", 2)
	p.await(time.Minute, "every machine holds its config", func() bool {
		for _, mc := range p.items("/api/v1/tenants/hist/machines") {
			for _, c := range asList(field(mc, "status.conditions")) {
				c, _ := c.(map[string]any)
				if c["type"] == "ConfigApplied" && c["status"] != "True" {
					return false
				}
			}
		}
		return true
	})

	// What must read back: the fields of every object, as they are now.
	for _, o := range r.refs {
		obj := p.object("/api/v1/" + o.Path)
		o.Fields = map[string]any{}
		for _, f := range historyFields[o.Kind] {
			if v := field(obj, f); v != nil {
				o.Fields[f] = v
			}
		}
		m.Objects = append(m.Objects, o)
	}
	var evs struct{ Items []struct{ Seq uint64 } }
	require.NoError(t, json.Unmarshal(p.raw0("/api/v1/events?newest=1"), &evs))
	require.Len(t, evs.Items, 1)
	m.LastEventSeq = evs.Items[0].Seq
	var audit struct{ Items []json.RawMessage }
	require.NoError(t, json.Unmarshal(p.raw0("/api/v1/audit?limit=10000"), &audit))
	m.AuditRecords = len(audit.Items)

	// The admin backup, then the manifest, into testdata/histories/<version>/.
	dir := filepath.Join(historiesDir(t), m.Version)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	_, size, err := writeArchiveFile(filepath.Join(dir, m.Archive), func(w io.Writer) error {
		return fetchBackup(t.Context(), p.url, token, "", w)
	})
	require.NoError(t, err)
	require.NoError(t, os.Chmod(filepath.Join(dir, m.Archive), 0o644))
	mb, err := json.MarshalIndent(m, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "manifest.json"), append(mb, '\n'), 0o644))
	t.Logf("recorded the history of %s (%s) in %s: %d objects, events up to %d, %d audit records, archive %d bytes, in %s",
		m.Version, m.Commit, dir, len(m.Objects), m.LastEventSeq, m.AuditRecords, size, time.Since(start).Round(time.Second))
}

// recorder makes a history's objects and remembers what it made.
type recorder struct {
	p    *proc
	t    *testing.T
	refs []historyObject
}

func (r *recorder) do(method, path, bearer, body string, want int) []byte {
	r.t.Helper()
	code, b, _ := r.p.send(method, path, bearer, body)
	require.Equal(r.t, want, code, "%s %s: %s", method, path, b)
	return b
}

// create POSTs an object to /api/v1/<collection> and records it.
func (r *recorder) create(collection, tenant, name, bearer, body string) {
	r.t.Helper()
	b := r.do(http.MethodPost, "/api/v1/"+collection, bearer, body, http.StatusCreated)
	var obj map[string]any
	require.NoError(r.t, json.Unmarshal(b, &obj))
	r.refs = append(r.refs, historyObject{Kind: fmt.Sprint(obj["kind"]), Tenant: tenant, Name: name, Path: collection + "/" + name})
}

// createNewer creates an object with fields an earlier release may not
// know, or, when the server refuses them as unknown (400), without them.
func (r *recorder) createNewer(collection, tenant, name, bearer, newer, older string) {
	r.t.Helper()
	if code, b, _ := r.p.send(http.MethodPost, "/api/v1/"+collection, bearer, newer); code != http.StatusBadRequest {
		require.Equal(r.t, http.StatusCreated, code, "POST %s: %s", collection, b)
		var obj map[string]any
		require.NoError(r.t, json.Unmarshal(b, &obj))
		r.refs = append(r.refs, historyObject{Kind: fmt.Sprint(obj["kind"]), Tenant: tenant, Name: name, Path: collection + "/" + name})
		return
	}
	r.create(collection, tenant, name, bearer, older)
}

// token creates an API token and answers its secret.
func (r *recorder) token(bearer, name, body string) string {
	r.t.Helper()
	b := r.do(http.MethodPost, "/api/v1/apitokens", bearer, body, http.StatusCreated)
	var created struct{ Token string }
	require.NoError(r.t, json.Unmarshal(b, &created))
	require.NotEmpty(r.t, created.Token)
	r.refs = append(r.refs, historyObject{Kind: "APIToken", Name: name, Path: "apitokens/" + name})
	return created.Token
}

func (r *recorder) login(user, password string) string {
	r.t.Helper()
	b := r.do(http.MethodPost, "/api/v1/auth/login", "", fmt.Sprintf(`{"username":%q,"password":%q}`, user, password), http.StatusOK)
	var login struct{ Token string }
	require.NoError(r.t, json.Unmarshal(b, &login))
	return login.Token
}

// settled waits until the tenant's applies all ended, the last one
// succeeded, and it has its machines.
func (r *recorder) settled(tenant string, machines int) {
	r.t.Helper()
	r.p.await(3*time.Minute, fmt.Sprintf("tenant %s applied with %d machines", tenant, machines), func() bool {
		applies := r.p.items("/api/v1/tenants/" + tenant + "/applies")
		if len(applies) == 0 || len(r.p.items("/api/v1/tenants/"+tenant+"/machines")) != machines {
			return false
		}
		for _, a := range applies {
			if field(a, "status.endTime") == nil {
				return false
			}
		}
		t := r.p.object("/api/v1/tenants/" + tenant)
		if field(t, "status.observedGeneration") != field(t, "metadata.generation") {
			return false
		}
		for _, c := range asList(field(t, "status.conditions")) {
			c, _ := c.(map[string]any)
			if c["type"] == "Reconciled" {
				return c["status"] == "True"
			}
		}
		return false
	})
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// historyFields are the fields recorded per kind: the keys a release must
// keep reading as they were written. Finished runs (upgrades, backups,
// rollouts, remediations) keep their whole spec and status: nothing
// rewrites them, so every field an earlier release wrote must come back.
var historyFields = map[string][]string{
	"User":         {"spec.role", "spec.bindings", "spec.external", "spec.displayName"},
	"APIToken":     {"spec.user", "spec.description"},
	"GroupBinding": {"spec.groups", "spec.role"},
	"Provider":     {"spec.type", "spec.module.files", "spec.versions"},
	"Tenant": {"metadata.labels", "spec.talosVersion", "spec.kubernetesVersion", "spec.maintenance", "spec.driftCheck",
		"spec.schematic", "spec.etcdBackup", "metadata.finalizers"},
	"NodeGroup":   {"spec.role", "spec.count", "spec.provider", "spec.remediation"},
	"Machine":     {"spec.nodeGroup", "spec.role", "spec.address", "spec.providerID", "status.talosVersion"},
	"ConfigPatch": {"spec.patch", "spec.target", "spec.enabled"},
	"Upgrade":     {"spec", "status"},
	"EtcdBackup":  {"spec", "status"},
	"Rollout":     {"spec", "status"},
	"Apply":       {"spec.operation", "status.phase", "status.resources"},
	"Remediation": {"spec", "status"},
}
