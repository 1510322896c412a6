package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/rezuscloud/rezuscloud/domain"
	"github.com/rezuscloud/rezuscloud/internal/buildinfo"
)

// runAsync runs a command line in the background to its own end.
func (tc *testCLI) runAsync(args ...string) <-chan result {
	ch, _ := tc.runAsyncStderr(args...)
	return ch
}

// runAsyncStderr is runAsync with the command's stderr readable while it runs.
func (tc *testCLI) runAsyncStderr(args ...string) (<-chan result, *syncBuffer) {
	ch := make(chan result, 1)
	var out, errb syncBuffer
	go func() {
		code := newRezusctl(tc.cliEnv(&out, &errb)).run(context.Background(), append([]string{"rezusctl"}, args...))
		ch <- result{stdout: out.String(), stderr: errb.String(), code: code}
	}()
	return ch, &errb
}

func waitResult(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("the command did not finish")
		return result{}
	}
}

func writeScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\nset -e\n"+body), 0o755))
	return p
}

// TestEndToEnd drives a real server through the CLI as a person would.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server")
	}
	srv := startServer(t)
	tc := newTestCLI(t)
	tc.now = time.Now()
	scripts := t.TempDir()

	t.Run("contexts", func(t *testing.T) {
		tc := tc.with(t)
		tc.ok("config", "set-context", "e2e", "--server", srv.url, "--token", srv.token, "--tenant", "acme")
		tc.ok("config", "use-context", "e2e")
		assert.Equal(t, "e2e\n", tc.ok("config", "current-context"))
		out := tc.ok("version")
		// Neither binary is stamped: both are the release VERSION says.
		assert.Contains(t, out, "Client Version: "+buildinfo.Version()+" (commit ")
		assert.Contains(t, out, "Server Version: "+buildinfo.Version()+" (go")
		assert.Contains(t, out, "API rezuscloud.io/v1")
	})

	t.Run("create and apply", func(t *testing.T) {
		tc := tc.with(t)
		assert.Equal(t, "tenant/acme created\n", tc.ok("create", "-f", "testdata/e2e/tenant.yaml"))
		r := tc.run("create", "-f", "testdata/e2e/tenant.yaml")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, `Error from server (AlreadyExists): tenant "acme" already exists`)

		assert.Equal(t, "provider/emu created\ntenant/acme configured\nnodegroup/workers created\n", tc.ok("apply", "-f", "testdata/e2e/cluster.yaml"))
		assert.Equal(t, "provider/emu unchanged\ntenant/acme unchanged\nnodegroup/workers unchanged\n", tc.ok("apply", "-f", "testdata/e2e/cluster.yaml"))
	})

	t.Run("module provider", func(t *testing.T) {
		tc := tc.with(t)
		r := tc.run("create", "provider", "lab-dir", "--from-dir", "testdata/module", "--config", "emulator=http://127.0.0.1:1")
		require.Equal(t, 0, r.code, r.stderr)
		assert.Equal(t, "provider/lab-dir created\n", r.stdout)
		assert.Contains(t, r.stderr, "skipping testdata/module/README.md")
		var p domain.Provider
		require.NoError(t, json.Unmarshal([]byte(tc.ok("get", "provider", "lab-dir", "-o", "json")), &p))
		assert.Equal(t, domain.ProviderModule, p.Spec.Type)
		require.NotNil(t, p.Spec.Module)
		assert.Equal(t, moduleFilesOf(t, "testdata/module"), p.Spec.Module.Files, "the files come back as they were read")

		// The example's manifest, files inline, applies as it is.
		example := filepath.Join("..", "..", "examples", "providers", "emulated")
		assert.Equal(t, "provider/lab created\n", tc.ok("apply", "-f", filepath.Join(example, "provider.yaml")))
		assert.Equal(t, "provider/lab unchanged\n", tc.ok("apply", "-f", filepath.Join(example, "provider.yaml")))
		var lab domain.Provider
		require.NoError(t, json.Unmarshal([]byte(tc.ok("get", "provider", "lab", "-o", "json")), &lab))
		require.NotNil(t, lab.Spec.Module)
		assert.Equal(t, moduleFilesOf(t, example), lab.Spec.Module.Files)

		table := strings.Split(tc.ok("get", "providers"), "\n")
		assert.Equal(t, []string{"NAME", "TYPE", "VALIDATED", "AGE"}, strings.Fields(table[0]))
		out := tc.ok("describe", "provider", "lab")
		assert.Regexp(t, `(?m)^  module:\n    files:\n      main\.tf: \d+ lines, \S+\n      outputs\.tf: \d+ lines, \S+\n      variables\.tf: \d+ lines, \S+\n`, out)

		// A file the server refuses is named where it was read from.
		bad := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(bad, "my module.tf"), []byte("locals {}\n"), 0o600))
		r = tc.run("create", "provider", "lab-bad", "--from-dir", bad)
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "Error from server (Invalid): ")
		assert.Contains(t, r.stderr, "\n  "+filepath.Join(bad, "my module.tf")+`: "my module.tf" is not a module file name`)
	})

	t.Run("get in every format", func(t *testing.T) {
		tc := tc.with(t)
		table := tc.ok("get", "tenants")
		lines := strings.Split(strings.TrimSpace(table), "\n")
		require.Len(t, lines, 2, table)
		assert.Equal(t, []string{"NAME", "TALOS", "KUBERNETES", "PHASE", "AGE"}, strings.Fields(lines[0]))
		assert.Equal(t, []string{"acme", "v1.13.0", "v1.35.4", "Pending"}, strings.Fields(lines[1])[:4])

		wide := tc.ok("get", "tn", "-o", "wide")
		assert.Contains(t, wide, "LABELS")
		assert.Contains(t, wide, "env=prod,tier=gold")

		var list domain.List
		require.NoError(t, json.Unmarshal([]byte(tc.ok("get", "tenants", "-o", "json")), &list))
		assert.Equal(t, "TenantList", list.Kind)
		require.Len(t, list.Items, 1)
		assert.Equal(t, map[string]string{"env": "prod", "tier": "gold"}, list.Items[0].Metadata.Labels)

		var ng domain.NodeGroup
		require.NoError(t, yaml.Unmarshal([]byte(tc.ok("get", "ng", "workers", "-o", "yaml")), &ng))
		assert.Equal(t, "acme", ng.Metadata.Tenant)
		assert.Equal(t, 2, ng.Spec.Count)

		assert.Equal(t, "nodegroup/workers\n", tc.ok("get", "nodegroups", "-o", "name"))
		assert.Equal(t, "tenant/acme\n", tc.ok("get", "tenants", "-l", "tier=gold", "-o", "name"))
		r := tc.run("get", "tenants", "-l", "tier=silver")
		assert.Equal(t, "no tenants\n", r.stderr)

		all := tc.ok("get", "ng", "-A")
		assert.Equal(t, []string{"TENANT", "NAME", "ROLE", "COUNT", "MIN", "MAX", "TARGET", "PROVIDER", "AGE"}, strings.Fields(strings.Split(all, "\n")[0]))
		assert.Equal(t, []string{"acme", "workers", "worker", "2", "-", "-", "2", "emu"}, strings.Fields(strings.Split(all, "\n")[1])[:8])

		// Pagination against the real server: more tenants than one page.
		for _, n := range []string{"page-a", "page-b", "page-c"} {
			tc.stdin = "kind: Tenant\nmetadata: {name: " + n + "}\n"
			tc.ok("apply", "-f", "-")
		}
		assert.Equal(t, "tenant/acme\ntenant/page-a\ntenant/page-b\ntenant/page-c\n", tc.ok("get", "tn", "-o", "name", "--chunk-size", "1"))
	})

	t.Run("watch", func(t *testing.T) {
		tc := tc.with(t)
		out, errOut, stop := tc.start("get", "ng", "-w", "--output-watch-events")
		require.Eventually(t, func() bool { return strings.Contains(out.String(), "workers") }, 10*time.Second, 10*time.Millisecond)
		code, body := srv.api(t, http.MethodPatch, "/api/v1/tenants/acme/nodegroups/workers", "application/merge-patch+json", `{"spec":{"count":3}}`)
		require.Equal(t, http.StatusOK, code, string(body))
		require.Eventually(t, func() bool { return strings.Contains(out.String(), "MODIFIED") }, 10*time.Second, 10*time.Millisecond)
		assert.Equal(t, 0, stop(), errOut.String())
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		require.Len(t, lines, 3, out.String())
		assert.Equal(t, []string{"ADDED", "workers", "worker", "2"}, strings.Fields(lines[1])[:4])
		assert.Equal(t, []string{"MODIFIED", "workers", "worker", "3"}, strings.Fields(lines[2])[:4])
	})

	t.Run("edit", func(t *testing.T) {
		tc := tc.with(t)
		tc.env["EDITOR"] = writeScript(t, scripts, "edit-count.sh", `sed 's/^  count: 3$/  count: 5/' "$1" > "$1.new"
mv "$1.new" "$1"
`)
		assert.Equal(t, "nodegroup/workers edited\n", tc.ok("edit", "ng", "workers"))
		assert.Contains(t, tc.ok("get", "ng", "workers", "-o", "yaml"), "\n  count: 5\n")

		tc.env["EDITOR"] = "true" // saves nothing
		assert.Equal(t, "edit cancelled, no changes made\n", tc.ok("edit", "ng", "workers"))
	})

	t.Run("edit conflict", func(t *testing.T) {
		tc := tc.with(t)
		started, proceed := filepath.Join(scripts, "started"), filepath.Join(scripts, "proceed")
		// The editor says it has the file, waits until the test has changed the
		// object behind its back, then makes its own change.
		tc.env["EDITOR"] = writeScript(t, scripts, "edit-slow.sh", fmt.Sprintf(`touch %q
while [ ! -f %q ]; do sleep 0.01; done
sed 's/^  count: 5$/  count: 7/' "$1" > "$1.new"
mv "$1.new" "$1"
`, started, proceed))
		done := tc.runAsync("edit", "nodegroup", "workers")
		require.Eventually(t, func() bool { _, err := os.Stat(started); return err == nil }, 10*time.Second, 10*time.Millisecond)
		code, body := srv.api(t, http.MethodPatch, "/api/v1/tenants/acme/nodegroups/workers", "application/merge-patch+json", `{"metadata":{"labels":{"changed":"meanwhile"}}}`)
		require.Equal(t, http.StatusOK, code, string(body))
		require.NoError(t, os.WriteFile(proceed, nil, 0o600))

		r := waitResult(t, done)
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, `error: nodegroup "workers" in tenant "acme" was changed on the server while you were editing it, so your edit was not saved`)
		assert.Contains(t, r.stderr, `Run "rezusctl edit nodegroup workers -t acme" again to edit the current version.`)
		i := strings.Index(r.stderr, "Your edits are in ")
		require.GreaterOrEqual(t, i, 0, r.stderr)
		kept := strings.TrimSuffix(strings.SplitN(r.stderr[i+len("Your edits are in "):], "\n", 2)[0], ".")
		b, err := os.ReadFile(kept)
		require.NoError(t, err, "the edited file is kept")
		assert.Contains(t, string(b), "\n  count: 7\n")
		os.Remove(kept)

		// The other writer's change stands and the edit did not land.
		out := tc.ok("get", "ng", "workers", "-o", "yaml")
		assert.Contains(t, out, "changed: meanwhile")
		assert.Contains(t, out, "\n  count: 5\n")
	})

	t.Run("invalid object", func(t *testing.T) {
		tc := tc.with(t)
		r := tc.run("create", "-f", "testdata/e2e/invalid.yaml")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "Error from server (Invalid): nodegroup \"cp\" is invalid: spec.count: a control-plane group needs an odd count of at least 1 for etcd quorum, got 2\n")
		assert.Contains(t, r.stderr, "\n  spec.count: a control-plane group needs an odd count of at least 1 for etcd quorum, got 2\n")
		assert.Empty(t, r.stdout)
	})

	t.Run("describe and events", func(t *testing.T) {
		tc := tc.with(t)
		out := tc.ok("describe", "ng", "workers")
		assert.Contains(t, out, "Name:              workers\nKind:              NodeGroup\nTenant:            acme\n")
		assert.Contains(t, out, "Labels:            changed=meanwhile\n")
		assert.Contains(t, out, "Spec:\n  role: worker\n  count: 5\n")
		if code, _ := srv.api(t, http.MethodGet, "/api/v1/events?limit=1", "", ""); code == http.StatusNotFound {
			assert.Contains(t, out, "Events: not available\n")
			return
		}
		assert.Contains(t, out, "NodeGroupCreated")
		assert.Contains(t, out, "NodeGroupScaled")
		ev := tc.ok("events", "--kind", "ng", "-t", "acme", "--name", "workers")
		assert.Regexp(t, `(?m)^\d+ +\S+ +\S+ +NodeGroupCreated +nodegroup/acme/workers$`, ev)
	})

	t.Run("machine config", func(t *testing.T) {
		tc := tc.with(t)
		if code, _ := srv.api(t, http.MethodGet, "/api/v1/events?limit=1", "", ""); code == http.StatusNotFound {
			t.Fatal("the server has no events endpoint")
		}
		hash := strings.Repeat("0123456789abcdef", 4)
		// What the config path records: the hash alone (MachineConfigApplied),
		// then the status; later a config the node refuses.
		for _, w := range []struct{ path, body string }{
			{"", `{"metadata":{"annotations":{"` + domain.AnnotationConfigHash + `":"` + hash + `"}}}`},
			{"/status", `{"status":{"configUpToDate":true,"conditions":[{"type":"ConfigApplied","status":"True","reason":"AppliedInPlace","message":"applied in place","lastTransitionTime":"2026-05-01T11:00:00Z"}]}}`},
			{"/status", `{"status":{"configUpToDate":false,"conditions":[{"type":"ConfigApplied","status":"False","reason":"ApplyFailed","message":"the node refused the config","lastTransitionTime":"2026-05-01T11:05:00Z"}]}}`},
		} {
			if w.path == "" {
				code, body := srv.api(t, http.MethodPost, "/api/v1/tenants/acme/machines", "application/json",
					`{"metadata":{"name":"w-cfg"},"spec":{"nodeGroup":"workers","role":"worker","address":"10.0.0.30"}}`)
				require.Equal(t, http.StatusCreated, code, string(body))
			}
			code, body := srv.api(t, http.MethodPatch, "/api/v1/tenants/acme/machines/w-cfg"+w.path, "application/merge-patch+json", w.body)
			require.Equal(t, http.StatusOK, code, string(body))
		}
		wide := strings.Split(strings.TrimSpace(tc.ok("get", "machines", "-o", "wide")), "\n")
		require.Len(t, wide, 2)
		config := strings.Index(wide[0], "CONFIG")
		require.Positive(t, config, wide[0])
		assert.True(t, strings.HasPrefix(wide[1][config:], "failed (ApplyFailed) "), wide[1])

		out := tc.ok("describe", "machine", "w-cfg")
		assert.Regexp(t, `(?m)^Config History:\n  TIME +ACTOR +HASH +RESULT +MESSAGE\n`+
			`  \S+ +admin +0123456789ab +AppliedInPlace +applied in place\n`+
			`  \S+ +admin +- +ApplyFailed +the node refused the config\nEvents:\n`, out)
		assert.Contains(t, out, domain.EventMachineConfigApplied)
	})

	t.Run("rollouts and maintenance", func(t *testing.T) {
		tc := tc.with(t)
		// Bad waves are the server's 422, on the field.
		r := tc.run("rollout", "create", "bad", "--talos-version", "v1.13.1", "--waves", "1,50%")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "the last wave must be {percent: 100}")
		r = tc.run("rollout", "create", "bad", "--waves", "1,100%")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "give one change")

		assert.Equal(t, "rollout/none created: Talos v1.13.1\n", tc.ok("rollout", "create", "none", "--talos-version", "v1.13.1", "--selector", "team=nobody", "--waves", "1,50%,100%", "--soak", "1m"))
		require.Eventually(t, func() bool {
			return strings.Contains(tc.ok("rollout", "get", "none"), "no tenant matches the selector")
		}, 30*time.Second, 100*time.Millisecond)
		lines := strings.Split(strings.TrimSpace(tc.ok("rollout", "get")), "\n")
		assert.Equal(t, []string{"NAME", "CHANGE", "PHASE", "WAVE", "DONE", "FAILED", "MESSAGE"}, strings.Fields(lines[0]))
		assert.Equal(t, []string{"none", "Talos", "v1.13.1", "Succeeded"}, strings.Fields(lines[1])[:4])
		r = tc.run("rollout", "pause", "none")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "rollout none is Succeeded: it cannot be changed any more")
		assert.Equal(t, []string{"NAME", "CHANGE", "PHASE", "DONE", "FAILED", "AGE"}, strings.Fields(strings.Split(tc.ok("get", "rollouts"), "\n")[0]))

		// One that reaches acme, soaking for an hour once acme is done (or
		// halted, if acme's upgrade cannot run here): pause, resume, abort.
		tc.ok("rollout", "create", "acme-only", "--talos-version", "v1.13.1", "--waves", "100%", "--soak", "1h")
		spec := func() domain.RolloutSpec {
			var ro domain.Rollout
			require.NoError(t, json.Unmarshal([]byte(tc.ok("get", "rollout", "acme-only", "-o", "json")), &ro))
			return ro.Spec
		}
		assert.Equal(t, "rollout/acme-only: pause requested\n", tc.ok("rollout", "pause", "acme-only"))
		assert.True(t, spec().Paused)
		assert.Equal(t, "rollout/acme-only: resume requested\n", tc.ok("rollout", "resume", "acme-only"))
		assert.False(t, spec().Paused)
		assert.Equal(t, "rollout/acme-only: abort requested\n", tc.ok("rollout", "abort", "acme-only"))
		require.Eventually(t, func() bool {
			return strings.Contains(tc.ok("rollout", "describe", "acme-only"), "Phase:       Aborted")
		}, 30*time.Second, 100*time.Millisecond)
		out := tc.ok("rollout", "describe", "acme-only")
		assert.Contains(t, out, "Change:      Talos v1.13.1")
		assert.Contains(t, out, "Wave 1:")

		// Maintenance opened by hand, then closed.
		out = tc.ok("maintenance", "open", "acme", "--for", "2h")
		assert.Contains(t, out, "tenant/acme: maintenance open until ")
		var tn domain.Tenant
		require.NoError(t, json.Unmarshal([]byte(tc.ok("get", "tenant", "acme", "-o", "json")), &tn))
		require.NotNil(t, tn.Spec.Maintenance)
		require.NotNil(t, tn.Spec.Maintenance.OpenUntil)
		assert.WithinDuration(t, time.Now().Add(2*time.Hour), *tn.Spec.Maintenance.OpenUntil, time.Minute)
		assert.Equal(t, "tenant/acme: maintenance windows as declared\n", tc.ok("maintenance", "close", "acme"))
		tn = domain.Tenant{}
		require.NoError(t, json.Unmarshal([]byte(tc.ok("get", "tenant", "acme", "-o", "json")), &tn))
		assert.True(t, tn.Spec.Maintenance == nil || tn.Spec.Maintenance.OpenUntil == nil)
		r = tc.run("maintenance", "open", "acme", "--for", "200h")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "between 1s and 168h")
	})

	t.Run("delete --wait", func(t *testing.T) {
		tc := tc.with(t)
		assert.Equal(t, "nodegroup/workers deleted\n", tc.ok("delete", "ng", "workers", "--wait"))
		r := tc.run("get", "ng", "workers")
		assert.Equal(t, 1, r.code)
		assert.Equal(t, "Error from server (NotFound): nodegroup \"workers\" not found\n", r.stderr)

		// A tenant held by a finalizer goes when the finalizer is removed.
		code, body := srv.api(t, http.MethodPatch, "/api/v1/tenants/page-a", "application/merge-patch+json", `{"metadata":{"finalizers":["e2e.test/hold"]}}`)
		require.Equal(t, http.StatusOK, code, string(body))
		done, stderr := tc.runAsyncStderr("delete", "tenant", "page-a", "--wait")
		// Released only once the CLI has the DELETE's answer: released
		// before, the tenant may be gone by the time the DELETE answers
		// (which then says "deleted" at once).
		require.Eventually(t, func() bool {
			return strings.Contains(stderr.String(), "waiting for finalizers")
		}, 10*time.Second, 10*time.Millisecond)
		_, b := srv.api(t, http.MethodGet, "/api/v1/tenants/page-a", "", "")
		require.Contains(t, string(b), "deletionTimestamp")
		code, body = srv.api(t, http.MethodPatch, "/api/v1/tenants/page-a", "application/merge-patch+json", `{"metadata":{"finalizers":null}}`)
		require.Equal(t, http.StatusOK, code, string(body))
		r = waitResult(t, done)
		assert.Equal(t, 0, r.code, r.stderr)
		assert.Equal(t, "tenant/page-a deleted\n", r.stdout)
		assert.Contains(t, r.stderr, "tenant/page-a deletion requested; waiting for finalizers e2e.test/hold")
	})

	t.Run("automation credentials", func(t *testing.T) {
		tc := tc.with(t)
		file := filepath.Join(t.TempDir(), "bot.creds")
		out := tc.ok("automation-credentials", "create", "e2e-bot", "-o", file)
		assert.Contains(t, out, "not shown again")
		st, err := os.Stat(file)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
		creds, err := os.ReadFile(file)
		require.NoError(t, err)
		assert.Contains(t, string(creds), "BEGIN NATS USER JWT")
		assert.Contains(t, string(creds), "BEGIN USER NKEY SEED")
		list := tc.ok("automation-credentials", "list")
		assert.Contains(t, list, "e2e-bot")
		assert.NotContains(t, list, "SEED")
		assert.Contains(t, tc.ok("automation-credentials", "delete", "e2e-bot"), "revoked")
		assert.NotContains(t, tc.ok("automation-credentials", "list"), "e2e-bot")
	})

	t.Run("login whoami logout", func(t *testing.T) {
		tc := tc.with(t)
		tc.stdin = srv.adminPassword + "\n"
		out := tc.ok("login", "--server", srv.url, "--context", "pw", "--password-stdin")
		assert.Contains(t, out, "logged in to "+srv.url+" as admin (admin)")
		tc.ok("config", "use-context", "pw")
		assert.Equal(t, "user:        admin\nrole:        admin\nauth method: session\n", tc.ok("whoami"))
		assert.Contains(t, tc.ok("get", "tenants", "-o", "name"), "tenant/acme\n")
		assert.Contains(t, tc.ok("logout"), "logged out of "+srv.url)
		r := tc.run("get", "tenants")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "Error from server (Unauthorized)")

		tc.stdin = "not-the-password\n"
		r = tc.run("login", "--password-stdin")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "login failed")
	})
}
