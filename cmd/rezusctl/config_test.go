package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConfigFileModes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a", "b", "config")
	cfg := &configFile{CurrentContext: "lab", Contexts: []*contextEntry{{Name: "lab", Server: "https://x", Token: "secret",
		CertificateAuthority: "/ca.pem", InsecureSkipTLSVerify: true, Tenant: "acme"}}}
	require.NoError(t, cfg.save(path))

	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the file holds tokens")
	for _, d := range []string{filepath.Join(dir, "a"), filepath.Join(dir, "a", "b")} {
		st, err := os.Stat(d)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o700), st.Mode().Perm(), d)
	}

	// A file left readable by others is tightened on the next save.
	require.NoError(t, os.Chmod(path, 0o644))
	require.NoError(t, cfg.save(path))
	st, _ = os.Stat(path)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	entries, _ := os.ReadDir(filepath.Dir(path))
	assert.Len(t, entries, 1, "no temporary files left behind")

	got, err := loadConfig(path)
	require.NoError(t, err)
	assert.Equal(t, cfg, got)

	golden, err := os.ReadFile("testdata/config.golden")
	require.NoError(t, err)
	written, _ := os.ReadFile(path)
	assert.Equal(t, string(golden), string(written))
}

func TestConfigMissingAndBroken(t *testing.T) {
	dir := t.TempDir()
	cfg, err := loadConfig(filepath.Join(dir, "none"))
	require.NoError(t, err)
	assert.Empty(t, cfg.Contexts)

	bad := filepath.Join(dir, "bad")
	require.NoError(t, os.WriteFile(bad, []byte("contexts: [{server: x}]\n"), 0o600))
	_, err = loadConfig(bad)
	assert.ErrorContains(t, err, "has no name")
	require.NoError(t, os.WriteFile(bad, []byte("contexts: {\n"), 0o600))
	_, err = loadConfig(bad)
	assert.ErrorContains(t, err, "reading config")
}

func TestConfigPath(t *testing.T) {
	env := map[string]string{"HOME": "/home/u"}
	get := func(k string) string { return env[k] }
	p, err := configPath(get)
	require.NoError(t, err)
	assert.Equal(t, "/home/u/.config/rezus/config", p)
	env["REZUSCONFIG"] = "/etc/rezus.yaml"
	p, _ = configPath(get)
	assert.Equal(t, "/etc/rezus.yaml", p)
}

func TestConfigCommands(t *testing.T) {
	tc := newTestCLI(t)
	tc.config = "" // the default: ~/.config/rezus/config
	path := filepath.Join(tc.env["HOME"], ".config", "rezus", "config")

	r := tc.run("config", "current-context")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "no current context")

	assert.Equal(t, "context \"lab\" set\n", tc.ok("config", "set-context", "lab", "--server", "https://lab:8443", "--token", "t1", "--tenant", "acme"))
	assert.Equal(t, "lab\n", tc.ok("config", "current-context"), "the first context becomes current")
	tc.ok("config", "set-context", "prod", "--server", "https://prod", "--certificate-authority", "ca.pem", "--insecure-skip-tls-verify")
	assert.Equal(t, "lab\n", tc.ok("config", "current-context"), "later ones do not")

	// Only the settings given change.
	tc.ok("config", "set-context", "lab", "--tenant", "other")
	cfg, err := loadConfig(path)
	require.NoError(t, err)
	lab := cfg.context("lab")
	assert.Equal(t, &contextEntry{Name: "lab", Server: "https://lab:8443", Token: "t1", Tenant: "other"}, lab)
	prod := cfg.context("prod")
	assert.True(t, filepath.IsAbs(prod.CertificateAuthority), "relative CA paths are stored absolute")
	assert.True(t, prod.InsecureSkipTLSVerify)

	assert.Equal(t, "switched to context \"prod\"\n", tc.ok("config", "use-context", "prod"))
	assert.Equal(t, "prod\n", tc.ok("config", "current-context"))
	assert.Equal(t, ""+
		"CURRENT   NAME   SERVER             TENANT   AUTH\n"+
		"          lab    https://lab:8443   other    token\n"+
		"*         prod   https://prod       <none>   <none>\n", tc.ok("config", "get-contexts"))

	r = tc.run("config", "use-context", "nope")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `context "nope" is not in`)

	tc.ok("config", "delete-context", "prod")
	r = tc.run("config", "current-context")
	assert.Equal(t, 1, r.code, "deleting the current context clears it")

	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	st, err = os.Stat(filepath.Dir(path))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm())
}

func TestContextSelection(t *testing.T) {
	f, srv := newFakeAPI(t)
	f.put("/api/v1/tenants/acme", obj("Tenant", "", "acme", tcNow, `{}`, ``, nil))
	tc := newTestCLI(t)
	tc.ok("config", "set-context", "good", "--server", srv.URL, "--token", "tok")
	tc.ok("config", "set-context", "badtoken", "--server", srv.URL, "--token", "wrong", "--current")

	r := tc.run("get", "tenants", "-o", "name")
	assert.Equal(t, 1, r.code, "the current context's token is used")
	assert.Contains(t, r.stderr, "Error from server (Unauthorized)")

	assert.Equal(t, "tenant/acme\n", tc.ok("get", "tenants", "-o", "name", "--context", "good"))
	assert.Equal(t, "tenant/acme\n", tc.ok("get", "tenants", "-o", "name", "--token", "tok"), "--token overrides the context")

	r = tc.run("get", "tenants", "--context", "missing")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, `context "missing" is not in`)

	tc.ok("config", "delete-context", "badtoken")
	tc.ok("config", "delete-context", "good")
	r = tc.run("get", "tenants")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "no server")
	assert.Equal(t, "tenant/acme\n", tc.ok("--server", srv.URL, "--token", "tok", "get", "tenants", "-o", "name"), "flags alone are enough")
}
