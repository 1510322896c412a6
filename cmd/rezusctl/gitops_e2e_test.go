package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/emulator"
)

// TestDiffAndPruneEndToEnd drives diff and apply --prune against a real
// server, as a GitOps job would: diff, apply, diff clean, a commit later diff
// and prune.
func TestDiffAndPruneEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server")
	}
	srv := startServer(t)
	tc := newTestCLI(t)
	tc.now = time.Now()
	tc.ok("config", "set-context", "e2e", "--server", srv.url, "--token", srv.token)

	// Objects the files do not name, which prune must leave: one without the
	// label, one with it in a tenant the files do not touch.
	for _, w := range []struct{ path, body string }{
		{"/api/v1/providers", `{"metadata":{"name":"other-emu"},"spec":{"type":"emulated","config":{"endpoint":"http://127.0.0.1:1"}}}`},
		{"/api/v1/tenants", `{"metadata":{"name":"other"},"spec":{}}`},
		{"/api/v1/tenants/other/nodegroups", `{"metadata":{"name":"labelled","labels":{"managed-by":"gitops"}},"spec":{"role":"worker","count":1,"provider":"other-emu"}}`},
	} {
		code, body := srv.api(t, http.MethodPost, w.path, "application/json", w.body)
		require.Equal(t, http.StatusCreated, code, string(body))
	}

	tests := []struct {
		name     string
		args     []string
		code     int
		stdout   []string // each in stdout
		noStdout []string // none in stdout
		stderr   string
		before   func(t *testing.T)
	}{
		{
			name: "diff of objects that do not exist: all additions, exit 1",
			args: []string{"diff", "-f", "testdata/gitops/base.yaml"}, code: 1,
			stdout: []string{"--- live/tenant/gitops\n+++ merged/tenant/gitops\n@@ -0,0 +1,", "+    managed-by: gitops\n",
				"--- live/nodegroup/gitops/alpha\n+++ merged/nodegroup/gitops/alpha\n", "+  count: 1\n", "+    maxParallelism: 1\n",
				"--- live/provider/gitops-emu\n"},
		},
		{
			name: "apply", args: []string{"apply", "-f", "testdata/gitops/base.yaml"},
			stdout: []string{"provider/gitops-emu created\ntenant/gitops created\nnodegroup/alpha created\nnodegroup/beta created\n"},
		},
		{
			name: "diff right after apply: nothing, exit 0 (status, versions and defaults are no difference)",
			args: []string{"diff", "-f", "testdata/gitops/base.yaml"},
		},
		{
			name: "an object added by hand without the label",
			before: func(t *testing.T) {
				code, body := srv.api(t, http.MethodPost, "/api/v1/tenants/gitops/nodegroups", "application/json",
					`{"metadata":{"name":"manual"},"spec":{"role":"worker","count":1,"provider":"gitops-emu"}}`)
				require.Equal(t, http.StatusCreated, code, string(body))
			},
			args: []string{"diff", "-f", "testdata/gitops/base.yaml"},
		},
		{
			name: "diff a commit later: the changed count only, exit 1",
			args: []string{"diff", "-f", "testdata/gitops/changed.yaml"}, code: 1,
			stdout: []string{"--- live/nodegroup/gitops/alpha\n+++ merged/nodegroup/gitops/alpha\n", "-  count: 1\n+  count: 3\n",
				// The server's dry run: two more machines, and nothing else touched.
				"# impact of nodegroup/gitops/alpha: 0 rebooted (drained first), 0 reconfigured in place, 2 created, 0 destroyed, 0 unchanged\n",
				"#   alpha-1 (alpha): create: a new machine with a fresh config\n", "#   alpha-2 (alpha): create"},
			noStdout: []string{"tenant/gitops", "beta", "alpha-0"},
		},
		{
			name: "diff of a document the server would refuse: exit 2",
			args: []string{"diff", "-f", "testdata/gitops/invalid.yaml"}, code: 2,
			stderr: "spec.count: a control-plane group needs an odd count",
		},
		{
			name: "diff with a flag it does not take: exit 2", args: []string{"diff", "-f", "testdata/gitops/base.yaml", "--no-such-flag"}, code: 2,
			stderr: "flag provided but not defined",
		},
		{
			name: "prune without a selector is refused", args: []string{"apply", "-f", "testdata/gitops/changed.yaml", "--prune"}, code: 1,
			stderr: "--prune needs a label selector (-l)",
		},
		{
			name:     "apply --prune deletes the labelled node group the files no longer name",
			args:     []string{"apply", "-f", "testdata/gitops/changed.yaml", "--prune", "-l", "managed-by=gitops"},
			stdout:   []string{"tenant/gitops unchanged\nnodegroup/alpha configured\nnodegroup/beta pruned\n"},
			noStdout: []string{"manual", "labelled", "other"},
		},
		{
			name: "the same again prunes nothing", args: []string{"apply", "-f", "testdata/gitops/changed.yaml", "--prune", "-l", "managed-by=gitops"},
			stdout: []string{"tenant/gitops unchanged\nnodegroup/alpha unchanged\n"}, noStdout: []string{"pruned"},
		},
		{
			name: "diff after the prune: nothing", args: []string{"diff", "-f", "testdata/gitops/changed.yaml"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc := tc.with(t)
			if tt.before != nil {
				tt.before(t)
			}
			r := tc.run(tt.args...)
			require.Equal(t, tt.code, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
			if len(tt.stdout) == 0 {
				if tt.code == 0 && tt.args[0] == "diff" {
					assert.Empty(t, r.stdout)
				}
			}
			for _, s := range tt.stdout {
				assert.Contains(t, r.stdout, s)
			}
			for _, s := range tt.noStdout {
				assert.NotContains(t, r.stdout, s)
			}
			if tt.stderr != "" {
				assert.Contains(t, r.stderr, tt.stderr)
			}
		})
	}

	// What is left: beta went (or is going), the others stayed.
	names := tc.ok("get", "ng", "-t", "gitops", "-o", "name")
	assert.Contains(t, names, "nodegroup/alpha\n")
	assert.Contains(t, names, "nodegroup/manual\n")
	require.Eventually(t, func() bool {
		code, _ := srv.api(t, http.MethodGet, "/api/v1/tenants/gitops/nodegroups/beta", "", "")
		return code == http.StatusNotFound
	}, 30*time.Second, 50*time.Millisecond)
	assert.Equal(t, "nodegroup/labelled\n", tc.ok("get", "ng", "-t", "other", "-o", "name"))
}

// TestOperationsEndToEnd drives provider credentials, cancel, state, machine
// logs and config render against a real server. tofu is a stand-in script
// (testdata/gitops/fake-tofu.sh) that takes the state lock and writes a state
// through the server's HTTP backend, with the apply's credentials, then runs
// until it is canceled: a real apply, lock and state, without a cloud.
func TestOperationsEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server")
	}
	fake, err := filepath.Abs("testdata/gitops/fake-tofu.sh")
	require.NoError(t, err)
	// Its machines are registered on loopback (none answers, or an
	// emulator's node), which the operator allows.
	srv := startServer(t, "--tofu", fake, "--apply-debounce", "100ms", "--metal-networks", "127.0.0.0/8")
	tc := newTestCLI(t)
	tc.now = time.Now()
	tc.ok("config", "set-context", "e2e", "--server", srv.url, "--token", srv.token, "--tenant", "slow")

	for _, w := range []struct{ path, body string }{
		{"/api/v1/providers", `{"metadata":{"name":"slow-emu"},"spec":{"type":"emulated","config":{"endpoint":"http://127.0.0.1:1"}}}`},
		{"/api/v1/tenants", `{"metadata":{"name":"slow"},"spec":{"controlPlane":{"endpoint":"https://10.0.0.1:6443"}}}`},
		{"/api/v1/tenants/slow/nodegroups", `{"metadata":{"name":"workers"},"spec":{"role":"worker","count":1,"provider":"slow-emu"}}`},
		// Nothing answers the Talos API on this address.
		{"/api/v1/tenants/slow/machines", `{"metadata":{"name":"w-1"},"spec":{"nodeGroup":"workers","role":"worker","address":"127.0.0.1"}}`},
		{"/api/v1/users", `{"metadata":{"name":"editor"},"spec":{"role":"edit"}}`},
	} {
		code, body := srv.api(t, http.MethodPost, w.path, "application/json", w.body)
		require.Equal(t, http.StatusCreated, code, string(body))
	}
	code, body := srv.api(t, http.MethodPost, "/api/v1/apitokens", "application/json", `{"metadata":{"name":"editor-token"},"spec":{"user":"editor"}}`)
	require.Equal(t, http.StatusCreated, code, string(body))
	m := regexp.MustCompile(`"token":"([^"]+)"`).FindStringSubmatch(string(body))
	require.NotNil(t, m, "the token is in the answer: %s", body)
	editor := tc.with(t)
	editor.config = filepath.Join(t.TempDir(), "editor-config")
	editor.ok("config", "set-context", "ed", "--server", srv.url, "--token", m[1], "--tenant", "slow")

	t.Run("provider credentials", func(t *testing.T) {
		tc := tc.with(t)
		assert.Equal(t, "credential/lab created (OS_PASSWORD, OS_USERNAME)\n",
			tc.ok("create", "credential", "lab", "--from-literal", "OS_USERNAME=ci", "--from-literal", "OS_PASSWORD=literal-secret"))
		r := tc.run("create", "credential", "lab", "--from-literal", "OS_USERNAME=ci")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, `credentials "lab" exist: give --overwrite to replace them`)
		assert.Equal(t, "credential/lab replaced (OS_PASSWORD, OS_PROJECT_NAME, OS_USERNAME)\n",
			tc.ok("create", "credential", "lab", "--from-env-file", "testdata/gitops/creds.env", "--overwrite"))

		// The server's validation, field by field.
		r = tc.run("create", "credential", "bad", "--from-literal", "TF_VAR_x=1", "--from-literal", "lower=2")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "Error from server (Invalid)")
		assert.Contains(t, r.stderr, "data[TF_VAR_x]:")
		assert.Contains(t, r.stderr, "data[lower]: an environment variable name must match")

		one := tc.ok("get", "credentials", "lab")
		assert.Regexp(t, `^NAME +KEYS +PROVIDERS\nlab +OS_PASSWORD,OS_PROJECT_NAME,OS_USERNAME +<none>\n$`, one)
		// Without a name: the credentials Providers name.
		code, body := srv.api(t, http.MethodPost, "/api/v1/providers", "application/json",
			`{"metadata":{"name":"lab-emu"},"spec":{"type":"emulated","config":{"endpoint":"http://127.0.0.1:1"},"credentialsRef":{"name":"lab"}}}`)
		require.Equal(t, http.StatusCreated, code, string(body))
		code, body = srv.api(t, http.MethodPost, "/api/v1/providers", "application/json",
			`{"metadata":{"name":"gone-emu"},"spec":{"type":"emulated","config":{"endpoint":"http://127.0.0.1:1"},"credentialsRef":{"name":"never-stored"}}}`)
		require.Equal(t, http.StatusCreated, code, string(body))
		all := tc.ok("get", "credentials")
		assert.Regexp(t, `^NAME +KEYS +PROVIDERS\nlab +OS_PASSWORD,OS_PROJECT_NAME,OS_USERNAME +lab-emu\nnever-stored +<missing> +gone-emu\n$`, all)
		js := tc.ok("get", "creds", "-o", "json")
		for _, out := range []string{one, all, js} {
			assert.NotContains(t, out, "secret", "values are never shown")
		}
		assert.Contains(t, js, `"keys": [`)

		r = editor.with(t).run("get", "credentials", "lab")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "Error from server (Forbidden)")
	})

	// The apply the tenant's creation started, once the stand-in tofu holds the lock.
	var apply string
	require.Eventually(t, func() bool {
		var versions struct {
			Lock *struct {
				ApplyID string `json:"applyID"`
			} `json:"lock"`
			Items []json.RawMessage `json:"items"`
		}
		code, body := srv.api(t, http.MethodGet, "/api/v1/tenants/slow/state/versions", "", "")
		if code != http.StatusOK || json.Unmarshal(body, &versions) != nil || versions.Lock == nil || len(versions.Items) == 0 {
			return false
		}
		apply = versions.Lock.ApplyID
		return true
	}, 60*time.Second, 100*time.Millisecond, "the stand-in tofu takes the lock and writes a state")

	t.Run("state", func(t *testing.T) {
		tc := tc.with(t)
		out := tc.ok("state", "list")
		assert.Regexp(t, `^REVISION +SERIAL +LINEAGE +SIZE +ENCRYPTED +AGE\n\d+ +7 +fake-lineage +\d+B? +true +\S+\n`, out)
		assert.Contains(t, out, "Locked: lock fake-lock-1 of apply "+apply+" (OperationTypeApply by fake-tofu@e2e) since 2026-05-01T11:00:00Z\n")
		assert.JSONEq(t, `{"version":4,"serial":7,"lineage":"fake-lineage","encryption_version":"v0","encrypted_data":"e30="}`, tc.ok("state", "show", "-t", "slow"))
		rev := strings.Fields(strings.Split(out, "\n")[1])[0]
		assert.Contains(t, tc.ok("state", "show", "--revision", rev), "fake-lineage")
		r := tc.run("state", "show", "--revision", "999999")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "Error from server (NotFound)")

		// An editor reads state but may not force-unlock it.
		assert.Contains(t, editor.with(t).ok("state", "list"), "Locked: lock fake-lock-1")
		r = editor.with(t).run("state", "unlock")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "Error from server (Forbidden)")

		assert.Equal(t, "released the lock fake-lock-1 of apply "+apply+" (OperationTypeApply by fake-tofu@e2e) since 2026-05-01T11:00:00Z on the state of tenant slow\n",
			tc.ok("state", "unlock"))
		assert.Contains(t, tc.ok("state", "list"), "Locked: no\n")
		r = tc.run("state", "unlock")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "Error from server (NotFound): the terraform state of tenant slow is not locked")
	})

	t.Run("cancel", func(t *testing.T) {
		tc := tc.with(t)
		assert.Equal(t, "apply/"+apply+": apply "+apply+" is being canceled\n", tc.ok("cancel", "apply/"+apply))
		require.Eventually(t, func() bool {
			return strings.Contains(tc.ok("get", "applies", apply, "-o", "json"), `"phase": "Canceled"`)
		}, 30*time.Second, 100*time.Millisecond)
		r := tc.run("cancel", "apply", apply)
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "Error from server (Conflict)")
		assert.Contains(t, r.stderr, "the apply has already finished (Canceled)")

		code, body := srv.api(t, http.MethodPost, "/api/v1/tenants/slow/upgrades", "application/json",
			`{"metadata":{"name":"to-v1-13-1"},"spec":{"talosVersion":"v1.13.1"}}`)
		require.Equal(t, http.StatusCreated, code, string(body))
		// The upgrade may end before the cancel reaches it (the tenant has no
		// machines to upgrade); the CLI then says so, as for the apply above.
		if r := tc.run("cancel", "upgrade/to-v1-13-1"); r.code == 0 {
			assert.Equal(t, "upgrade/to-v1-13-1: upgrade to-v1-13-1 stops after the machine it is upgrading\n", r.stdout)
			assert.Contains(t, tc.ok("get", "upgrade", "to-v1-13-1", "-o", "yaml"), "cancelRequested: true")
		} else {
			assert.Equal(t, 1, r.code)
			assert.Contains(t, r.stderr, "Error from server (Conflict)")
			assert.Contains(t, r.stderr, "the upgrade has already finished")
		}

		r = tc.run("cancel", "upgrade/nope")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "Error from server (NotFound)")
		r = tc.run("cancel", "tenant/slow")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "give apply/NAME or upgrade/NAME")
	})

	t.Run("config render", func(t *testing.T) {
		tc := tc.with(t)
		var out string
		require.Eventually(t, func() bool {
			r := tc.run("config", "render", "machine/w-1")
			out = r.stdout
			return r.code == 0
		}, 30*time.Second, 100*time.Millisecond, "the tenant's PKI is made")
		assert.Contains(t, out, "machine:\n    type: worker\n")
		assert.Contains(t, out, "https://10.0.0.1:6443")
		file := filepath.Join(t.TempDir(), "w-1.yaml")
		assert.Equal(t, `wrote the config of machine "w-1" in tenant "slow" to `+file+"\n", tc.ok("config", "render", "machine", "w-1", "-o", file))
		st, err := os.Stat(file)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
		assert.Contains(t, tc.ok("config", "render", "nodegroup/workers"), "type: worker")
		// The tenant's secrets only on a global admin's request (finding 1 of
		// the 2026-12-06 review); an editor asking is refused.
		assert.Contains(t, out, "# RezusCloud left out the secrets of this config")
		assert.Regexp(t, `\n    token: ""\n`, out)
		full := tc.ok("config", "render", "machine/w-1", "--include-secrets")
		assert.NotContains(t, full, "left out")
		assert.Regexp(t, `\n    token: [a-z0-9]{6}\.[a-z0-9]{16}\n`, full)
		r := editor.with(t).run("config", "render", "machine/w-1", "--include-secrets")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "Error from server (Forbidden)")
		r = tc.run("config", "render", "machine/nope")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "Error from server (NotFound)")
	})

	t.Run("machine logs", func(t *testing.T) {
		tc := tc.with(t)
		r := tc.run("logs", "machine/w-1")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "name the log: --service SERVICE")
		r = tc.run("logs", "machine/nope", "--service", "kubelet")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, `Error from server (NotFound): machine "nope" not found`)
		r = tc.run("logs", "machine/w-1", "--service", "Not A Service")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "service: \"Not A Service\" is not a service id")
		// The server reaches for the node's Talos API, which does not answer.
		for _, args := range [][]string{{"--service", "kubelet"}, {"--dmesg"}} {
			r = tc.run(append([]string{"logs", "machine/w-1"}, args...)...)
			assert.Equal(t, 1, r.code, r.stdout)
			assert.Contains(t, r.stderr, "Error from server (ServiceUnavailable)", args)
			assert.Contains(t, r.stderr, "(127.0.0.1:50000) is unreachable", args)
		}
	})

	t.Run("machine logs from a node", func(t *testing.T) {
		tc := tc.with(t)
		// A Talos node (the emulator) booted with the config the server
		// renders for the machine, so it serves mTLS with the tenant's PKI.
		ctx, cancel := context.WithCancel(context.Background())
		em, err := emulator.New(emulator.Config{StateDir: t.TempDir(), Addressing: emulator.AddressingLoopback})
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- em.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		<-em.Ready()
		ip, err := em.ReserveAddress(ctx, emulator.AddressSpec{Name: "logs-cp-1"})
		require.NoError(t, err)
		for _, w := range []struct{ path, body string }{
			{"/api/v1/tenants", `{"metadata":{"name":"logs"},"spec":{"controlPlane":{"endpoint":"https://` + ip.Address + `:6443"}}}`},
			{"/api/v1/tenants/logs/nodegroups", `{"metadata":{"name":"cp"},"spec":{"role":"controlplane","count":1,"provider":"slow-emu"}}`},
			{"/api/v1/tenants/logs/machines", `{"metadata":{"name":"cp-1"},"spec":{"nodeGroup":"cp","role":"controlplane","address":"` + ip.Address + `"}}`},
		} {
			code, body := srv.api(t, http.MethodPost, w.path, "application/json", w.body)
			require.Equal(t, http.StatusCreated, code, string(body))
		}
		var cfg string
		require.Eventually(t, func() bool {
			// The node needs its keys: a global admin's render with them.
			r := tc.run("config", "render", "machine/cp-1", "-t", "logs", "--include-secrets")
			cfg = r.stdout
			return r.code == 0
		}, 30*time.Second, 100*time.Millisecond, "the tenant's PKI is made")
		_, err = em.Create(ctx, emulator.NodeSpec{Name: "cp-1", Cluster: "logs", UserData: []byte(cfg), Address: ip.Address})
		require.NoError(t, err)

		var out string
		require.Eventually(t, func() bool {
			r := tc.run("logs", "machine/cp-1", "-t", "logs", "--service", "kubelet")
			out = r.stdout
			return r.code == 0
		}, 30*time.Second, 100*time.Millisecond, "the node answers with the tenant's PKI")
		assert.Regexp(t, `(?m)^\S+ kubelet: starting\n\S+ kubelet: running on talos v\S+$`, out)
		assert.Contains(t, tc.ok("logs", "machine", "cp-1", "-t", "logs", "--service", "etcd", "--tail", "10"), "etcd: running on talos")
		assert.NotEmpty(t, tc.ok("logs", "machine/cp-1", "-t", "logs", "--dmesg"))
		r := tc.run("logs", "machine/cp-1", "-t", "logs", "--service", "no-such-service")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "Error from server (NotFound)")

		// -f streams until the command is stopped.
		stdout, stderr, stop := tc.start("logs", "machine/cp-1", "-t", "logs", "--service", "apid", "-f")
		require.Eventually(t, func() bool { return strings.Contains(stdout.String(), "apid: running on talos") }, 30*time.Second, 50*time.Millisecond)
		assert.Equal(t, 0, stop(), stderr.String())
	})
}
